"""benchmarks/clients_bench.py: a cell that runs out of device memory is marked skipped and the others still run (an
H100 shared with other runs once ended the whole benchmark at ConvNet-3, N = 1000, batched)."""

from __future__ import annotations

import json

import torch

from tests.benchmarks.test_bench_bad_inputs import load_bench as load_bench_named


def load_bench():
    return load_bench_named("clients_bench")


def test_a_cell_out_of_memory_is_skipped_and_the_rest_run(tmp_path, monkeypatch):
    bench = load_bench()
    real = bench.time_round

    def time_round(model_name, n, *args):
        if n == 4 and args[-3] == "batched":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 7.81 GiB")
        return real(model_name, n, *args)

    monkeypatch.setattr(bench, "time_round", time_round)
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--devices", "cpu", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert set(bench.OWN_KEYS) <= set(json.loads(out.read_text()))  # its own earlier JSON: replaced, not refused
    assert [r["clients"] for r in rows] == [4, 8]
    assert rows[0]["skipped"].startswith("batched out of device memory (CUDA out of memory")
    assert rows[1]["speedup"] > 0 and "skipped" not in rows[1]
