"""scripts/gpu-check.sh --dry: every part of the GPU check at tiny sizes, on whatever device there is, into one
folder with a summary (so the script keeps working between the sessions that have a GPU)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fmnist_available() -> bool:
    from fl.data import load

    try:
        load("fmnist")
    except Exception:
        return False
    return True


@pytest.mark.skipif(not fmnist_available(), reason="needs Fashion-MNIST (scripts/test-data.sh installs it)")
@pytest.mark.slow
def test_gpu_check_dry_runs_every_part(tmp_path):
    out = tmp_path / "check"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry", str(out)], cwd=ROOT, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [p["part"] for p in summary["parts"]] == ["gpu_tests", "benchmark", "fmnist_fedavg", "fedssyn_ddpm"]
    assert all(p["rc"] == 0 and p["seconds"] > 0 for p in summary["parts"])
    assert summary["fmnist_fedavg"]["rounds"] == 1 and summary["fedssyn_ddpm"]["rounds"] == 1
    assert {row["clients"] for row in summary["benchmark"]["rows"]} == {4, 8}
    assert "| total |" in (out / "summary.md").read_text()
