"""fl.quality --run: the sets a Fedssyn run dealt, found by its config in the generator cache and checked against the
synthetic_sha256 its provenance recorded; the report named by that digest; one line for every way it cannot be."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from fl import quality
from fl.run import main as run_main
from tests.fl.synthesis.conftest import MeanImage


def fedssyn_run(root, out, cache, method="fedssyn"):
    args = [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='mlp'", "--set", "train.rounds=1",
        "--set", "train.batch_size=16", "--set", "train.device='cpu'", "--set", f"method.name='{method}'",
        "--set", "method.n_tilde=10", "--set", f"method.cache_dir='{cache}'", "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert run_main(args) == 0
    return out


@pytest.fixture()
def run(cifar_root, tmp_path, monkeypatch):
    from fl.synthesis import fedssyn

    monkeypatch.setattr(fedssyn, "build_generator", lambda name, shape, n, overrides, device="cpu": MeanImage(shape, n))
    return fedssyn_run(cifar_root, tmp_path / "run", tmp_path / "cache")


def measure(capsys, *argv) -> dict:
    assert quality.main([*map(str, argv), "--epochs", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_sets_a_run_dealt_are_measured_and_named_by_their_digest(run, tmp_path, capsys):
    recorded = json.loads((run / "provenance.json").read_text())["synthetic_sha256"]
    report = measure(capsys, "--run", run, "--out", tmp_path / "q.json")
    assert report["chosen_by"] == "run" and report["synthetic_sha256"] == recorded
    assert [s["client"] for s in report["sets"]] == [0, 1, 2, 3] and report["images"] == 40
    assert report["generator"] == "ddpm" and report["seed"] == 0 and report["dataset"] == "cifar10"
    assert quality.report_name(report) == f"ddpm-cifar10-seed0-sets{recorded}.json"
    assert json.loads((tmp_path / "q.json").read_text()) == report
    # the cache moved: the run's method.cache_dir no longer holds it; CACHE_DIR names where it is now
    shutil.move(tmp_path / "cache", tmp_path / "moved")
    assert quality.main(["--run", str(run), "--epochs", "1"]) == 2
    assert "no such generator cache (name where it is now: CACHE_DIR)" in capsys.readouterr().err
    moved = measure(capsys, "--run", run, tmp_path / "moved")
    assert {k: v for k, v in moved.items() if k not in ("sets",)} == {
        k: v for k, v in report.items() if k not in ("sets",)
    } and [s["sha256"] for s in moved["sets"]] == [s["sha256"] for s in report["sets"]]


def one_line_error(capsys, argv, said: str) -> None:
    try:
        code = quality.main(list(map(str, argv)))
    except SystemExit as stop:  # a usage error: argparse's exit
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_sets_remade_or_missing_are_refused_in_one_line(run, tmp_path, capsys):
    sets = sorted((tmp_path / "cache").glob("client*/synthetic-*.npz"))
    assert len(sets) == 4
    with np.load(sets[1]) as held:
        x, y = held["x"], held["y"]
    np.savez_compressed(sets[1], x=255 - x, y=y)  # remade since the run dealt it
    one_line_error(capsys, ["--run", run], "not to the")
    sets[1].unlink()
    one_line_error(capsys, ["--run", run], "no synthetic set of client 1")


def test_a_run_without_such_sets_and_bad_arguments_are_one_line(run, cifar_root, tmp_path, capsys):
    plain = fedssyn_run(cifar_root, tmp_path / "plain", tmp_path / "cache", method="none")
    capsys.readouterr()  # the run's own note on the fedssyn keys it ignored
    one_line_error(capsys, ["--run", plain], "deals no sets of per-client generators")
    one_line_error(capsys, ["--run", run, "--seed", "1"], "--run takes the sets' --seed from the run's config")
    one_line_error(capsys, [tmp_path / "cache"], "name the sets: CACHE_DIR and --seed, or --run RUN_DIR")
    one_line_error(capsys, ["--run", tmp_path / "nowhere"], "config.json")
