"""One workload three ways: ``python -m fl.run``, Flower's simulation engine (``python -m fl.flower``) and a Flower
deployment on loopback (SuperLink + one SuperNode per client on 127.0.0.1, :mod:`fl.flower.loopback`).

    python benchmarks/flower_bench.py --config configs/fmnist_quick.toml --out results/bench/flower

Per way: start-up (wall time before the first round starts: imports, data, model, Ray or the SuperLink/SuperNodes
and their ClientApp processes), seconds per round (from the run's ``metrics.jsonl``, test evaluation included),
total wall time, and the test accuracy of every round, which must be the same in the three (every process runs
one thread, so the arithmetic is the same). Writes ``flower_bench.json`` and a markdown table to ``OUT``; an
``OUT`` that already holds a bench's outputs is refused in one line (the bench never writes over earlier ones).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.flower.loopback import Loopback  # noqa: E402
from theory.cli import ArgumentParser, make_dir  # noqa: E402
from theory.errors import InputError  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402

WAYS = ("fl.run", "flower-simulation", "flower-loopback")  # each way's run folder in OUT
OUTPUTS = (*WAYS, "loopback", "flower_bench.json", "flower_bench.md")  # all the bench writes in OUT


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def measured(run: Path, wall: float, extra_startup: float = 0.0) -> dict:
    """Start-up = wall time not spent in the round loop (the loop's seconds are the last row's)."""
    rows = metrics(run)
    loop = rows[-1]["seconds"]
    per_round = [b["seconds"] - a["seconds"] for a, b in zip([{"seconds": 0.0}, *rows], rows)]
    return {
        "wall_seconds": wall + extra_startup,
        "startup_seconds": wall - loop + extra_startup,
        "seconds_per_round": per_round,
        "mean_seconds_per_round": sum(per_round) / len(per_round),
        "test_accuracy": [r.get("test_accuracy") for r in rows],
    }


def timed(command: list[str], env: dict) -> float:
    start = time.monotonic()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def fresh_out(out: Path) -> Path:
    """``out`` made (a one-line InputError where it cannot be), refused in one line where it already holds a bench's
    outputs (:data:`OUTPUTS`, a link included): a second bench would start its runs over the first one's, and its
    Flower app, never given ``overwrite``, would refuse the loopback run's folder."""
    try:
        held = [name for name in OUTPUTS if (out / name).exists() or (out / name).is_symlink()]
    except OSError as error:
        raise InputError(f"cannot read output folder {out}: {error.strerror}") from None
    if held:
        raise InputError(f"{out} already holds a bench's outputs ({', '.join(held[:3])}); pick a new --out or "
                         "remove it")  # fmt: skip
    return make_dir(out)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="flower_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fmnist_quick.toml")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("results/bench/flower"))
    args = parser.parse_args(argv)
    from fl.config import load_config

    try:  # a missing or bad config stops here, before OUT is made (the three ways would each fail on it)
        config = load_config(Path(args.config), args.set)
        out = fresh_out(args.out.resolve())  # (a file there is refused in one line too)
    except InputError as error:
        print(f"flower_bench.py: error: {error}", file=sys.stderr)
        return 2
    args.config = str(Path(args.config).resolve())  # the runs below start in the checkout's root
    try:
        return bench(args, config, out)
    except subprocess.CalledProcessError as error:  # the way's own error is on stderr above
        print(
            f"flower_bench.py: error: {' '.join(map(str, error.cmd[1:4]))} ... exited {error.returncode}",
            file=sys.stderr,
        )
        return 1
    except (RuntimeError, TimeoutError) as error:  # the loopback deployment's (fl.flower.loopback); its logs named
        print(f"flower_bench.py: error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1


def bench(args, config, out: Path) -> int:
    """The three ways on ``config`` (read from ``args.config`` with ``args.set``), results into ``out``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    sets = [arg for item in args.set for arg in ("--set", item)]
    runs = {name: out / name for name in WAYS}
    results = {}

    base = [sys.executable, "-m"]
    wall = timed([*base, "fl.run", "--config", args.config, *sets, "--out", str(runs["fl.run"]), "--overwrite",
                  "--quiet"], env)  # fmt: skip
    results["fl.run"] = measured(runs["fl.run"], wall)
    print("fl.run", json.dumps(results["fl.run"]))

    wall = timed([*base, "fl.flower", "--config", args.config, *sets, "--out", str(runs["flower-simulation"]),
                  "--overwrite"], env)  # fmt: skip
    results["flower-simulation"] = measured(runs["flower-simulation"], wall)
    print("flower-simulation", json.dumps(results["flower-simulation"]))

    summary = runs["flower-loopback"] / "summary.json"  # none yet: OUT held no bench's outputs (fresh_out)
    start = time.monotonic()
    with Loopback(config.data.clients, out / "loopback", threads=1) as link:
        infrastructure = time.monotonic() - start
        config_path = str((ROOT / args.config).resolve())
        wall = link.run({"config": config_path, "set": ";".join(args.set), "out": str(runs["flower-loopback"])},
                        wait_for=summary, timeout=1800)  # fmt: skip
    results["flower-loopback"] = measured(runs["flower-loopback"], wall, infrastructure)
    results["flower-loopback"]["infrastructure_startup_seconds"] = infrastructure
    print("flower-loopback", json.dumps(results["flower-loopback"]))

    reference = results["fl.run"]["test_accuracy"]
    for row in results.values():
        row["accuracy_equal_to_fl_run"] = row["test_accuracy"] == reference
    payload = {"config": args.config, "set": args.set, "cpus": os.cpu_count(), "threads_per_process": 1, **results}
    write_text_atomically(out / "flower_bench.json", json.dumps(payload, indent=2))
    lines = [
        "| way | start-up (s) | seconds per round (mean; each) | total (s) | test accuracy per round | = fl.run |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        each = ", ".join(f"{s:.1f}" for s in row["seconds_per_round"])
        accuracy = ", ".join(f"{a:.4f}" for a in row["test_accuracy"])
        lines.append(
            f"| {name} | {row['startup_seconds']:.1f} | {row['mean_seconds_per_round']:.1f} ({each}) | "
            f"{row['wall_seconds']:.1f} | {accuracy} | {'yes' if row['accuracy_equal_to_fl_run'] else 'NO'} |"
        )
    table = "\n".join(lines)
    write_text_atomically(out / "flower_bench.md", table + "\n")
    print(table)
    return 0 if all(row["accuracy_equal_to_fl_run"] for row in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
