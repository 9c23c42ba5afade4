"""python -m fl.sweep on the tiny CIFAR-10 copy of test_run.py: the runs it plans, the table and figure it writes,
reuse of finished runs, aggregation over seeds, one-line errors."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import fl.sweep as sweep_module
from fl.atomic import locked
from fl.config import load_config
from fl.runfolder import RUN_LOCK
from fl.sweep import aggregate, earlier_sweep, main, parse_seeds, parse_vary, plan
from theory.cli import OWNER
from theory.errors import InputError


def sets(root):
    pairs = [
        ("data.dataset", "'cifar10'"), ("data.data_root", f"'{root}'"), ("data.partition", "'iid'"),
        ("data.clients", "2"), ("model.name", "'mlp'"), ("train.rounds", "2"), ("train.batch_size", "32"),
        ("train.device", "'cpu'"),
    ]  # fmt: skip
    return [arg for key, value in pairs for arg in ("--set", f"{key}={value}")]


def test_parse_vary_and_plan():
    key, overrides = parse_vary("data.p=0, 0.1,0.2")
    assert key == "data.p" and overrides == ["data.p=0", "data.p=0.1", "data.p=0.2"]
    one = plan(["train.rounds=3"], [("a.x", ["a.x=1", "a.x=2"]), ("b.y", ["b.y=3"])], product=False)
    assert one == [
        ("base", ["train.rounds=3"]),
        ("a.x=1", ["train.rounds=3", "a.x=1"]),
        ("a.x=2", ["train.rounds=3", "a.x=2"]),
        ("b.y=3", ["train.rounds=3", "b.y=3"]),
    ]
    both = plan([], [("a.x", ["a.x=1", "a.x=2"]), ("b.y", ["b.y=3", "b.y=4"])], product=True)
    assert [name for name, _ in both] == ["base", "a.x=1,b.y=3", "a.x=1,b.y=4", "a.x=2,b.y=3", "a.x=2,b.y=4"]


@pytest.mark.parametrize("text", ["data.p", "data.p=", "data=1,2"])
def test_bad_vary_is_input_error(text):
    with pytest.raises(InputError):
        parse_vary(text)


def test_aggregate_mean_and_sd_over_seeds():
    summaries = [
        {"final_test_accuracy": a, "best_test_accuracy": a, "rounds_to_target": r, "estimates_mean": {"delta2": d}}
        for a, r, d in [(0.5, 3, 1.0), (0.7, None, 3.0)]
    ]
    row = aggregate("x", summaries)
    assert row["final_test_accuracy"] == pytest.approx(0.6)
    assert row["final_test_accuracy_std"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert row["rounds_to_target"] == 3 and row["reached_target"] == 1 and row["delta2"] == pytest.approx(2.0)
    assert np.isnan(row["zeta2_ratio"])


def test_sweep_runs_writes_table_and_figure_and_reuses_runs(cifar_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    args = [*sets(cifar_root), "--vary", "data.p=0,0.5", "--seeds", "0,1", "--out", str(out), "--quiet"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "data.p=0 is the base config" in printed  # p = 0 is the default: not run twice
    with (out / "table.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["run"] for r in rows] == ["base", "data.p=0.5"] and all(r["seeds"] == "2" for r in rows)
    assert (out / "sweep.png").stat().st_size > 0
    for name in ("base", "data.p=0.5"):
        for seed in (0, 1):
            summary = json.loads((out / name / f"seed{seed}" / "summary.json").read_text())
            config = json.loads((out / name / f"seed{seed}" / "config.json").read_text())
            assert config["train"]["seed"] == seed and summary["rounds"] == 2
            assert config["data"]["p"] == (0.5 if name != "base" else 0.0)
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    finals = [s["final_test_accuracy"] for s in runs["data.p=0.5"]["summaries"]]
    assert float(rows[1]["final_test_accuracy"]) == pytest.approx(np.mean(finals))

    calls = []
    monkeypatch.setattr(sweep_module, "execute", lambda *a, **k: calls.append(a))
    assert main(args) == 0
    assert calls == []  # every run was finished: nothing re-executed


def test_sweep_refuses_a_folder_of_another_config(cifar_root, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main([*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main([*sets(cifar_root), "--set", "train.rounds=3", "--seeds", "0", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.sweep: error:") and "another config" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--seeds", "a,b"], "--seeds"),
        (["--seeds", "1,1"], "--seeds"),
        (["--no-base"], "--no-base"),
        (["--vary", "data.p=0.1", "--vary", "data.p=0.2"], "each key once"),
        (["--vary", "data.p=2"], "data.p"),
        (["--vary", "train.nope=1"], "train.nope"),
        (["--set", "train.seed=-1"], "--seeds"),  # the seeds come from --seeds: a train.seed would be ignored
        (["--vary", "train.seed=1,2"], "--seeds"),
    ],
)
def test_bad_sweep_arguments_are_one_line_exit_2(extra, message, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "s"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.sweep: error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "s").exists()  # every config is checked before anything runs or is written


# --------------------------------------------------------------------------- hardening (issue 37)


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.sweep: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_sweep_refuses_a_folder_it_did_not_make_unless_overwrite(cifar_root, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "table.csv").write_text("my own table\n")
    before = snapshot(out)
    args = [*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]
    assert main(args) == 2
    assert "(--overwrite too)" in one_line_error(capsys) and snapshot(out) == before
    assert main([*args, "--overwrite"]) == 2  # the sweep would replace the user's table.csv: --overwrite too
    assert "table.csv" in one_line_error(capsys) and snapshot(out) == before
    (out / "table.csv").rename(out / "notes.csv")  # nothing of a name the sweep writes: --overwrite writes beside
    assert main(args) == 2 and "use --overwrite" not in one_line_error(capsys)
    assert main([*args, "--overwrite"]) == 0 and (out / "notes.csv").read_text() == "my own table\n"
    assert (out / OWNER).read_text() == "fl.sweep\n" and (out / "base" / "seed0" / OWNER).read_text() == "fl.run\n"
    assert main(args) == 0  # now its own: reused


def test_sweep_takes_a_sweep_folder_of_before_owner_files_as_its_own(cifar_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    args = [*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]
    assert main(args) == 0
    (out / OWNER).unlink()
    assert earlier_sweep(out)
    monkeypatch.setattr(sweep_module, "execute", lambda *a, **k: pytest.fail("a finished run was executed again"))
    assert main(args) == 0 and (out / OWNER).is_file()
    (out / OWNER).unlink()
    (out / "notes.txt").write_text("mine")  # no longer only a sweep's files
    assert not earlier_sweep(out)
    assert main(args) == 2 and "another --out" in one_line_error(capsys)


def test_sweep_refuses_a_foreign_folder_where_a_run_goes(cifar_root, tmp_path, capsys):
    out = tmp_path / "sweep"
    run = out / "base" / "seed0"
    run.mkdir(parents=True)
    (run / "notes.txt").write_text("mine")
    (out / OWNER).write_text("fl.sweep\n")
    before = snapshot(out)
    assert main([*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]) == 2
    assert "run directory" in one_line_error(capsys) and snapshot(out) == before


def valid_config_json(cifar_root, seed=0) -> str:
    overrides = [arg.split("=", 1)[0] + "=" + arg.split("=", 1)[1] for arg in sets(cifar_root)[1::2]]
    return json.dumps(load_config(None, [*overrides, f"train.seed={seed}"]).to_dict())


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("config.json", "{corrupt"),
        ("config.json", "[1]"),
        ("config.json", '{"data": {"clients": "many"}}'),
        ("config.json", '{"nope": {}}'),
        ("config.json", b"\xff\xfe"),
        ("summary.json", "{corrupt"),
        ("summary.json", "[1]"),
    ],
)
def test_corrupt_files_of_a_run_folder_are_one_line_errors(cifar_root, tmp_path, capsys, name, text):
    out = tmp_path / "sweep"
    run = out / "base" / "seed0"
    run.mkdir(parents=True)
    (out / OWNER).write_text("fl.sweep\n")
    (run / OWNER).write_text("fl.run\n")
    (run / "config.json").write_text(valid_config_json(cifar_root))
    if isinstance(text, bytes):
        (run / name).write_bytes(text)
    else:
        (run / name).write_text(text)
    before = snapshot(out)
    assert main([*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]) == 2
    assert name in one_line_error(capsys) and snapshot(out) == before


def test_corrupt_metrics_of_a_finished_run_is_a_one_line_error(cifar_root, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = [*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]
    assert main(args) == 0
    capsys.readouterr()
    with (out / "base" / "seed0" / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"round": 3, "comm')
    assert main(args) == 2 and "metrics.jsonl" in one_line_error(capsys)


def test_a_run_folder_in_use_is_a_one_line_error(cifar_root, tmp_path, capsys):
    out = tmp_path / "sweep"
    run = out / "base" / "seed0"
    run.mkdir(parents=True)
    (out / OWNER).write_text("fl.sweep\n")
    (run / OWNER).write_text("fl.run\n")
    with locked(run / RUN_LOCK, busy="held by the test"):  # flock: a second open file of this process conflicts
        assert main([*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet"]) == 2
    assert "in use by another process" in one_line_error(capsys)
    assert not (run / "metrics.jsonl").exists()


@pytest.mark.parametrize("seeds", ["-1", "0,-1", "4294967296", "0,1.5"])
def test_bad_seeds_are_one_line_errors(seeds, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "s"), "--quiet", "--seeds", seeds]) == 2
    assert "--seeds" in one_line_error(capsys)
    assert not (tmp_path / "s").exists()
    with pytest.raises(InputError, match="seed"):
        sweep_module.sweep(sweep_module.Sweep(None, [], [], [-1], tmp_path / "s"))


def test_largest_seed_is_accepted():
    assert parse_seeds("0,4294967295") == [0, 4294967295]


def test_two_values_never_share_a_run_folder():
    from fl.sweep import run_dir_name

    names = ["data.data_root=/a/x", "data.data_root=/b/x", "data.data_root=_a_x", "data.data_root=/a_x"]
    assert len({run_dir_name(n) for n in names}) == 4
    assert run_dir_name("method.name=central-real") == "method.name=central-real"  # plain names unchanged


def test_jobs_says_what_it_meets(monkeypatch):
    from fl import sweep

    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(sweep.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert sweep.cores_note(2) == (
        "fl.sweep: 2 runs at a time on 2 cores (1-minute load average 1.5); the runs will share busy cores, which "
        "can make --jobs slower than --jobs 1 (each run's clients already use every core)"
    )
    monkeypatch.setattr(sweep.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert sweep.cores_note(2) == "fl.sweep: 2 runs at a time on 2 cores (1-minute load average 0.0)"
