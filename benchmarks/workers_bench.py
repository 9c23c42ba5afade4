"""Clients in parallel on the CPU: ``fl.run`` with ``train.workers`` = 1 and 2 against Flower's simulation engine
(one actor per core), on one workload, and one round of DynaFed's Table 1 setting (ConvNet-3 width 128, 80
clients, 32 participants a round) with 1 and 2 workers.

    python benchmarks/workers_bench.py --out results/bench/workers          # ~10 min on 2 cores

Every process runs one torch thread (OMP_NUM_THREADS=1), so the arithmetic is the same in every way and the test
accuracy per round must be identical (checked). Seconds per round come from each run's ``metrics.jsonl`` (test
evaluation included); start-up is the wall time outside the round loop. Writes ``workers_bench.json`` and a
markdown table to OUT. Run it on idle cores: another process on them halves what a second worker can give.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # (a "benchmarks" package in site-packages shadows ours)

from flower_bench import measured, timed  # noqa: E402

from fl.workers import available_cores  # noqa: E402
from theory.cli import ArgumentParser, make_dir  # noqa: E402
from theory.errors import InputError  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402

# one round of configs/paper/dynafed_fmnist_a001.toml; its Dirichlet(0.01) split over 80 clients cannot give every
# client 10 samples (NIID-Bench scheme), so the timing uses the equal-size Hsu et al. scheme at the same alpha
DYNAFED = ["train.rounds=1", "train.target_accuracy=0.99", 'data.partition="dirichlet-hsu"']


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="workers_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fmnist_quick.toml", help="relative to the checkout's root")
    parser.add_argument("--out", type=Path, default=Path("results/bench/workers"))
    parser.add_argument("--no-dynafed", action="store_true", help="skip the ConvNet-3 round (~4 min on 2 cores)")
    args = parser.parse_args(argv)
    from fl.config import load_config

    try:  # a missing or bad config stops here, before OUT is made (the runs start in the checkout's root)
        load_config(ROOT / args.config)
        out = make_dir(args.out.resolve())
    except InputError as error:
        print(f"workers_bench.py: error: {error}", file=sys.stderr)
        return 2
    try:
        return bench(args, out)
    except subprocess.CalledProcessError as error:  # the run's own error is on stderr above
        print(
            f"workers_bench.py: error: {' '.join(map(str, error.cmd[1:4]))} ... exited {error.returncode}",
            file=sys.stderr,
        )
        return 1


def bench(args, out: Path) -> int:
    """fl.run with 1 and 2 workers and Flower's simulation on ``args.config`` (and the DynaFed round), into ``out``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("SHUFFLEFL_WORKERS", None)
    python = [sys.executable, "-m"]
    results: dict[str, dict] = {}

    def fl_run(name: str, config: str, workers: int, sets: list[str]) -> None:
        flags = [arg for item in [*sets, f"train.workers={workers}"] for arg in ("--set", item)]
        run = out / name
        wall = timed([*python, "fl.run", "--config", config, *flags, "--out", str(run), "--overwrite", "--quiet"], env)
        results[name] = measured(run, wall) | {"workload": config, "workers": workers}
        print(name, json.dumps(results[name]), flush=True)

    for workers in (1, 2):
        fl_run(f"fl.run workers={workers}", args.config, workers, [])
    run = out / "flower-simulation"
    wall = timed([*python, "fl.flower", "--config", args.config, "--out", str(run), "--overwrite"], env)
    results["flower-simulation"] = measured(run, wall) | {"workload": args.config, "workers": available_cores()}
    print("flower-simulation", json.dumps(results["flower-simulation"]), flush=True)
    if not args.no_dynafed:
        for workers in (1, 2):
            fl_run(f"dynafed-setting workers={workers}", "configs/paper/dynafed_fmnist_a001.toml", workers, DYNAFED)

    equal = True
    for workload in {row["workload"] for row in results.values()}:
        rows = [row for row in results.values() if row["workload"] == workload]
        equal &= all(row["test_accuracy"] == rows[0]["test_accuracy"] for row in rows)
    base = results["fl.run workers=1"]["mean_seconds_per_round"]
    flower = results["flower-simulation"]["mean_seconds_per_round"]
    payload = {"cores": available_cores(), "threads_per_process": 1, "accuracy_identical": equal, **results}
    write_text_atomically(out / "workers_bench.json", json.dumps(payload, indent=2))
    lines = [
        "| way | workload | start-up (s) | s / round (mean) | vs workers=1 | vs Flower sim. | total (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        per_round = row["mean_seconds_per_round"]
        same = row["workload"] == args.config
        lines.append(
            f"| {name} | {Path(row['workload']).name} | {row['startup_seconds']:.1f} | {per_round:.2f} | "
            + (f"{base / per_round:.2f}x | {flower / per_round:.2f}x" if same else "- | -")
            + f" | {row['wall_seconds']:.1f} |"
        )
    if not args.no_dynafed:
        one, two = (results[f"dynafed-setting workers={w}"]["mean_seconds_per_round"] for w in (1, 2))
        lines.append(f"\nDynaFed setting, one round: {one:.1f} s with 1 worker, {two:.1f} s with 2 ({one / two:.2f}x).")
    lines.append(f"\nTest accuracy per round identical across ways: {'yes' if equal else 'NO'}.")
    table = "\n".join(lines)
    write_text_atomically(out / "workers_bench.md", table + "\n")
    print(table)
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
