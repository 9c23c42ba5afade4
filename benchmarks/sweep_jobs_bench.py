"""``python -m fl.sweep --jobs N`` against ``--jobs 1``: wall time of the same small sweep, and the speed-up.

    python benchmarks/sweep_jobs_bench.py        # 4 runs of FedAvg on Fashion-MNIST (subsampled), jobs 1 and 2
    python benchmarks/sweep_jobs_bench.py --jobs 1,2,4 --seeds 0,1,2,3 --rounds 5 --out bench.json

Each setting runs the whole sweep afresh in its own folder (a subprocess ``python -m fl.sweep``, so every start-up
counts), ``--config`` (default configs/fmnist_quick.toml, ``data.subsample`` images) with ``--vary data.p=0.5``
over ``--seeds``. ``--jobs 1`` runs one run after another in one process (whose client workers use the machine's
cores); ``--jobs N`` runs N fl.run processes of one thread each. It checks that every setting wrote the same table
(less timings) and prints the wall times, the speed-up over ``--jobs 1`` and the machine's load before it started:
a speed-up means something only on idle cores (the load average says whether they were). Writes JSON (``--out``,
default results/bench/sweep_jobs.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table(out: Path) -> list[dict]:
    with (out / "table.csv").open() as handle:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in csv.DictReader(handle)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "fmnist_quick.toml"))
    parser.add_argument("--jobs", default="1,2", help="settings to time, e.g. 1,2 (the first is the baseline)")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--subsample", type=int, default=6000, help="training images (data.subsample)")
    parser.add_argument("--set", action="append", default=[], help="more overrides of the base config")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "sweep_jobs.json")
    args = parser.parse_args(argv)
    settings = [int(j) for j in args.jobs.split(",")]
    load = os.getloadavg()
    sets = [f"train.rounds={args.rounds}", f"data.subsample={args.subsample}", "data.test_subsample=2000", *args.set]
    rows, tables = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in settings:
            out = Path(tmp) / f"jobs{jobs}"
            command = [sys.executable, "-m", "fl.sweep", "--config", args.config, "--vary", "data.p=0.5",
                       "--seeds", args.seeds, "--out", str(out), "--quiet", "--jobs", str(jobs)]  # fmt: skip
            command += [arg for s in sets for arg in ("--set", s)]
            start = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if done.returncode:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            tables.append(table(out))
            rows.append({"jobs": jobs, "seconds": seconds, "speedup": rows[0]["seconds"] / seconds if rows else 1.0})
            speedup = rows[-1]["speedup"]
            print(f"--jobs {jobs}: {seconds:.1f} s, x{speedup:.2f} against --jobs {settings[0]}", flush=True)
    same = all(t == tables[0] for t in tables)
    result = {
        "cpu_count": os.cpu_count(), "load_average_before": load, "same_numbers": same, "rows": rows,
        "args": {k: str(v) for k, v in vars(args).items()}, "runs": 2 * len(args.seeds.split(",")),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"{os.cpu_count()} cores, load average before {load[0]:.2f}; same table in every setting: {same}")
    if load[0] > 0.5:
        print("note: the cores were busy: redo the measurement on idle cores before quoting the speed-up")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
