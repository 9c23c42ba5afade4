"""The run loop as a library call: :func:`execute` runs (or continues) an experiment in its run folder, round by
round, and returns its summary.

Each round is computed (the state before it untouched), its metrics row made (:func:`fl.metrics.round_row`), then
committed with signals held and handed to callbacks (:class:`RoundCallback`): the metrics file, the checkpoints, the
live curves, the per-client table, the progress line, the divergence stop, and any a caller adds. Ctrl-C or SIGTERM
saves the checkpoint of the last whole round (:class:`Interrupted`). ``python -m fl.run``, :func:`fl.train`, a
fleet, a sweep and the Flower server all run through it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fl.provenance as provenance
from fl.algorithms import Context
from fl.checkpoints import config_key, init_from, load_checkpoint, save_checkpoint
from fl.clients import carried_rows
from fl.config import RunConfig, TrainConfig
from fl.engine import EngineState, apply_round, client_zeros
from fl.experiment import Experiment, trainer_threads, where_it_ran
from fl.methods import Picture
from fl.methods.base import WORK_FOLDER
from fl.metrics import draw, draw_clients, draw_curve, resumable_rows, round_row, summarise, write_clients
from fl.runfolder import (
    extend,
    extended_key,
    extension_refusal,
    keyed_rounds,
    read_origin,
    relative_origin,
    write_rounds,
)
from fl.sinks import MLflow, TensorBoard, curves_inside
from fl.workers import WorkerLost
from theory.cli import held, stop_requested
from theory.errors import InputError
from theory.output import fsync_path, open_unlinked, to_json, write_text_atomically


class Interrupted(InputError):
    """A run stopped by Ctrl-C or SIGTERM with its checkpoint saved (one line, as any InputError; a fleet tells it
    from a failure: :mod:`fl.fleet`)."""


def divergence_cause(config: RunConfig) -> str:
    """The setting a diverged or overflowing run most likely owes it to: the largest of the numeric settings of its
    algorithm and method, train.weight_decay and train.momentum where one is far out of the usual range (above
    1e3), else train.lr; the plug-ins the config names (:mod:`fl.plugins`) are named beside it, their numbers
    being theirs to say."""
    tree = config.to_dict()
    found = [(f"train.{k}", tree["train"].get(k)) for k in ("weight_decay", "momentum")]
    found += [(f"{section}.{k}", v) for section in ("algorithm", "method") for k, v in tree.get(section, {}).items()]
    numbers = [(abs(float(v)), key, v) for key, v in found
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]  # fmt: skip
    big = max(numbers, default=None)
    plugged = "".join(f", or the plug-in {entry['spec']} ({key})" for key, entry in config.plugins().items())
    if big is not None and big[0] > 1e3:
        return f"{big[1]} = {big[2]:g}, far out of the usual range (or lower train.lr{plugged})"
    return f"lower train.lr{plugged}"


def not_the_step(exp: Experiment) -> str | None:
    """Why a run's server model turns non-finite whatever its step size, or None where nothing shows it: at the
    run's initial model (ordinary numbers, before any step) the first training batch of the first client with data
    normalises to non-finite images, or the model's parameters, outputs or gradients there are not finite, or the
    algorithm's correction (from its fresh state) is not. No step size makes a round from there finite; the
    plug-in behind the model or the algorithm is named."""
    config, flat = exp.config, exp.flat
    named = config.plugins()

    def who(key: str, value: str) -> str:
        return f"the plug-in {named[key]['spec']} ({key})" if key in named else f"{key} = {value!r}"

    model = who("model.name", config.model.name)
    if not bool(torch.isfinite(exp.x0).all()):
        return f"{model} starts from parameters that are not finite"
    client = next((i for i, t in enumerate(exp.data.train) if len(t)), None)
    if client is None:
        return None
    batch = exp.data.train[client][: config.train.batch_size]
    images, labels = exp.data.x[batch], exp.data.y[batch]
    if not bool(torch.isfinite(images).all()):
        return f"the training images of {config.data.dataset} are not finite once normalised"
    flat.load(exp.x0)
    flat.model.eval()  # no dropout draws: nothing of the run's random streams is used
    flat.grads.zero_()
    logits = flat.model(images)
    if not bool(torch.isfinite(logits).all()):
        return f"{model} gives non-finite outputs at its initial parameters"
    torch.nn.functional.cross_entropy(logits, labels).backward()
    if not bool(torch.isfinite(flat.grads).all()):
        return f"{model} gives non-finite gradients at its initial parameters"
    zeros = client_zeros(exp.algorithm.client_keys + carried_rows(exp.local), 1, exp.x0)
    fresh = Context(exp.x0, {k: torch.zeros_like(exp.x0) for k in exp.algorithm.server_keys},
                    {k: v[0] for k, v in zeros.items()}, flat.head_mask)  # fmt: skip
    with torch.no_grad():
        extra = exp.algorithm.correction(flat.params, fresh)
    if extra is not None and not bool(torch.isfinite(extra).all()):
        algorithm = who("algorithm.name", exp.algorithm.name)
        return f"{algorithm} gives a non-finite correction at the initial model, from its fresh state"
    return None


def is_terminal(stream) -> bool:
    """Whether ``stream`` (sys.stdout, sys.stderr) is a terminal; a stream that cannot say is not."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def round_line(out: Path, row: dict, seconds_before: float, rounds: int) -> str:
    """The line a run prints for a round where its output is not a terminal: round, test accuracy and loss (where
    evaluated), seconds the round took."""
    said = f"{out}: round {row['round']}/{rounds}"
    if row.get("diverged"):
        said += ": the server model diverged"
    elif row.get("test_accuracy") is not None:
        said += f": test accuracy {row['test_accuracy']:.4f}, test loss {row['test_loss']:.4f}"
    else:
        said += ": not evaluated (train.eval_every)"
    return f"{said}, {row['seconds'] - seconds_before:.2f} s"


def open_sinks(config: RunConfig, rows: list[dict], out: Path, stack: contextlib.ExitStack) -> list:
    """The live-curve sinks ``config.log`` names (:mod:`fl.sinks`: TensorBoard, MLflow), opened in ``stack`` with
    the run's ``rows`` so far; each is handed every row to come."""
    owner, sinks = str(out.resolve()), []
    for target in (config.log.tensorboard, config.log.mlflow):
        if target:
            curves_inside(out, target)
    if config.log.tensorboard:
        sinks.append(stack.enter_context(TensorBoard(Path(config.log.tensorboard), rows, owner)))
    if config.log.mlflow:
        params = config.identity()
        params["train"].pop("rounds")  # a tag: an extended run's grows, an MLflow parameter never changes
        mlflow = MLflow(Path(config.log.mlflow), rows, owner, str(out), params, config.train.rounds)
        sinks.append(stack.enter_context(mlflow))
    return sinks


class RoundCallback:
    """What the run loop (:func:`run_rounds`) calls at fixed points of each round, as pfl-research's callbacks:
    :meth:`committed` once the round's state is the run's (a signal waits meanwhile: :func:`theory.cli.held`),
    :meth:`shown` after it (True stops the run, its round done), :meth:`close` when the loop ends or stops. The
    metrics file, the checkpoints, the live curves, the per-client table, the progress line and the divergence stop
    are each one; a caller adds its own (:func:`fl.train` keeps the rows and the last state in memory). None of them
    changes a number of the run."""

    def committed(self, row: dict, state: EngineState) -> None:
        """The round of ``row`` is done and ``state`` is the run's: record what this callback records."""

    def shown(self, row: dict) -> bool:
        """After the round is recorded: say what this callback says of it; True stops the run after it."""
        return False

    def close(self) -> None:
        """The loop has ended, or stopped."""


class MetricsLog(RoundCallback):
    """Each round's row appended to ``metrics.jsonl`` (the open file ``log``) and flushed; :meth:`sync` puts the rows
    on disk before a checkpoint that continues them is written."""

    def __init__(self, log) -> None:
        self.log = log

    def committed(self, row: dict, state: EngineState) -> None:
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()

    def sync(self) -> None:
        os.fsync(self.log.fileno())


class SinkFeed(RoundCallback):
    """Each row to the live-curve sinks ``config.log`` names (:func:`open_sinks`: TensorBoard, MLflow)."""

    def __init__(self, sinks: list) -> None:
        self.sinks = sinks

    def committed(self, row: dict, state: EngineState) -> None:
        for sink in self.sinks:
            sink.write(row)


class ClientsTable(RoundCallback):
    """``clients.csv`` rewritten from the run's ``rows`` after each round that evaluated every client
    (``train.client_eval_every``: :func:`fl.metrics.write_clients`)."""

    def __init__(self, out: Path, rows: list[dict]) -> None:
        self.out, self.rows = out, rows

    def committed(self, row: dict, state: EngineState) -> None:
        if "client_accuracy" in row:
            write_clients(self.out, self.rows)


class Checkpointer(RoundCallback):
    """``checkpoint.pt`` every ``train.checkpoint_every`` rounds and at the last (the rows it continues synced to
    disk first: ``metrics``), ``checkpoint_roundK.pt`` at ``train.keep_round``; it keeps the state of the last whole
    round (``state`` before the first), which :meth:`save` writes when the run stops."""

    def __init__(self, out: Path, train: TrainConfig, metrics: MetricsLog, state: EngineState) -> None:
        self.out, self.train, self.metrics, self.state = out, train, metrics, state

    def committed(self, row: dict, state: EngineState) -> None:
        self.state, t = state, row["round"]
        if t % self.train.checkpoint_every == 0 or t == self.train.rounds:
            self.metrics.sync()  # the rows a checkpoint continues are on disk before it is
            save_checkpoint(self.out / "checkpoint.pt", state)
        if t == self.train.keep_round:
            save_checkpoint(self.out / f"checkpoint_round{t}.pt", state)


def save_on_stop(out: Path, state: EngineState) -> None:
    """The checkpoint of ``state``, the last whole round's, when a run stops (its rows synced first); no signal
    cuts it short."""
    with held():
        fsync_path(out / "metrics.jsonl")
        save_checkpoint(out / "checkpoint.pt", state)


class Progress(RoundCallback):
    """What a run says of each round: the progress bar on a terminal, a line per round elsewhere
    (:func:`round_line`; ``quiet``: neither), the note that its clients train sequentially once."""

    def __init__(self, out: Path, rounds: int, state: EngineState, rows: list[dict], quiet: bool) -> None:
        self.bar = tqdm(total=rounds, initial=state.round - 1, desc="rounds", unit="round", disable=quiet or None)
        self.lines = not quiet and not (is_terminal(sys.stdout) and is_terminal(sys.stderr))  # off a terminal
        self.out, self.rounds, self.noted = out, rounds, False
        self.before = rows[-1]["seconds"] if rows else 0.0  # the seconds of the round before

    def shown(self, row: dict) -> bool:
        self.bar.update(1)
        if self.lines:
            print(round_line(self.out, row, self.before, self.rounds), flush=True)
        self.before = row["seconds"]
        if "backend_note" in row and not self.noted:
            self.noted = tqdm.write(f"{self.out}: clients train sequentially: {row['backend_note']}") or True
        if "test_accuracy" in row:
            self.bar.set_postfix(acc=f"{row['test_accuracy']:.3f}")
        return False

    def close(self) -> None:
        self.bar.close()


class DivergenceStop(RoundCallback):
    """Stops the run at a round whose server model is not finite (its row says ``diverged``), naming the setting
    it most likely owes it to (:func:`divergence_cause`)."""

    def __init__(self, out: Path, config: RunConfig) -> None:
        self.out, self.config = out, config

    def shown(self, row: dict) -> bool:
        if not row.get("diverged"):
            return False
        cause = divergence_cause(self.config)
        said = f"the server model diverged (non-finite) at round {row['round']}; stopping (the likely cause: {cause})"
        tqdm.write(f"{self.out}: {said}")
        return True


def compute(exp: Experiment, state: EngineState, out: Path) -> tuple:
    """:meth:`Experiment.compute_round` of the round after ``state`` (``state`` untouched); a round that overflows
    (a value past float range) is refused in one line naming the likely cause."""
    try:
        return exp.compute_round(state)
    except RuntimeError as error:  # torch: "value cannot be converted to type float without overflow"
        if "overflow" not in str(error):
            raise
        raise InputError(
            f"{out}: round {state.round} overflowed (a value past float range): the run diverged; the likely cause: "
            f"{divergence_cause(exp.config)}"
        ) from None


def run_rounds(
    exp: Experiment, out: Path, state: EngineState, rows: list[dict], callbacks: Sequence[RoundCallback], start: float
) -> EngineState:
    """The rounds from ``state`` to ``train.rounds`` (``rows``: the run's rows so far, each new one appended;
    ``start``: the clock the rows' seconds count from): each round computed, its row made, then committed and
    handed to every callback; returns the last round's state. Ctrl-C / SIGTERM, or a worker lost, while a round
    computes or is evaluated leaves the state before it untouched, every row before it written; from the commit to
    the callbacks' end, a signal waits (held)."""
    communication = rows[-1]["communication"] if rows else 0
    while state.round <= exp.config.train.rounds:
        new, record, updates = compute(exp, state, out)
        row = round_row(exp, new, record, communication, time.perf_counter() - start)
        cause = not_the_step(exp) if row.get("diverged") else None
        if cause:  # no step size makes this round finite: a refusal, not a result
            raise InputError(f"{out}: round {state.round} made the server model non-finite whatever train.lr: {cause}")
        with held():
            apply_round(new, updates)
            state, communication = new, row["communication"]
            rows.append(row)
            for callback in callbacks:
                callback.committed(row, state)
        if any([callback.shown(row) for callback in callbacks]):  # every callback says its piece first
            break
        if stop_requested():
            raise KeyboardInterrupt
    return state


def train_rounds(
    config: RunConfig, out: Path, exp: Experiment, state: EngineState, rows: list[dict], quiet: bool, start: float,
    callbacks: Sequence[RoundCallback] = (),
) -> EngineState:  # fmt: skip
    """:func:`run_rounds` with the run's own callbacks (metrics file, live curves, per-client table, checkpoints,
    progress, divergence stop) and then ``callbacks``; a stop (Ctrl-C, SIGTERM, a worker lost) saves the checkpoint
    of the last whole round and ends in one line (:class:`Interrupted`, or an InputError for a worker lost)."""
    progress = Progress(out, config.train.rounds, state, rows, quiet)
    checkpointer = None
    try:
        with contextlib.ExitStack() as stack:  # the sinks close before the metrics file
            metrics = MetricsLog(stack.enter_context(open_unlinked(out / "metrics.jsonl", "a")))
            sinks = open_sinks(config, rows, out, stack)
            checkpointer = Checkpointer(out, config.train, metrics, state)
            own = [metrics, SinkFeed(sinks), ClientsTable(out, rows), checkpointer, progress]
            every = [*own, DivergenceStop(out, config), *callbacks]
            state = run_rounds(exp, out, state, rows, every, start)
    except (KeyboardInterrupt, WorkerLost) as stop:  # the round in flight is lost, the state before it is whole
        state = checkpointer.state if checkpointer is not None else state
        save_on_stop(out, state)
        progress.close()
        lost = isinstance(stop, WorkerLost)
        why, kind = (f"{stop}; saved", InputError) if lost else ("interrupted", Interrupted)
        raise kind(f"{why} after round {state.round - 1}; continue with --resume {out}") from None
    progress.close()
    for callback in callbacks:
        callback.close()
    return state


def announce(exp: Experiment, out: Path) -> None:
    """Before any round: the notes on the clients' held-out splits (none at all is refused), and the picture of the
    synthetic samples a method made before round 1."""
    for note in (exp.held_out_note(), exp.few_held_out_note()):
        if note:
            print(note, file=sys.stderr)
    if exp.synthetic:
        x_syn = np.concatenate([s[0] for s in exp.synthetic])
        y_syn = np.concatenate([s[1] for s in exp.synthetic])
        title = f"{exp.method.name}: synthetic samples per class"
        draw(Picture("synthetic_samples.png", x_syn, y_syn, title), out)


def origin(config: RunConfig, out: Path, resume: bool, start_from: Path | None) -> tuple[bool, Path | None]:
    """Whether the run in ``out`` resumes, and the checkpoint it starts from: a run to resume that was stopped
    before its first checkpoint (e.g. killed) starts again with its config (from its ``init_from.txt``, as
    extended); a run started from a checkpoint records it (``init_from.txt``), a run from round 1 drops an earlier
    start's record (a restart must not read another origin)."""
    record = out / "init_from.txt"
    if resume and not (out / "checkpoint.pt").exists():
        start_from = read_origin(out)
        if keyed_rounds(out, {}) != config.train.rounds:  # and extended: started as the longer run
            write_rounds(out, config.train.rounds)
        print(f"{out}: no checkpoint yet; starting again from {start_from or 'round 1'} with its config")
        return False, start_from
    if start_from is not None:
        write_text_atomically(record, relative_origin(start_from, out))
    elif not resume and (record.is_symlink() or record.exists()):  # an earlier start's, in fl.run's own folder
        record.unlink()
    return resume, start_from


def resume_point(config: RunConfig, out: Path, state: EngineState) -> tuple[int, list[dict]]:
    """What a resume of the run in ``out`` with ``config`` checks of its checkpoint's ``state``, reading only: the
    config it was trained with is ``config`` or a shorter one ``config`` extends (:func:`fl.runfolder.extend`), and
    its rows up to it can be extended; (the rounds of the config it was trained with, the rows before it). One line
    for what is refused (fl.fleet checks every entry's resume with it before anything is written)."""
    rounds = config.train.rounds
    before = keyed_rounds(out, state.extra)
    if before > rounds:
        raise InputError(
            f"{out}: its checkpoint was made by a run of {before} rounds, its config.json says {rounds}; a run is "
            "extended, never shortened: restore config.json"
        )
    expected = config_key(config) if before == rounds else extended_key(config, before)
    if state.extra.get("config_key", expected) != expected:
        raise InputError(
            f"{out / 'config.json'} differs from the config its checkpoint was trained with (edited?); restore it, or "
            "start a new run with the new config"
        )
    rows = resumable_rows(out / "metrics.jsonl", state.round)
    why = extension_refusal(config, before, rows) if before < rounds else None
    if why:  # refused before anything is recorded
        raise InputError(f"--set train.rounds={rounds}: {why}")
    return before, rows


def resumed(config: RunConfig, out: Path, exp: Experiment, synthetic: str, accept_code_change: bool) -> tuple:
    """The state and rows the run in ``out`` continues from (its checkpoint and the rows before it), after what a
    resume checks: the data it started on, its plug-ins' and the rest of its code (``accept_code_change``), the
    config its checkpoint was trained with (or a shorter one it extends: :func:`resume_point`)."""
    rounds = config.train.rounds
    state = load_checkpoint(out / "checkpoint.pt", exp.device, exp.local.client_state, exp.x0, rounds)
    data_note = provenance.check_data(out, exp.data_used)  # first: never train the rest on other data
    if data_note:
        print(data_note, file=sys.stderr)
    note = provenance.check_plugins(out, config.plugins(), state.round, accept_code_change)
    if note:
        print(note, file=sys.stderr)
    before, rows = resume_point(config, out, state)
    note = provenance.check_resume(out, synthetic, state.round, accept_code_change, where_it_ran(exp))
    if note:
        print(note, file=sys.stderr)
    if before < rounds:  # --set train.rounds=N: on to N rounds
        extend(out, config, before, state)
    return state, rows


def starting_point(
    config: RunConfig, out: Path, resume: bool, start_from: Path | None, exp: Experiment, accept_code_change: bool
) -> tuple[EngineState, list[dict]]:
    """The state the run's next round starts from and its rows so far, with ``metrics.jsonl`` holding exactly
    those rows: a resumed run's (:func:`resumed`), another run's checkpoint (:func:`fl.checkpoints.init_from`), or
    round 1 (the step size tuned first where ``train.lr`` is a grid); a new run records its provenance."""
    resume, start_from = origin(config, out, resume, start_from)
    synthetic = provenance.synthetic_hash(exp.synthetic)
    if not resume:
        provenance.record(out, synthetic, where_it_ran(exp) | {"plugins": config.plugins()})
    if resume:
        state, rows = resumed(config, out, exp, synthetic, accept_code_change)
    elif start_from is not None:
        state, rows = init_from(config, start_from, exp)
    else:
        lr, table = exp.tune_lr()
        state = exp.fresh_state(lr)
        state.extra["lr_tuning"] = table
        rows = []
    write_text_atomically(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    state.extra["config_key"], state.extra["config_rounds"] = config_key(config), config.train.rounds
    return state, rows


def finish(config: RunConfig, out: Path, rows: list[dict], state: EngineState, exp: Experiment, seconds: float) -> dict:
    """The finished (or diverged) run's summary, written last into ``summary.json`` after its pictures (the
    method's, the per-client accuracy, the learning curve); returned."""
    summary = summarise(config, rows, state, exp, seconds)
    for picture in exp.method.pictures(state.method):
        draw(picture, out)
    draw_clients(out, rows)
    draw_curve(out, rows, config)
    summary["provenance_sha256"] = provenance.digest(out)  # a provenance.json altered after the run shows
    write_text_atomically(out / "summary.json", json.dumps(to_json(summary), indent=2, allow_nan=False))
    return summary


def execute(
    config: RunConfig,
    out: Path,
    resume: bool = False,
    quiet: bool = False,
    start_from: Path | None = None,
    exp: Experiment | None = None,
    accept_code_change: bool = False,
    callbacks: Sequence[RoundCallback] = (),
) -> dict:
    """Run (or continue) the experiment in ``out`` (from round 1, or from another run's checkpoint
    ``start_from``); returns the summary. Ctrl-C saves a checkpoint first. ``exp``: the experiment to run (default
    ``Experiment(config)``; the Flower server passes one whose rounds go through Flower). A resume checks the
    folder's ``provenance.json`` (:mod:`fl.provenance`): other code stops it in one line unless
    ``accept_code_change``. ``callbacks``: called at each round after the run's own (:class:`RoundCallback`)."""
    with trainer_threads(config):
        exp = exp or Experiment(config, out if resume else None)
        token = WORK_FOLDER.set(out)  # long method work (DynaFed's synthesis) keeps its progress in the run folder
        try:
            announce(exp, out)  # before any work: no client to evaluate is refused, some without one said
            exp.start_workers()
            state, rows = starting_point(config, out, resume, start_from, exp, accept_code_change)
            start = time.perf_counter() - (rows[-1]["seconds"] if rows else 0.0)
            state = train_rounds(config, out, exp, state, rows, quiet, start, callbacks)
            return finish(config, out, rows, state, exp, time.perf_counter() - start)
        finally:
            WORK_FOLDER.reset(token)
