"""scripts/dynafed-experiments.sh fails when its run is refused (issue 69, class 8): the DynaFed arm runs in the
background and a bare ``wait`` gave 0 whatever it returned; now the script ends with the arm's own exit status, with
ARMS=dynafed and with both arms (where the FedAvg arm can never start), with a stand-in for Python that refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("arms", ["dynafed", "both"])
def test_a_refused_run_fails_the_script(tmp_path, arms):
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "python -m fl.run: error: refused" >&2\nexit 2\n')
    python.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(tmp_path / "store"), "PYTHON": str(python),
           "SETTING": "paper", "ARMS": arms}  # fmt: skip
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "dynafed-experiments.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "python -m fl.run: error: refused" in done.stderr


def test_a_dynafed_arm_that_succeeds_still_exits_0(tmp_path):
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    python.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(tmp_path / "store"), "PYTHON": str(python),
           "SETTING": "paper", "ARMS": "dynafed"}  # fmt: skip
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "dynafed-experiments.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--set train.keep_round=19" in calls.read_text()
