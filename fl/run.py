"""``python -m fl.run``: one FL experiment from a TOML config, into a run directory that survives interruption.

    python -m fl.run --config configs/fmnist_quick.toml --set train.rounds=5 --out results/runs/quick
    python -m fl.run --resume results/runs/quick          # continue an interrupted run (bit-identical on CPU)
    python -m fl.run --resume results/runs/quick --set train.rounds=10   # extend it: equal to a 10-round run
    python -m fl.run --print-config --config configs/fmnist_quick.toml   # the resolved config, every key
    python -m fl.run --compare results/runs/a results/runs/b   # rounds to target accuracy and the speed-up

The run directory holds ``config.json`` (the resolved config), ``metrics.jsonl`` (one line per round: test
loss/accuracy, cumulative communication, estimator values), ``checkpoint.pt`` (written atomically every
``train.checkpoint_every`` rounds and on Ctrl-C) and, when finished, ``summary.json`` and ``curve.png`` (test
accuracy and loss per round). Where the output is not a terminal (a file, a pipe), a line per round says the
round's test accuracy, loss and seconds; on a terminal the progress bar does (``--quiet``: neither).

This module is the command line alone: the run loop is :func:`fl.loop.execute`, the flags a run shares with a fleet
are :mod:`fl.launch`'s, the run folder :mod:`fl.runfolder`'s; from Python, :func:`fl.train` runs the same code.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from fl.atomic import locked
from fl.config import load_config
from fl.launch import build_parser, locked_config, run_flags, start_or_resume
from fl.loop import execute
from fl.runfolder import RUN_LOCK, extension_rounds, read_run_config
from fl.sinks import is_number
from theory.cli import guarded
from theory.errors import InputError
from theory.output import read_object


def compare(a: Path, b: Path) -> str:
    """Rounds to the target accuracy of two finished runs and the speed-up of b over a."""
    summaries = []
    for run in (a, b):
        summary = read_object(run / "summary.json", "summary.json (is the run finished?)")
        if not all(key in summary for key in ("rounds_to_target", "target_accuracy")):
            raise InputError(f"{run / 'summary.json'}: not a summary of fl.run (no rounds_to_target)")
        worst = summary.get("worst_client")
        numbers = (summary["rounds_to_target"], summary["target_accuracy"])
        parts = (worst.get("client"), worst.get("accuracy")) if isinstance(worst, dict) else (None,)
        worst_ok = worst is None or all(map(is_number, parts))
        if not all(value is None or is_number(value) for value in numbers) or not worst_ok:
            raise InputError(f"{run / 'summary.json'}: damaged (rounds_to_target, target_accuracy or worst_client "
                             "is not what fl.run writes)")  # fmt: skip
        summaries.append(summary)
    ra, rb = (s["rounds_to_target"] for s in summaries)
    speed = f"{ra / rb:.2f}x" if ra and rb else "n/a (a run never reached the target)"
    text = (
        f"target accuracy {summaries[0]['target_accuracy']:g}: {a} needs {ra} rounds, {b} needs {rb}; "
        f"speed-up of the second over the first: {speed}"
    )
    worst = [s.get("worst_client") for s in summaries]
    if any(worst):
        said = [f"client {w['client']} at {w['accuracy']:.4f}" if w else "not evaluated" for w in worst]
        text += f"\nworst client (last per-client evaluation): {a}: {said[0]}; {b}: {said[1]}"
    return text


def printed_config(args) -> str:
    """``--print-config``: the resolved config, as TOML, of ``--config`` and ``--set`` (and the flags that set a
    key: ``--device``, ``--workers``, ``--tensorboard``, ``--mlflow``), or of the run ``--resume`` names (with
    ``--set train.rounds=N``: as extended); nothing is run or written. What else would start, compare or write is
    refused in one line."""
    given = run_flags(args) + (["--compare"] if args.compare else [])
    refused = ("--compare", "--init-from", "--overwrite", "--out", "--accept-code-change")
    extra = [flag for flag in refused if flag in given]
    if extra:
        raise InputError(f"--print-config prints a config and runs nothing: drop {', '.join(extra)}")
    if not args.resume:
        overrides = list(args.set) + ([f"train.device={json.dumps(args.device)}"] if args.device else [])
        overrides += [f"train.workers={args.workers}"] if args.workers is not None else []
        overrides += [f"log.tensorboard={json.dumps(str(args.tensorboard))}"] if args.tensorboard else []
        overrides += [f"log.mlflow={json.dumps(str(args.mlflow))}"] if args.mlflow else []
        return load_config(args.config, overrides).to_toml()
    if args.config:
        raise InputError("--resume takes the run's own config; drop --config/--set")
    rounds = extension_rounds(args.set)
    config = read_run_config(args.resume)
    return (config if rounds is None else config.extended(max(rounds, config.train.rounds))).to_toml()


@guarded("fl.run")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.print_config:
        print(printed_config(args), end="")
        return 0
    if args.compare:
        if run_flags(args):
            raise InputError(f"--compare reads two finished runs and runs nothing: drop {', '.join(run_flags(args))}")
        print(compare(*args.compare))
        return 0
    out, config = start_or_resume(args)
    # one process per run folder: a second start or resume stops
    with locked(out / RUN_LOCK, busy=f"run directory {out}"):
        config = locked_config(args, out, config)
        summary = execute(
            config, out, resume=bool(args.resume), quiet=args.quiet, start_from=args.init_from,
            accept_code_change=args.accept_code_change,
        )  # fmt: skip
    acc, diverged = summary["final_test_accuracy"], summary["diverged_at_round"]
    if diverged is not None:  # a non-finite model has no accuracy: the run's result is that it diverged
        best = summary["best_test_accuracy"]
        before = "none measured" if best is None else round(best, 4)
        said = f"diverged at round {diverged}: no final test accuracy (best before it: {before})"
    else:
        said = f"final test accuracy {acc if acc is None else round(acc, 4)}"
    print(
        f"{out}: {summary['rounds']} rounds, {said}, rounds to {summary['target_accuracy']:g}: "
        f"{summary['rounds_to_target']}, lr {summary['lr']:g}, {summary['seconds']:.1f} s"
    )
    if summary["estimates_mean"]:
        print("estimates (mean over measurements): " + json.dumps(summary["estimates_mean"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
