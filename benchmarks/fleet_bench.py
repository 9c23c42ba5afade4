"""A fleet (``fl.sweep --fleet``) against ``fl.sweep --jobs 2`` and against the runs one after another.

    python benchmarks/fleet_bench.py                   # 8 small FedAvg runs (seeds 0-7) on Fashion-MNIST, four ways
    python benchmarks/fleet_bench.py --seeds 0,1,2,3 --rounds 5 --set model.name='hfmds-cnn' --out bench.json

Every setting runs the whole sweep afresh in its own folder (a subprocess ``python -m fl.sweep``, so every start-up
counts): ``--config`` (default configs/fmnist_quick.toml with ``--set`` overrides, default the MLP, 10 clients,
``data.subsample`` images) over ``--seeds``:
- ``one after another``: ``--jobs 1 --set train.workers=1``, each run's clients one after another (the CPU's
  default backend), one core;
- ``one after another, batched``: the same with ``train.backend = "batched"``: each run's clients in one vmapped
  computation (what a fleet does for all runs at once), so its table must equal the fleet's;
- ``--jobs 2``: two fl.run processes of one thread each;
- ``--fleet``: every run in one process (fl/fleet.py), each run's clients one after another, the runs side by side
  on the cores; its table must equal ``one after another``'s;
- ``--fleet, batched``: every run in one process, all runs' clients one vmapped computation per local step; its
  table must equal ``one after another, batched``'s.
It prints the wall times and the fleet's speed-up against the faster of ``--jobs 2`` and ``one after another``,
checks the tables (less timings), and records the machine's load before it started (a speed-up means something only
on idle cores). Writes JSON (``--out``, default results/bench/fleet.json).
"""

from __future__ import annotations

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

SETTINGS = (
    ("one after another", ["--jobs", "1"], ["train.workers=1", "train.backend='sequential'"]),
    ("one after another, batched", ["--jobs", "1"], ["train.workers=1", "train.backend='batched'"]),
    ("--jobs 2", ["--jobs", "2"], ["train.backend='sequential'"]),
    ("--fleet", ["--fleet"], ["train.backend='sequential'"]),
    ("--fleet, batched", ["--fleet"], ["train.backend='batched'"]),
)
SMALL = ["model.name='mlp'", "data.clients=10", "train.batch_size=32", "data.test_subsample=2000"]


OWN_KEYS = ("cpu_count", "load_average_before", "rows", "runs")  # in every JSON the bench writes (--out)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="fleet_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "fmnist_quick.toml"))
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7")
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--subsample", type=non_negative_int, default=3000, help="training images (data.subsample)")
    parser.add_argument("--set", action="append", default=[], help="more overrides of the base config")
    parser.add_argument("--only", default="", help="settings to time, by number (1-5, e.g. 1,4; default all)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "fleet.json")
    args = parser.parse_args(argv)
    from fl.config import load_config, parse_override
    from fl.sweep import parse_seeds

    sets = [*SMALL, f"train.rounds={args.rounds}", f"data.subsample={args.subsample}", *args.set]
    try:  # what the sweeps below would refuse, refused before the first
        parse_seeds(args.seeds)
        if "train.seed" in [".".join(parse_override(text)[0]) for text in args.set]:
            raise InputError("the sweeps set train.seed of every run from --seeds; drop --set train.seed")
        load_config(ROOT / args.config, sets)
        chosen = [int(k) for k in args.only.split(",") if k.strip()] or list(range(1, len(SETTINGS) + 1))
        if not set(chosen) <= set(range(1, len(SETTINGS) + 1)):
            raise InputError(f"--only {args.only!r}: numbers from 1 to {len(SETTINGS)}")
    except (InputError, ValueError) as error:
        parser.error(str(error))
    if (problem := json_out_problem(args.out, "fleet.json", OWN_KEYS, parser.prog)) is not None:
        parser.error(problem)
    load = os.getloadavg()
    rows, tables = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for number in chosen:
            name, flags, extra = SETTINGS[number - 1]
            timed = timed_sweep(["--config", args.config, "--seeds", args.seeds, *flags], [*sets, *extra],
                                Path(tmp) / f"setting{number}")  # fmt: skip
            if timed is None:
                return 1
            seconds, tables[name] = timed
            rows.append({"setting": name, "seconds": seconds})
            print(f"{name}: {seconds:.1f} s", flush=True)
    times = {row["setting"]: row["seconds"] for row in rows}
    result = {"cpu_count": os.cpu_count(), "load_average_before": load, "rows": rows,
              "runs": len(args.seeds.split(",")), "args": {k: str(v) for k, v in vars(args).items()}}  # fmt: skip
    same = {}
    for fleet, alone in (("--fleet", "one after another"), ("--fleet, batched", "one after another, batched")):
        if fleet in tables and alone in tables:
            same[fleet] = tables[fleet] == tables[alone]
            print(f"{fleet}: the same table as {alone}: {same[fleet]}")
    result["same_tables"] = same
    others = [times[k] for k in ("--jobs 2", "one after another") if k in times]
    if "--fleet" in times and others:
        result["fleet_speedup"] = min(others) / times["--fleet"]
        print(f"--fleet: x{result['fleet_speedup']:.2f} against the faster of --jobs 2 and one after another")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.out, json.dumps(result, indent=2))
    print(f"{os.cpu_count()} cores, load average before {load[0]:.2f}")
    if load[0] > 0.5:
        print("note: the cores were busy: redo the measurement on idle cores before quoting the speed-up")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
