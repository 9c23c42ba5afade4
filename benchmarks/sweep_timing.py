"""Timing a whole ``python -m fl.sweep`` in a subprocess (every start-up counts), shared by the sweep benchmarks
(sweep_jobs_bench.py, fleet_bench.py)."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table(out: Path) -> list[dict]:
    """A sweep's table.csv rows without their timings (what must agree between ways of running it)."""
    with (out / "table.csv").open() as handle:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in csv.DictReader(handle)]


def timed_sweep(flags: list[str], sets: list[str], out: Path) -> tuple[float, list[dict]] | None:
    """Seconds of ``python -m fl.sweep FLAGS --set S... --out OUT --quiet`` from the checkout's root and its table;
    None (its errors printed) when it fails."""
    command = [sys.executable, "-m", "fl.sweep", *flags, "--out", str(out), "--quiet"]
    command += [arg for s in sets for arg in ("--set", s)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return seconds, table(out)
