"""scripts/gpu-campaign.sh wait: what it packs for the device tool to bring back (metrics without checkpoints;
DynaFed's D_syn apart), on a store the test writes; no run is started."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wait_packs_metrics_and_dsyn_apart(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    run = store / "runs" / "dynafed_fmnist_a001_paper_n1000_dsa"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5}\n')
    for name in ("dynafed_synthesis.pt", "checkpoint.pt", "checkpoint_round19.pt"):
        (run / name).write_bytes(b"x")
    failed = store / "runs" / "hfmds_fmnist_shards_seed1_hfmds"
    failed.mkdir()
    (store / "logs").mkdir()
    (store / "logs" / "hfmds_shards_1.log").write_text("Traceback (most recent call last):\n")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), "wait", "0"],
        env={"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(store), "OUT": str(out), "PYTHON": "python3"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 'dynafed_fmnist_a001_paper_n1000_dsa rows=1 "test_accuracy": 0.5' in done.stdout
    assert "FAILED: " in done.stdout and "hfmds_shards_1.log" in done.stdout
    with tarfile.open(out / "metrics.tgz") as archive:
        names = archive.getnames()
    assert "runs/dynafed_fmnist_a001_paper_n1000_dsa/metrics.jsonl" in names and not any(
        n.endswith(".pt") for n in names
    )
    with tarfile.open(out / "dsyn.tgz") as archive:
        assert archive.getnames() == ["runs/dynafed_fmnist_a001_paper_n1000_dsa/dynafed_synthesis.pt"]
