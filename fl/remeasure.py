"""ζ², σ², δ² after the fact, at the server models a run saved (:mod:`fl.estimators`, the same estimates a run
logs every ``train.estimate_every`` rounds).

    python -m fl.remeasure RUN_DIR [--only delta2] [--every 5] [--samples 64]

A long run that logged no estimates (``estimate_every = 0``: at paper scale one estimate costs minutes) can be
measured afterwards at every model it kept: ``checkpoint_round*.pt``, ``checkpoint.pt`` and ``snapshots/round*.pt``
(files holding ``round`` (the next round to run), ``x`` and ``method``, the method's state: DynaFed's D_syn). The
run's own config rebuilds its data and model, refused in one line as ``fl.run --resume`` refuses them when the data
or a plug-in are no longer those the run ran on; the estimates at the model after round t use the generator seed a run
would have used at round t, so a round the run measured itself gives the same numbers. One line per model goes to
``RUN_DIR/estimates_posthoc.jsonl``; models measured before are skipped, so an interrupted call resumes.
``--only delta2`` measures δ² alone (the clients' full-data gradients and the synthetic set's: no per-sample
gradients, no second pass over the shuffled sets).
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fl import plugins, provenance
from fl.checkpoints import config_key
from fl.config import RunConfig, from_dict
from fl.estimators import delta2
from fl.experiment import Experiment
from fl.runfolder import extended_key
from fl.torchfiles import load_safely
from theory.cli import ArgumentParser, guarded
from theory.errors import InputError
from theory.output import append_line_durably, read_object, read_text_bounded

OUT = "estimates_posthoc.jsonl"


def saved_models(run: Path) -> dict[int, Path]:
    """Round t (the model after round t) -> the file that holds it, over every checkpoint and snapshot of ``run``."""
    found: dict[int, Path] = {}
    for path in [
        run / "checkpoint.pt",
        *sorted(run.glob("checkpoint_round*.pt")),
        *sorted(run.glob("snapshots/round*.pt")),
    ]:
        if path.is_symlink():  # another run's file, or anything: never read through a link planted here
            raise InputError(f"{path}: a symbolic link, never read as this run's model; move it out of the run folder")
        if path.exists():
            found.setdefault(saved_round(path), path)
    return dict(sorted(found.items()))


def saved_round(path: Path) -> int:
    """The round whose model a checkpoint or snapshot holds (its next round less one); one line if it holds none."""
    value = load(path).get("round")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{path}: its round is {value!r}, not a round number; move it out of the run folder")
    return value - 1


def run_keys(config: RunConfig) -> Callable[[int], set[str]]:
    """The config keys a checkpoint of the run of ``config`` may hold (:func:`fl.checkpoints.config_key`), given the
    ``train.rounds`` it was saved with: the run's own, or the key it had before an extension to more rounds."""
    return lambda rounds: {config_key(config), extended_key(config, rounds)} - {None}


def of_this_run(payload: dict, path: Path, keys: Callable[[int], set[str]]) -> None:
    """A checkpoint whose config key (``extra["config_key"]``) is not one of the run's (:func:`run_keys`) is another
    run's: one line, as ``fl.run --resume`` refuses it. A snapshot (round, x, method) holds no key."""
    extra = payload.get("extra")
    key = extra.get("config_key") if isinstance(extra, dict) else None
    if key is None:
        return
    rounds = extra.get("config_rounds")
    if key not in keys(rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 1 else 1):
        raise InputError(f"{path}: a checkpoint of another run (its config key {key} is none of this run's); move "
                         "it out of the run folder")  # fmt: skip


def load(path: Path) -> dict:
    payload = load_safely(path, "checkpoint or snapshot", "move it out of the run folder to measure the others")
    if not isinstance(payload, dict) or not {"round", "x"} <= set(payload):
        raise InputError(f"{path}: not a checkpoint or snapshot (no round / x)")
    return payload


def measured(path: Path, samples: int | None = None, only: str | None = None) -> set[int]:
    """The rounds ``path`` holds a measurement of with these ``samples`` (any, where None) and of this kind
    (``only``: "delta2" alone, or None: every estimate)."""
    if not path.exists():
        return set()
    rounds = set()
    for line in read_text_bounded(path, "run's post-hoc estimates").splitlines():
        with contextlib.suppress(json.JSONDecodeError, TypeError, KeyError, AttributeError):  # a torn line: redone
            row = json.loads(line)
            if (samples is None or row.get("samples") == samples) and row.get("only") == only:
                rounds.add(row["round"])
    return rounds


def remeasure(run: Path, only: str | None = None, every: int = 1, samples: int | None = None, quiet: bool = False):
    """Estimates at each saved model of ``run`` (rounds divisible by ``every``, and the last); appends to its
    ``estimates_posthoc.jsonl`` and returns the new lines."""
    if not (run / "config.json").is_file():
        raise InputError(f"{run}: not a run directory (no config.json)")
    tree = read_object(run / "config.json", "config.json of the run")
    train = tree.setdefault("train", {})
    if not isinstance(train, dict):
        raise InputError(f"{run / 'config.json'}: its [train] is not a table")
    models = saved_models(run)
    if not models:
        raise InputError(f"{run}: no saved model (checkpoint*.pt or snapshots/round*.pt)")
    last = max(models)
    with plugins.expecting(provenance.recorded_plugins(run)):  # as fl.run --resume: a changed plug-in never runs,
        keys = run_keys(from_dict(copy.deepcopy(tree)))  # the run's own config, before the settings below
        if samples is not None:
            train["estimate_samples"] = samples
        train["device"] = "cpu"
        exp = Experiment(from_dict(tree), resuming=run)  # and other data than the run's are refused (check_data)
    done = measured(run / OUT, exp.config.train.estimate_samples, only)  # the same measurement: samples and kind
    todo = [t for t in models if (t % every == 0 or t == last) and t not in done]
    if not todo:
        return []
    lines = []
    for t in tqdm(todo, desc="models", unit="model", disable=quiet or None):
        payload = load(models[t])
        of_this_run(payload, models[t], keys)
        x, method_state = payload["x"].to(exp.device), payload.get("method", {})
        if only == "delta2":
            synthetic = exp.method.synthetic_set(method_state)
            if synthetic is None:
                continue  # nothing synthetic yet (before DynaFed's synthesis)
            estimates = {"delta2": delta2(exp.flat, x, exp.data, synthetic)}
        else:
            estimates = exp.measure(x, t, method_state)
        line = {
            "round": t,
            "file": models[t].name,
            "estimates": estimates,
            "samples": exp.config.train.estimate_samples,
            **({"only": only} if only else {}),
        }
        append_line_durably(run / OUT, json.dumps(line))
        lines.append(line)
    return lines


@guarded("fl.remeasure")
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m fl.remeasure", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, metavar="RUN_DIR")
    parser.add_argument("--only", choices=("delta2",), help="measure δ² alone (cheaper)")
    parser.add_argument(
        "--every", type=int, default=1, help="only models after rounds divisible by this (and the last)"
    )
    parser.add_argument("--samples", type=int, help="per-client samples for σ² (default: the run's estimate_samples)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.every < 1:
        raise InputError(f"--every must be >= 1, got {args.every}")
    lines = remeasure(args.run, args.only, args.every, args.samples, args.quiet)
    for line in lines:
        shown = [f"{k} {v:.4g}" for k, v in line["estimates"].items() if isinstance(v, float) and np.isfinite(v)]
        print(f"round {line['round']} ({line['file']}): " + ", ".join(shown))
    if lines:
        print(f"{len(lines)} model(s) measured -> {args.run / OUT}")
    else:
        print(f"nothing new measured: every saved model chosen is in {args.run / OUT} already with these settings, "
              "or has nothing to measure (no synthetic set yet for --only delta2); nothing written")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
