"""benchmarks/synthesis_bench.py: ``--quick`` runs in a few seconds on the CPU and reports both paths with their
counted FLOPs (checked against the convolutions written out by hand for one forward pass); on CUDA (marker
``gpu``) the default list of paths, every switch included, runs and the graphs are kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.benchmarks.test_bench_bad_inputs import load_bench

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "synthesis_bench.py"


def run_bench(tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(BENCH), *args, "--out", str(out)], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stdout


def test_the_quick_benchmark_reports_both_paths(tmp_path):
    result, printed = run_bench(tmp_path, "--quick", "--device", "cpu")
    rows = result["rows"]
    assert [(r["path"], r["ran"]) for r in rows] == [("reference", "reference"), ("auto", "fast+instance_norm")]
    assert result["device"] == "CPU, 1 threads" and result["args"]["width"] == 4
    assert set(load_bench("synthesis_bench").OWN_KEYS) <= set(result)  # its own earlier JSON: replaced, not refused
    for row in rows:
        assert row["iterations_per_second"] > 0 and row["tflops"] > 0
        assert row["tflops"] == pytest.approx(row["gflop_per_iteration"] / 1e3 * row["iterations_per_second"])
    assert rows[0]["gflop_per_iteration"] == rows[1]["gflop_per_iteration"]  # the same convolutions and products
    assert rows[0]["speedup"] == 1.0 and "TFLOP/s" in printed and "x1.00 against reference" in printed


def test_the_flop_counter_counts_convnet3_as_written_out():
    """The counter the benchmark reads, on one forward pass of its ConvNet-3 (width 4, 16 px, 20 images): 2·k²·C_in
    per output of each convolution, 2·features per logit of the head."""
    from fl.models import build_model

    model = build_model("convnet3", (1, 16, 16), 10, width=4)
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(20, 1, 16, 16))
    sides = (16 + 2 * 3 - 2, 20 // 2, 10 // 2)  # padding 3 on the first (grayscale), then 1; pooled by 2 after each
    convolutions = sum(2 * 9 * c_in * 4 * side**2 for c_in, side in zip((1, 4, 4), sides, strict=True))
    head = 2 * (4 * 2 * 2) * 10  # features 4·(4/2)² after the last pool
    assert counter.get_total_flops() == 20 * (convolutions + head)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_benchmark_runs_every_switch_on_cuda(tmp_path):
    result, _ = run_bench(tmp_path, "--width", "16", "--iterations", "2", "--repeats", "1")
    ran = {r["path"]: r["ran"] for r in result["rows"]}
    assert list(ran) == ["reference", "auto", "fast+instance_norm", "fast+tf32", "fast+channels_last", "fast+graphs",
                         "fast"]  # fmt: skip
    assert ran["auto"] == "fast+instance_norm+tf32+channels_last+graphs" and ran["fast+graphs"] == "fast+graphs"
