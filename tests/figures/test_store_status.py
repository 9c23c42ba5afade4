"""The run store outside the work tree ($SHUFFLEFL_RUNS / --runs), ``python -m figures status`` on a store with done,
partial and missing runs, and a run folder's provenance: a resume under other code says so in one line."""

from __future__ import annotations

import json

import pytest

import figures.flruns as flruns
from figures import methods_fl
from figures.__main__ import main, status
from fl import provenance
from fl.run import main as run_main


@pytest.fixture()
def store(tmp_path, monkeypatch):
    path = tmp_path / "store"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(path))
    monkeypatch.setenv("SHUFFLEFL_WORKERS", "1")
    return path


def quick_methods_runs(root, runs=None):
    return flruns.plan(methods_fl.ARTEFACT, "quick", root, runs).tasks


def test_the_run_store_honours_shufflefl_runs(store, tmp_path):
    tasks = quick_methods_runs(tmp_path / "root")
    assert tasks and all(folder.parent == store / flruns.RUNS for *_, folder in tasks)
    # --runs wins over the environment
    elsewhere = quick_methods_runs(tmp_path / "r", tmp_path / "elsewhere")
    assert all(f.parent == tmp_path / "elsewhere" / flruns.RUNS for *_, f in elsewhere)


def test_a_builds_jobs_reach_its_parallel_runs(store, tmp_path, monkeypatch):
    """--jobs travels in the Build: run_arms starts the pending runs that many at a time."""
    seen = []

    class Started(Exception):
        """The runs were handed to the processes (none is run here)."""

    def processes(pending, jobs, poll=0.5):
        seen.append((len(pending), jobs))
        raise Started

    monkeypatch.setattr(flruns, "run_processes", processes)
    with pytest.raises(Started):
        methods_fl.ARTEFACT.build(methods_fl.ARTEFACT.context("quick", tmp_path / "root", jobs=3))
    assert seen == [(len(quick_methods_runs(tmp_path / "root")), 3)]


def test_status_lists_done_partial_and_missing_runs(store, tmp_path, capsys):
    root = tmp_path / "root"
    tasks = quick_methods_runs(root)
    (_, _, _, done_config, done), (_, _, _, partial_config, partial) = tasks[0], tasks[1]
    flruns.run_locked(done_config, done)
    flruns.run_locked(partial_config, partial)
    (partial / "summary.json").unlink()
    rows = (partial / "metrics.jsonl").read_text().splitlines()
    (partial / "metrics.jsonl").write_text(rows[0] + "\n")  # as if stopped after round 1
    text = status(["methods"], "quick", root)
    lines = text.splitlines()
    assert any(": done [" in line and str(done) in line for line in lines)
    rounds = partial_config.train.rounds
    assert any(f"round 1 of {rounds} (" in line and "ETA" in line and str(partial) in line for line in lines)
    assert sum("not started" in line for line in lines) == len({f for *_, f in tasks}) - 2
    assert lines[-1].endswith("hours left at the speeds measured where the runs ran (one thread per run)")
    assert main(["status", "fig2", "--scale", "quick", "--root", str(root)]) == 0
    assert "a simulator" in capsys.readouterr().out
    assert not (root / "methods" / "quick" / "result.json").exists()  # status builds nothing


def test_a_resume_under_other_code_is_one_line_until_accepted(cifar_root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    args = [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{cifar_root}'", "--set", "data.clients=2",
        "--set", "data.partition='iid'", "--set", "model.name='mlp'", "--set", "train.rounds=2",
        "--set", "train.checkpoint_every=1", "--set", "train.workers=1", "--set", "train.keep_round=1",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert run_main(args) == 0
    recorded = json.loads((out / "provenance.json").read_text())
    assert recorded["code_version"] == provenance.code_version() and recorded["synthetic_sha256"] is None
    (out / "summary.json").unlink()  # back to the state after round 1: its checkpoint and its row
    (out / "checkpoint_round1.pt").replace(out / "checkpoint.pt")
    (out / "metrics.jsonl").write_text((out / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    monkeypatch.setattr(provenance, "code_version", lambda: "0123456789ab")
    capsys.readouterr()
    assert run_main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "code version" in err[0] and "--accept-code-change" in err[0]
    assert run_main(["--resume", str(out), "--quiet", "--accept-code-change"]) == 0
    changes = json.loads((out / "provenance.json").read_text())["changes"]
    assert [c["code_version"] for c in changes] == ["0123456789ab"]


def test_the_code_version_ignores_docstrings():
    import ast

    a = ast.dump(provenance.without_docstrings(ast.parse('def f():\n    """doc"""\n    return 1\n')))
    b = ast.dump(provenance.without_docstrings(ast.parse("def f():\n    return 1  # a comment\n")))
    c = ast.dump(provenance.without_docstrings(ast.parse("def f():\n    return 2\n")))
    assert a == b != c
