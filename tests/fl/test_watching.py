"""Watching a run (issue 68, item 4): off a terminal a run prints a line per round (round, test accuracy and loss,
seconds), on one the progress bar stays, ``--quiet`` prints neither; every run folder gets its learning curve
``curve.png`` (a resume draws it again); a method's own logged numbers reach TensorBoard (a list as its mean, min,
max and last); the MLflow sink (a local store, offline) holds every round once across a resume, takes a run's
earlier rounds when given at a resume, keeps one MLflow run per arm and seed of a sweep, and changes no number;
without mlflow-skinny, ``--mlflow`` is one line naming the extra."""

from __future__ import annotations

import json
import re
import sys

import pytest

import fl.loop as loop_module
from fl.run import main
from fl.sweep import main as sweep_main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at, plugin_folder
from tests.fl.test_run import base_args, metrics
from tests.fl.test_sinks import scalars
from tests.fl.test_sweep import sets


def rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def loud(argv: list[str]) -> list[str]:
    """fl.run's arguments without --quiet."""
    return [a for a in argv if a != "--quiet"]


ROUND_LINE = re.compile(r": round (\d+)/4: test accuracy (\d\.\d{4}), test loss (\d+\.\d{4}), (\d+\.\d\d) s$")


def test_off_a_terminal_a_run_prints_a_line_per_round(cifar_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(loud(base_args(cifar_root, out))) == 0  # pytest's capture is no terminal
    printed = capsys.readouterr().out.splitlines()
    found = [ROUND_LINE.search(line) for line in printed if ": round " in line]
    assert [int(m.group(1)) for m in found] == [1, 2, 3, 4], printed
    written = rows(out)
    assert [float(m.group(2)) for m in found] == [round(r["test_accuracy"], 4) for r in written]
    assert [float(m.group(3)) for m in found] == [round(r["test_loss"], 4) for r in written]
    assert "final test accuracy" in printed[-1]  # the closing line as before


def test_quiet_or_a_terminal_prints_no_line_per_round(cifar_root, tmp_path, capsys, monkeypatch):
    assert main(base_args(cifar_root, tmp_path / "quiet")) == 0
    assert ": round " not in capsys.readouterr().out
    monkeypatch.setattr(loop_module, "is_terminal", lambda stream: True)  # both streams a terminal: the bar alone
    assert main(loud(base_args(cifar_root, tmp_path / "terminal"))) == 0
    assert ": round " not in capsys.readouterr().out


def test_a_line_says_when_a_round_was_not_evaluated(cifar_root, tmp_path, capsys):
    assert main(loud(base_args(cifar_root, tmp_path / "run", "--set", "train.eval_every=3"))) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if ": round " in line]
    assert ["not evaluated" in line for line in lines] == [True, True, False, False]  # rounds 3 and 4 (the last)


def test_every_run_folder_gets_its_learning_curve_and_a_resume_draws_it_again(cifar_root, tmp_path, monkeypatch):
    out = tmp_path / "run"
    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, out)) == 2
    assert not (out / "curve.png").exists()  # drawn when a run ends
    resume()
    assert main(["--resume", str(out), "--quiet"]) == 0
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (out / "curve.png").unlink()
    assert main(["--resume", str(out), "--quiet"]) == 0  # a finished run: its summary and figures again
    assert (out / "curve.png").stat().st_size > 0


LOGGED = '''
"""A method that logs numbers of its own: one per round on the server, one per client after local training."""
from dataclasses import dataclass
from typing import ClassVar

from fl.methods import Method


@dataclass(frozen=True)
class Logged(Method):
    name: ClassVar[str] = "logged"

    def after_client(self, c, y):
        c.log["change"] = [*c.log.get("change", []), float((y - c.x).norm())]

    def after_aggregate(self, s):
        s.log["server_norm"] = float(s.x.norm())
        s.log["note"] = "words are not numbers"
        return s.x
'''


def test_a_methods_own_logged_numbers_reach_tensorboard(cifar_root, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    plugin_folder(tmp_path, monkeypatch, {"logged": LOGGED})
    out, curves = tmp_path / "run", tmp_path / "tb"
    argv = base_args(cifar_root, out, "--set", "method.name='logged:Logged'", "--set", "train.workers=1")
    assert main([*argv, "--tensorboard", str(curves)]) == 0
    written = rows(out)
    assert [v for _, v in scalars(curves, "method/server_norm")] == pytest.approx(
        [r["method"]["server_norm"] for r in written]
    )
    for stat, of in (("mean", lambda v: sum(v) / len(v)), ("min", min), ("max", max), ("last", lambda v: v[-1])):
        found = scalars(curves, f"method/change/{stat}")
        assert [s for s, _ in found] == [1, 2, 3, 4]
        assert [v for _, v in found] == pytest.approx([of(r["method"]["change"]) for r in written], rel=1e-6)


def mlflow_runs(store) -> tuple:
    """(a client of the store, its runs)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store.resolve().as_uri())
    experiment = client.get_experiment_by_name("shufflefl")
    return client, client.search_runs([experiment.experiment_id])


def history(store, run, key: str) -> list[tuple[int, float]]:
    client, _ = mlflow_runs(store)
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


def test_mlflow_holds_every_round_once_across_a_resume_and_changes_no_number(cifar_root, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    plain, logged, store = tmp_path / "plain", tmp_path / "logged", tmp_path / "mlruns"
    extra = ("--set", "train.estimate_every=2")
    assert main(base_args(cifar_root, plain, *extra)) == 0
    resume = interrupt_at(monkeypatch, 4)  # rounds 1-3 logged; the resume writes round 4 alone
    assert main(base_args(cifar_root, logged, *extra, "--mlflow", str(store))) == 2
    resume()
    assert main(["--resume", str(logged), "--quiet"]) == 0  # the store is in its config.json
    assert metrics(plain) == metrics(logged)
    written = rows(logged)
    _, found = mlflow_runs(store)
    assert len(found) == 1
    run = found[0]
    assert run.data.tags["shufflefl.run_folder"] == str(logged.resolve()) and run.info.status == "FINISHED"
    assert run.data.params["data.dataset"] == "cifar10" and run.data.params["model.name"] == "mlp"
    assert "log.mlflow" not in run.data.params and run.data.tags["train.rounds"] == "4"
    assert history(store, run, "test_accuracy") == pytest.approx([(r["round"], r["test_accuracy"]) for r in written])
    assert [s for s, _ in history(store, run, "estimates/zeta2")] == [1, 2, 4]
    assert [s for s, _ in history(store, run, "seconds_per_round")] == [1, 2, 3, 4]
    assert main(["--resume", str(logged), "--quiet", "--set", "train.rounds=5"]) == 0  # extended: on in the same run
    _, found = mlflow_runs(store)
    assert len(found) == 1 and found[0].data.tags["train.rounds"] == "5"
    assert [s for s, _ in history(store, found[0], "test_accuracy")] == [1, 2, 3, 4, 5]


def test_mlflow_given_at_resume_takes_the_earlier_rounds_too(cifar_root, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    out, store = tmp_path / "run", tmp_path / "mlruns"
    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, out)) == 2
    resume()
    assert main(["--resume", str(out), "--quiet", "--mlflow", str(store)]) == 0
    _, (run,) = mlflow_runs(store)
    assert [s for s, _ in history(store, run, "test_accuracy")] == [1, 2, 3, 4]


def test_a_sweep_keeps_one_mlflow_run_per_arm_and_seed_in_one_store(cifar_root, tmp_path):
    pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    args = [*sets(cifar_root), "--vary", "data.p=0.5", "--seeds", "0,1", "--out", str(tmp_path / "s"), "--quiet"]
    assert sweep_main([*args, "--mlflow", str(store)]) == 0
    assert sweep_main([*args, "--mlflow", str(store)]) == 0  # reused runs: nothing written twice
    _, found = mlflow_runs(store)
    folders = {run.data.tags["shufflefl.run_folder"]: run for run in found}
    assert len(found) == 4
    for name in ("base", "data.p=0.5"):
        for seed in (0, 1):
            folder = tmp_path / "s" / name / f"seed{seed}"
            expected = [(r["round"], r["test_accuracy"]) for r in rows(folder)]
            assert history(store, folders[str(folder.resolve())], "test_accuracy") == pytest.approx(expected)


def test_without_mlflow_the_flag_is_one_line_naming_the_extra(cifar_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    out = tmp_path / "run"
    assert_one_line_config_error(base_args(cifar_root, out, "--mlflow", str(tmp_path / "mlruns")),
                                 "pip install 'shufflefl[mlflow]'", capsys)  # fmt: skip
    assert not out.exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("where", ["a file", "a folder"])
def test_a_link_in_the_mlflow_store_is_refused_in_one_line_and_nothing_written_through_it(
    cifar_root, tmp_path, capsys, where
):
    """Fourth sweep, cases 9 and 11: MLflow's file store writes its own files, so a link anywhere in the store (at
    a metric's file, or a run's folder pointing at a user's) is refused before MLflow is handed the store."""
    pytest.importorskip("mlflow")
    out, store = tmp_path / "run", tmp_path / "mlruns"
    assert main(base_args(cifar_root, out, "--mlflow", str(store))) == 0
    victim = tmp_path / "victim"
    if where == "a file":
        planted = next(p for p in store.rglob("test_accuracy") if p.is_file())
        victim.write_text(planted.read_text())
        planted.unlink()
        planted.symlink_to(victim)
    else:
        experiment = next(p for p in store.iterdir() if p.is_dir() and p.name not in (".trash", "0"))
        victim.mkdir()
        (store / "linked").symlink_to(victim, target_is_directory=True)
        assert experiment.exists()
    before = sorted((p.name, p.read_bytes() if p.is_file() else b"") for p in [victim, *victim.rglob("*")])
    capsys.readouterr()
    assert main(["--resume", str(out), "--quiet", "--set", "train.rounds=4"]) == 2
    err = capsys.readouterr().err
    assert "holds a symbolic link" in err and err.count("\n") == 1 and "Traceback" not in err
    assert sorted((p.name, p.read_bytes() if p.is_file() else b"") for p in [victim, *victim.rglob("*")]) == before
