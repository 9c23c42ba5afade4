"""python -m fl.sweep --jobs 2: the runs go two at a time to their own fl.run processes and give the numbers of
--jobs 1 bit for bit, an interrupted run of the sweep is resumed, and a run folder in use stops the sweep in one line.
The speed-up is measured by benchmarks/sweep_jobs.py, not here."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess

import pytest
import torch

from fl.atomic import locked
from fl.runfolder import RUN_LOCK
from fl.sweep import main
from tests.fl.conftest import interrupt_at
from tests.fl.test_sinks import scalars
from tests.fl.test_sweep import one_line_error, sets
from theory.cli import OWNER

RUNS = [("base", 0), ("base", 1), ("data.p=0.5", 0), ("data.p=0.5", 1)]


def same_run(a, b):
    """The same rows (less timings and the backend's name: in-process client workers or one process) and the same
    final server model and client states."""
    rows = [[{k: v for k, v in json.loads(line).items() if not k.startswith("seconds") and k != "backend"}
             for line in (run / "metrics.jsonl").read_text().splitlines()] for run in (a, b)]  # fmt: skip
    assert rows[0] == rows[1] and len(rows[0]) == 3
    end_a, end_b = (torch.load(run / "checkpoint.pt", weights_only=True) for run in (a, b))
    assert torch.equal(end_a["x"], end_b["x"])
    assert all(torch.equal(end_a["clients"][k], end_b["clients"][k]) for k in end_a["clients"])


def table(out):
    with (out / "table.csv").open() as handle:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in csv.DictReader(handle)]


@pytest.mark.slow  # 4 fl.run processes: ~40 s on 2 busy cores
def test_jobs_2_resumes_and_equals_jobs_1_bit_for_bit(cifar_root, tmp_path, monkeypatch, capsys):
    args = [*sets(cifar_root), "--set", "train.rounds=3", "--vary", "data.p=0.5", "--seeds", "0,1", "--quiet"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*args, "--out", str(one)]) == 0

    resume = interrupt_at(monkeypatch, 2)  # the first run of the second sweep stops after round 1, checkpointed
    assert main([*args, "--out", str(two)]) == 2
    resume()
    assert (two / "base" / "seed0" / "checkpoint.pt").exists() and not (two / "base" / "seed1").exists()
    capsys.readouterr()
    curves = tmp_path / "tb" if importlib.util.find_spec("tensorboard") else None
    assert main([*args, "--out", str(two), "--jobs", "2", *(["--tensorboard", str(curves)] if curves else [])]) == 0
    printed = capsys.readouterr().out
    assert "base seed 0 -> " in printed and "(resume)" in printed and printed.count("finished") == 4
    for name, seed in RUNS:
        same_run(one / name / f"seed{seed}", two / name / f"seed{seed}")
        if curves:  # one TensorBoard run per arm and seed, every round once (the resumed run's first too)
            assert [step for step, _ in scalars(curves / name / f"seed{seed}", "test_accuracy")] == [1, 2, 3]
    assert table(one) == table(two)

    def no_process(*args, **kwargs):
        raise AssertionError("a finished sweep starts no process")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert main([*args, "--out", str(two), "--jobs", "2"]) == 0  # every run finished: reused


def test_a_run_folder_in_use_stops_a_parallel_sweep_in_one_line(cifar_root, tmp_path, capsys):
    out = tmp_path / "sweep"
    run = out / "base" / "seed0"
    run.mkdir(parents=True)
    (out / OWNER).write_text("fl.sweep\n")
    (run / OWNER).write_text("fl.run\n")
    with locked(run / RUN_LOCK, busy="held by the test"):
        assert main([*sets(cifar_root), "--seeds", "0", "--out", str(out), "--quiet", "--jobs", "2"]) == 2
    assert "in use by another process" in one_line_error(capsys)
    assert not (run / "metrics.jsonl").exists()


def test_bad_jobs_is_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "s"), "--jobs", "0"]) == 2
    assert "--jobs" in one_line_error(capsys) and not (tmp_path / "s").exists()
