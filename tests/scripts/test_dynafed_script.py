"""scripts/dynafed-experiments.sh with SEED: the run names and the arguments it gives ``python -m fl.run``, with a
stand-in for Python that records them (the DynaFed arm is written as done, so nothing waits)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed, suffix", [(None, ""), ("2", "_seed2")])
def test_seed_names_both_arms_and_pairs_them(tmp_path, seed, suffix):
    runs = tmp_path / "store" / "runs"
    dynafed = runs / f"dynafed_fmnist_a001_paper_n1000_dsa{suffix}"
    dynafed.mkdir(parents=True)
    for name in ("config.json", "summary.json", "checkpoint_round19.pt"):
        (dynafed / name).write_text("{}")
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    python.chmod(0o755)
    env = {
        "PATH": "/usr/bin:/bin",
        "SHUFFLEFL_RUNS": str(tmp_path / "store"),
        "PYTHON": str(python),
        "SETTING": "paper",
    }
    if seed is not None:
        env["SEED"] = seed
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "dynafed-experiments.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"{dynafed}: done" in done.stdout
    (call,) = calls.read_text().splitlines()  # the FedAvg arm, from the DynaFed arm of the same seed
    assert f"--set train.seed={seed or 0}" in call
    assert f"--init-from {dynafed}/checkpoint_round19.pt" in call
    assert call.endswith(f"--out {runs}/dynafed_fmnist_a001_fedavg_from19{suffix} --overwrite --quiet")


def test_arms_must_be_both_or_dynafed(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(tmp_path / "store"), "PYTHON": "false", "ARMS": "fedavg"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "dynafed-experiments.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr == "ARMS must be both or dynafed\n"
