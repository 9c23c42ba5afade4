"""Runs that lose nothing: python -m fl.run in a real subprocess, stopped by a real SIGINT / SIGTERM / SIGKILL at
several moments of a round, then resumed, must equal the uninterrupted run bit for bit (metrics rows without
their timings, and the final model); path mistakes are one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 14


def args(root: Path, out: Path, checkpoint_every: int) -> list[str]:
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='mlp'", "--set", f"train.rounds={ROUNDS}",
        "--set", "train.batch_size=8", "--set", f"train.checkpoint_every={checkpoint_every}",
        "--set", "train.device='cpu'", "--set", "train.participation=0.5", "--set", "algorithm.name='scaffold'",
        "--set", "train.estimate_every=4", "--out", str(out), "--quiet",
    ]  # fmt: skip


def fl_run(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "fl.run", *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def rows(out: Path) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("seconds")} for line in lines if line]


def wait_for_rows(out: Path, n: int, process: subprocess.Popen, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while len(rows(out)) < n:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.002)


@pytest.fixture(scope="module")
def data_and_reference(tmp_path_factory):
    """The tiny CIFAR-10 of tests/fl/conftest.py and one uninterrupted run on it."""
    import numpy as np

    from fl.data.formats import write_pickle_batch

    root = tmp_path_factory.mktemp("signals")
    folder = root / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [*((f"data_batch_{i}", 40) for i in range(1, 6)), ("test_batch", 30)]:
        labels = rng.integers(0, 10, n)
        data = np.clip(rng.normal(100 + 12 * labels[:, None], 30, (n, 3072)), 0, 255).astype(np.uint8)
        write_pickle_batch(folder / name, {"data": data, "labels": labels.tolist()})
    straight = root / "straight"
    process = fl_run(*args(root / "data", straight, 7))
    assert process.wait(timeout=900) == 0, process.communicate()
    return root / "data", straight


def final_model(out: Path) -> torch.Tensor:
    return torch.load(out / "checkpoint.pt", weights_only=True)["x"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, after_rows, delay, checkpoint_every",
    [
        (signal.SIGINT, 2, 0.0, 7),  # right after a row is written
        (signal.SIGTERM, 3, 0.004, 7),  # inside the next round
        (signal.SIGTERM, 5, 0.011, 100),  # before any checkpoint: SIGTERM must save one
        (signal.SIGINT, 4, 0.007, 3),
    ],
)
def test_a_signal_at_any_moment_loses_nothing(data_and_reference, tmp_path, sig, after_rows, delay, checkpoint_every):
    root, straight = data_and_reference
    out = tmp_path / "run"
    process = fl_run(*args(root, out, checkpoint_every))
    wait_for_rows(out, after_rows, process)
    time.sleep(delay)
    process.send_signal(sig)
    code = process.wait(timeout=900)
    err = process.stderr.read()
    if code == 0:  # the run finished before the signal landed: nothing to resume
        assert rows(out) == rows(straight)
        return
    assert code == 2 and "interrupted after round" in err and "--resume" in err, err
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert [r["round"] for r in rows(out)] == list(range(1, saved["round"]))  # the checkpoint and the log agree
    resumed = fl_run("--resume", str(out), "--quiet")
    assert resumed.wait(timeout=900) == 0, resumed.communicate()
    assert rows(out) == rows(straight)
    assert torch.equal(final_model(out), final_model(straight))


@pytest.mark.slow
def test_killed_before_its_first_checkpoint_resumes_from_round_1(data_and_reference, tmp_path):
    root, straight = data_and_reference
    out = tmp_path / "run"
    process = fl_run(*args(root, out, 100))
    wait_for_rows(out, 2, process)
    process.kill()  # SIGKILL: no handler runs, no checkpoint
    process.wait(timeout=900)
    assert not (out / "checkpoint.pt").exists()
    resumed = fl_run("--resume", str(out), "--quiet")
    stdout, stderr = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, stderr
    assert "starting again from round 1" in stdout
    assert rows(out) == rows(straight)
    assert torch.equal(final_model(out), final_model(straight))


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "{dir}"],
        ["--resume", "{file}"],
        ["--compare", "{file}", "{dir}"],
        ["--config", "{file}"],
    ],
)
def test_path_mistakes_are_one_line_exit_2(tmp_path, capsys, argv):
    from fl.run import main

    (tmp_path / "folder").mkdir()
    (tmp_path / "file.bin").write_bytes(b"\xff\xfe\x00binary")
    argv = [a.format(dir=tmp_path / "folder", file=tmp_path / "file.bin") for a in argv]
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1


def test_sweep_config_folder_is_one_line_exit_2(tmp_path, capsys):
    from fl.sweep import main

    assert main(["--config", str(tmp_path), "--out", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.sweep: error:") and err.count("\n") == 1
