"""``python -m fl.sweep --jobs N`` against a serial sweep and against ``--jobs 1``: wall time of one sweep, speed-ups.

    python benchmarks/sweep_jobs_bench.py        # 4 runs of FedAvg on Fashion-MNIST (subsampled), three ways
    python benchmarks/sweep_jobs_bench.py --jobs 1,2,4 --seeds 0,1,2,3 --rounds 5 --out bench.json

Each setting runs the whole sweep afresh in its own folder (a subprocess ``python -m fl.sweep``, so every start-up
counts), ``--config`` (default configs/fmnist_quick.toml, ``data.subsample`` images) with ``--vary data.p=0.5``
over ``--seeds``. The first setting, ``serial``, is ``--jobs 1 --set train.workers=1``: one run after another on one
core, what a sweep did before ``--jobs``. ``--jobs 1`` runs one run after another in one process whose client
workers use the machine's cores (``train.workers`` = 0); ``--jobs N`` runs N fl.run processes of one thread each.
So ``--jobs N`` can beat ``serial`` by up to N×, but ``--jobs 1`` only by what client workers lose (their start-up,
the per-round exchange, the server's part of the round); each process also pays its own start-up (importing torch,
hashing the code, reading the data: ~3 s), which small runs feel. It checks that every setting wrote the same table
(less timings) and prints the wall times, the speed-ups and the machine's load before it started: a speed-up means
something only on idle cores (the load average says whether they were). Writes JSON (``--out``, default
results/bench/sweep_jobs.json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # sweep_timing, beside this script (also when imported)

from sweep_timing import timed_sweep  # noqa: E402 (beside this script)

from theory.cli import ArgumentParser, json_out_problem, non_negative_int, positive_int  # noqa: E402
from theory.errors import InputError  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402


def job_counts(text: str) -> str:
    """argparse type of --jobs: whole numbers >= 1 separated by commas (kept as given)."""
    for value in text.split(","):
        try:
            positive_int(value)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected whole numbers >= 1 separated by commas, got {text!r}") from None
    return text


OWN_KEYS = ("cpu_count", "load_average_before", "rows", "runs")  # in every JSON the bench writes (--out)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="sweep_jobs_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "fmnist_quick.toml"))
    parser.add_argument("--jobs", type=job_counts, default="1,2",
                        help="--jobs settings to time after the serial baseline, e.g. 1,2")  # fmt: skip
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rounds", type=positive_int, default=10)
    parser.add_argument("--subsample", type=non_negative_int, default=12000, help="training images (data.subsample)")
    parser.add_argument("--set", action="append", default=[], help="more overrides of the base config")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "sweep_jobs.json")
    args = parser.parse_args(argv)
    from fl.config import load_config, parse_override
    from fl.sweep import parse_seeds

    try:  # what the sweeps below would refuse, refused before the first (the runs start in the checkout's root)
        parse_seeds(args.seeds)
        if "train.seed" in [".".join(parse_override(text)[0]) for text in args.set]:
            raise InputError("the sweeps set train.seed of every run from --seeds; drop --set train.seed")
        base = [f"train.rounds={args.rounds}", f"data.subsample={args.subsample}", "data.test_subsample=2000"]
        load_config(ROOT / args.config, [*base, *args.set, "data.p=0.5", "train.workers=1"])
    except InputError as error:
        parser.error(str(error))
    if (problem := json_out_problem(args.out, "sweep_jobs.json", OWN_KEYS, parser.prog)) is not None:
        parser.error(problem)
    settings = [("serial", 1, ["train.workers=1"])] + [(f"--jobs {j}", int(j), []) for j in args.jobs.split(",")]
    load = os.getloadavg()
    sets = [f"train.rounds={args.rounds}", f"data.subsample={args.subsample}", "data.test_subsample=2000", *args.set]
    rows, tables = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, jobs, extra) in enumerate(settings):
            flags = ["--config", args.config, "--vary", "data.p=0.5", "--seeds", args.seeds, "--jobs", str(jobs)]
            timed = timed_sweep(flags, [*sets, *extra], Path(tmp) / f"setting{index}")
            if timed is None:
                return 1
            seconds, found = timed
            tables.append(found)
            row = {"setting": name, "jobs": jobs, "seconds": seconds}
            row["speedup_vs_serial"] = rows[0]["seconds"] / seconds if rows else 1.0
            row["speedup_vs_jobs1"] = rows[1]["seconds"] / seconds if len(rows) > 1 else None
            rows.append(row)
            against = f", x{row['speedup_vs_jobs1']:.2f} against --jobs 1" if len(rows) > 2 else ""
            print(f"{name}: {seconds:.1f} s, x{row['speedup_vs_serial']:.2f} against serial{against}", flush=True)
    same = all(t == tables[0] for t in tables)
    result = {
        "cpu_count": os.cpu_count(), "load_average_before": load, "same_numbers": same, "rows": rows,
        "args": {k: str(v) for k, v in vars(args).items()}, "runs": 2 * len(args.seeds.split(",")),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.out, json.dumps(result, indent=2))
    print(f"{os.cpu_count()} cores, load average before {load[0]:.2f}; same table in every setting: {same}")
    if load[0] > 0.5:
        print("note: the cores were busy: redo the measurement on idle cores before quoting the speed-up")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
