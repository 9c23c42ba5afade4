"""A fleet: many runs in one process, their clients' local training computed together (``fl.sweep --fleet``).

Each run is an ordinary ``fl.run`` (:func:`fl.loop.execute`) in a thread of its own: it builds its data, model,
algorithm and method, writes its folder (config, metrics, checkpoints, provenance, summary), resumes and stops as
``fl.run`` does. Where its round trains its participants, it hands the work to the fleet's :class:`Rendezvous`
and waits; once every live run has arrived, the fleet computes all of it, each job on one core, as many side by
side as there are cores (on CUDA one after another: :func:`side_by_side`):

- runs whose clients train batched (``train.backend = "batched"``, or "auto" on CUDA; :mod:`fl.batched`) are
  trained in one call of :func:`fl.batched.train_groups` per shape (model, dtype, device, batch size, the tasks'
  layout): one ``vmap(grad(loss))`` over runs × clients per step, each group with its own algorithm, step size,
  optimiser, batches and method objective (HFMDs' pool batches and prototypes). A row's numbers do not depend
  on the rows beside it (float64 on the CPU: bit for bit, tested; float32: to rounding, a convolution's kernels
  may differ with the number of rows).
- the others (the CPU's default backend, a per-client objective without a batched form: FedCOG) train their
  clients one after another as ``fl.run`` does, in a job of their own beside the other runs' jobs.

Runs with equal samples hold one copy of them (:class:`SharedTensors`: a fleet of seeds keeps the dataset once on
the device). Everything else of a run (its data, evaluation, the method's server hooks) runs in its thread with the
fleet's turn: one run at a time, so no run's work interleaves another's. Every run therefore equals ``fl.run`` of
its config alone. Models with dropout are refused (their draws would not be the run's alone); the jobs that run side by
side draw from no global random generator (every draw of training comes from generators seeded by (seed, round,
client)).

Ctrl-C or SIGTERM, or a run that fails, stops every run at its next round (each saves its checkpoint; a second or
third signal waits for them: :func:`patient_signals`); running the same command again resumes them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from fl.batched import FLEET, Group, has_dropout, layout, train_groups
from fl.config import RunConfig, load_config
from fl.experiment import Experiment
from fl.flat import FlatModel
from fl.loop import Interrupted, execute
from theory.cli import ArgumentParser, guarded
from theory.errors import InputError
from theory.output import read_text_bounded

CPU_NUMBERS = 2**23  # parameters per call on the CPU: past ~8M (32 MB in float32) a step's rows leave the cache
# and cost up to 2.7x more per row (an MLP of 199k parameters: 1.4 ms a row at 40 rows, 3.7 ms at 80; 2-core CPU)


class Rendezvous:
    """Where the fleet's ``n`` runs meet to train. Run k's :class:`Seat` hands over :meth:`Seat.train` (its batched
    group, trained in one call with the others'), :meth:`Seat.work` (its own training, computed beside the
    others') or :meth:`Seat.together` (an item computed with the other runs' of the same key: DynaFed's batched
    syntheses); a computation starts once every live run has arrived. ``rows``: at most this many client rows per call
    (whole groups; 0: on CUDA no limit, on the CPU :data:`CPU_NUMBERS` parameters); ``threads``: jobs computed side
    by side, each on one core; ``on_compute``: called with the number of runs' rounds each computation trained
    (progress). ``calls`` counts the batched calls, ``trained`` the groups trained in them."""

    def __init__(
        self, n: int, rows: int = 0, threads: int = 1, on_compute: Callable[[int], object] | None = None
    ) -> None:
        self.rows, self.threads, self.on_compute = rows, threads, on_compute
        self.calls = self.trained = 0
        self._cond = threading.Condition()
        self._live = set(range(n))
        self._pending: dict[int, object] = {}  # (flat, group) to batch, or a run's own work (a callable)
        self._results: dict[int, object] = {}
        self._stopping = False
        self._turn = threading.Lock()  # one run computes at a time outside the shared training (see take_turn)

    def take_turn(self) -> None:
        """Run in this thread now, the others waiting: only the shared training runs while no run holds its turn,
        so a run's own work (its data, evaluation, method, global random draws) never interleaves another's."""
        self._turn.acquire()

    def give_turn(self) -> None:
        self._turn.release()

    def seat(self, k: int) -> Seat:
        return Seat(self, k)

    def leave(self, k: int) -> None:
        """Run k has ended: the others no longer wait for it."""
        with self._cond:
            self._live.discard(k)
            self._run_if_ready()

    def stop(self) -> None:
        """Every run stops at its next arrival (KeyboardInterrupt there: it saves its checkpoint)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def train(self, k: int, flat: FlatModel, group: Group) -> tuple[tuple[torch.Tensor, list[int]], int]:
        return self._submit(k, (flat, group))

    def work(self, k: int, fn: Callable[[], object]) -> object:
        return self._submit(k, fn)

    def together(self, k: int, key: Hashable, item: object, compute: Callable[[list], list]) -> object:
        return self._submit(k, Together(key, item, compute))

    def _submit(self, k: int, request: object) -> object:
        """Run k's request, computed with every live run's, once all have arrived; its result."""
        self.give_turn()
        try:
            with self._cond:
                while k in self._pending and not self._stopping:  # its last request has not been computed yet
                    self._cond.wait()
                if self._stopping:
                    raise KeyboardInterrupt
                self._pending[k] = request
                self._run_if_ready()
                while k not in self._results and not self._stopping:
                    self._cond.wait()
                if k not in self._results:
                    raise KeyboardInterrupt
                result = self._results.pop(k)
        finally:
            self.take_turn()
        if isinstance(result, BaseException):
            raise result
        return result

    def _run_if_ready(self) -> None:
        if not self._pending or not self._live <= set(self._pending):
            return
        requests = dict(self._pending)
        try:
            self._results.update(self._compute(requests))
            if self.on_compute is not None:
                self.on_compute(len(requests))  # the runs' rounds trained (progress)
        except BaseException as error:  # every waiting run raises it
            self._results.update(dict.fromkeys(requests, error))
        self._pending.clear()
        self._cond.notify_all()

    def _compute(self, requests: dict[int, object]) -> dict[int, object]:
        """The batched requests of one shape in calls of :meth:`_calls`, and every run's own work, side by side on
        ``threads`` cores; {run: result}."""
        batched = {k: r for k, r in requests.items() if isinstance(r, tuple)}
        together: dict[Hashable, list[int]] = {}
        for who, request in requests.items():
            if isinstance(request, Together):
                together.setdefault(request.key, []).append(who)
        shapes: dict[tuple, list[int]] = {}
        for who, (flat, group) in batched.items():
            shapes.setdefault(shape_key(flat, group), []).append(who)
        calls = [call for members in shapes.values() for call in self._calls(members, batched)]

        def call_of(call: list[int]) -> dict[int, object]:
            trained = train_groups(batched[call[0]][0], [batched[who][1] for who in call], "different")
            return {who: (out, len(call)) for who, out in zip(call, trained)}

        def work_of(who: int) -> dict[int, object]:
            return {who: requests[who]()}

        def together_of(members: list[int]) -> dict[int, object]:
            return dict(zip(members, requests[members[0]].compute([requests[who].item for who in members])))

        own = [k for k in requests if k not in batched and not isinstance(requests[k], Together)]
        jobs = [(call_of, call) for call in calls] + [(together_of, m) for m in together.values()]
        jobs += [(work_of, k) for k in own]
        self.calls, self.trained = self.calls + len(calls), self.trained + len(batched)

        def one(job) -> dict[int, object]:
            torch.set_num_threads(1)  # each job on one core: its numbers never depend on the threads
            fn, arg = job
            return fn(arg)

        if self.threads > 1 and len(jobs) > 1:  # independent jobs side by side (torch releases the GIL)
            with ThreadPoolExecutor(min(self.threads, len(jobs))) as pool:
                parts = list(pool.map(one, jobs))
        else:
            parts = [one(job) for job in jobs]
        return {who: result for part in parts for who, result in part.items()}

    def _calls(self, members: list[int], requests: dict) -> list[list[int]]:
        """The members packed into calls of at most ``rows`` client rows (whole groups, in arrival order); on the
        CPU with ``rows`` = 0, at most :data:`CPU_NUMBERS` parameters a call."""
        flat = requests[members[0]][0]
        limit = self.rows or (max(1, CPU_NUMBERS // flat.n_params) if not flat.params.is_cuda else 0)
        calls, rows = [[]], 0
        for who in members:
            m = len(requests[who][1].indices)
            if limit and calls[-1] and rows + m > limit:
                calls, rows = [*calls, []], 0
            calls[-1].append(who)
            rows += m
        return calls


class Seat:
    """Run k's place in a :class:`Rendezvous` (what :data:`fl.batched.FLEET` holds in its thread)."""

    def __init__(self, rendezvous: Rendezvous, k: int) -> None:
        self.rendezvous, self.k = rendezvous, k

    def train(self, flat: FlatModel, group: Group) -> tuple[tuple[torch.Tensor, list[int]], int]:
        return self.rendezvous.train(self.k, flat, group)

    def work(self, fn: Callable[[], object]) -> object:
        return self.rendezvous.work(self.k, fn)

    def together(self, key: Hashable, item: object, compute: Callable[[list], list]) -> object:
        return self.rendezvous.together(self.k, key, item, compute)


@dataclass(frozen=True)
class Together:
    """A run's item for a computation shared with the runs that arrive with the same key (:meth:`Seat.together`)."""

    key: Hashable
    item: object
    compute: Callable[[list], list]


def shape_key(flat: FlatModel, group: Group) -> tuple:
    """What must agree for groups to share one vmapped call: the model (its layers and parameter shapes), the
    parameters' dtype and device, the batch size, the graphs setting (``train.graphs``), the samples' shape and
    dtype, and the tasks' layout (extra samples a row, features wanted: :func:`fl.batched.layout`)."""
    model = flat.model
    shapes = tuple((name, tuple(p.shape)) for name, p in model.named_parameters())
    x = group.x
    return (type(model), repr(model), shapes, flat.params.dtype, flat.params.device, group.local.batch_size,
            group.local.graphs, tuple(x.shape[1:]), x.dtype, layout(group))  # fmt: skip


class SharedTensors:
    """One copy of each data tensor among the fleet's runs: a run whose samples equal an earlier run's (the same
    dataset and preprocessing; its partition is index tensors of its own) uses that run's tensors, so a fleet of R
    runs holds the dataset once on the device, not R times. Nothing writes into these tensors (the runs read
    them; a method that adds samples, Fedssyn, makes new ones, which then are its own). ``saved``: bytes not held."""

    def __init__(self) -> None:
        self._kept: list[torch.Tensor] = []
        self.saved = 0

    def share(self, tensor: torch.Tensor) -> torch.Tensor:
        for kept in self._kept:
            same = (kept.shape, kept.dtype, kept.device) == (tensor.shape, tensor.dtype, tensor.device)
            if kept is tensor or (same and torch.equal(kept, tensor)):
                self.saved += 0 if kept is tensor else tensor.numel() * tensor.element_size()
                return kept
        self._kept.append(tensor)
        return tensor

    def share_data(self, data) -> None:
        """A run's :class:`fl.clients.ClientSet`: its samples and test set replaced by the fleet's equal copies."""
        data.x, data.y, data.test_x, data.test_y = (self.share(t) for t in (data.x, data.y, data.test_x, data.test_y))


def run_fleet(
    runs: Sequence[tuple[RunConfig, Path, bool]], quiet: bool = True, rows: int = 0, threads: int = 0
) -> list[dict]:
    """Every run (config, folder, resume[, start_from checkpoint, accept_code_change]) of ``runs`` to its end in
    one process (see the module's docstring); their summaries, in order. The caller holds the folders' locks and
    made them ready (fl.sweep, :func:`main`). ``rows``: at most this many client rows per batched call (0: see
    :class:`Rendezvous`); ``threads``: jobs side by side (0: the cores this process may use; on CUDA one:
    :func:`side_by_side`)."""
    bar = tqdm(total=sum(rounds_to_train(*run[:3]) for run in runs), desc="fleet",
               unit="run-round", disable=None)  # fmt: skip
    rendezvous = Rendezvous(len(runs), rows, side_by_side([run[0] for run in runs], threads), bar.update)
    shared = SharedTensors()  # used in the runs' turns: one at a time
    results: list[dict | BaseException | None] = [None] * len(runs)
    ended = [threading.Event() for _ in runs]  # run k's thread has ended (waited on: never Thread.join)
    start = time.perf_counter()

    def one(k: int, config: RunConfig, out: Path, resume: bool, start_from: Path | None = None, accept: bool = False):
        FLEET.set(rendezvous.seat(k))
        rendezvous.take_turn()
        try:
            config = replace(config, train=replace(config.train, workers=1))  # no worker processes: the fleet is one
            exp = Experiment(config)
            shared.share_data(exp.data)
            if has_dropout(exp.flat.model):
                raise InputError(
                    f"{out}: model {config.model.name!r} has dropout; its draws in a fleet would not be the run's "
                    "alone: run it without --fleet"
                )
            results[k] = execute(config, out, resume, quiet, start_from, exp, accept)
            print(f"  finished {out} ({time.perf_counter() - start:.0f} s)", flush=True)
        except BaseException as error:  # the main thread reports it
            results[k] = error
            rendezvous.stop()  # a run that fails (or is interrupted) stops the others at their next round
        finally:
            rendezvous.leave(k)
            rendezvous.give_turn()
            ended[k].set()

    threads = [threading.Thread(target=one, args=(k, *run), daemon=True) for k, run in enumerate(runs)]
    threads_before = torch.get_num_threads()
    torch.set_num_threads(
        1
    )  # as every fl.run on the CPU (fl.experiment.trainer_threads): numbers never depend on cores
    interrupted = False
    try:
        try:
            for thread in threads:
                thread.start()
            wait_for(ended)
            with patient_signals():
                joined(threads)
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM in this thread: every run saves its checkpoint
            interrupted = True
            with patient_signals():  # a second or third signal waits for the checkpoints too
                rendezvous.stop()
                wait_for([event for event, thread in zip(ended, threads) if thread.ident is not None])
                joined(threads)
    finally:
        torch.set_num_threads(threads_before)
        bar.close()
    return outcome(runs, results, interrupted)


def joined(threads: Sequence[threading.Thread]) -> None:
    """Every started run thread past its last statement, its torch objects freed, before this process may exit: a
    thread still freeing tensors while the interpreter shuts down aborts the process (exit 134; pytorch issue
    38228). Every run has ended when this is called, so the joins return at once."""
    for thread in threads:
        if thread.ident is not None:
            thread.join()


def wait_for(ended: Sequence[threading.Event]) -> None:
    """Until every run's thread has ended: on their Events, in slices of 0.1 s, never on ``Thread.join`` or
    ``Thread.is_alive`` (a KeyboardInterrupt raised inside them makes CPython 3.11 take a live thread for ended,
    bpo-45274, and the process would leave while its runs still write). Slices, because the main thread runs its
    signal handlers only between waits."""
    while not all(event.is_set() for event in ended):
        next(event for event in ended if not event.is_set()).wait(0.1)


@contextlib.contextmanager
def patient_signals() -> Iterator[None]:
    """While a stopped fleet's runs save their checkpoints: a further Ctrl-C or SIGTERM raises nothing (leaving now
    would lose every run's rounds since its last checkpoint) and says once that the fleet waits for them (SIGKILL
    leaves at once); the handlers before come back after. In the main thread only (where signals are handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    said: list[bool] = []

    def notice(signum, frame) -> None:
        if not said:
            said.append(True)
            os.write(2, b"stopping: every run saves its checkpoint at its next round; waiting for them\n")

    previous = {sig: signal.signal(sig, notice) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def side_by_side(configs: Sequence[RunConfig], threads: int) -> int:
    """How many of a computation's jobs run side by side: one where any run is on CUDA (a CUDA graph's capture, the
    batched steps' (:mod:`fl.graphs`) or DynaFed's matching's, must not meet another thread's CUDA work, and one
    GPU runs the default stream's kernels in turn anyway); else ``threads``, 0: the cores this process may use."""
    device = [config.train.device for config in configs]
    if any(d.startswith("cuda") or (d == "auto" and torch.cuda.is_available()) for d in device):
        return 1
    return threads or len(os.sched_getaffinity(0))


def rounds_to_train(config: RunConfig, out: Path, resume: bool) -> int:
    """The rounds a run of the fleet has left to train (its lr grid's tuning rounds included; a resumed run: the
    rounds past its metrics' last row), for the progress bar."""
    done = 0
    if resume and (out / "metrics.jsonl").is_file():
        with (out / "metrics.jsonl").open(encoding="utf-8", errors="replace") as rows:
            done = sum(1 for _ in rows)
    train = config.train
    tuning = train.tune_rounds * len(train.lr) if len(train.lr) > 1 and not resume else 0
    return max(0, train.rounds - done) + tuning


def outcome(runs: Sequence[tuple[RunConfig, Path, bool]], results: list, interrupted: bool) -> list[dict]:
    """The summaries, or the fleet's failure in one line: the first run that failed (not merely stopped), else
    the interruption with the command to continue."""
    stopped = [runs[k][1] for k, r in enumerate(results) if isinstance(r, BaseException)]
    for r in results:
        if isinstance(r, BaseException) and not _is_stop(r):
            raise r
    if interrupted or stopped:
        raise InputError(f"fleet interrupted; {len(stopped)} run(s) saved at their last round; run the same command "
                         "again to continue them")  # fmt: skip
    return results


def _is_stop(error: BaseException) -> bool:
    """A run's own ending on the fleet's stop: KeyboardInterrupt, or fl.loop's :class:`~fl.loop.Interrupted`."""
    return isinstance(error, KeyboardInterrupt | Interrupted)


MAX_ENTRIES = 1_000  # runs a fleet spec lists at most, refused before any entry is read further: each entry is a run
# in this one process (a thread holding its model, optimiser and clients' state; only the data shared) that every
# round of the others waits for, and each is checked (config, folder, checkpoint, data) before anything starts. Past
# a thousand, one process is the wrong tool: several specs (or fl.sweep, whose runs are processes: MAX_RUNS) are not.

PATH_FLAGS = ("--config", "--out", "--resume", "--init-from", "--tensorboard", "--mlflow", "--compare")


def run_arguments(spec: Path) -> list[list[str]]:
    """The runs of a fleet spec: a JSON list of at most :data:`MAX_ENTRIES` ``python -m fl.run`` argument lists
    (one in one line if not)."""
    try:
        entries = json.loads(read_text_bounded(spec, "fleet spec (JSON)"))
    except (OSError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise InputError(f"{spec}: not a readable JSON file ({error})") from None
    if (
        not isinstance(entries, list)
        or not entries
        or not all(isinstance(e, list) and all(isinstance(a, str) for a in e) for e in entries)
    ):
        raise InputError(
            f'{spec}: expected a list of fl.run argument lists, e.g. [["--config", "a.toml", "--out", "runs/a"]]'
        )
    if len(entries) > MAX_ENTRIES:
        raise InputError(f"{spec}: {len(entries):,} entries, over the {MAX_ENTRIES:,} runs a fleet takes in one "
                         "process; split it into several specs")  # fmt: skip
    return entries


def odd_argument(argv: list[str], where: str) -> None:
    """Refuse (one line naming the entry and the flag) an argument that no path or value may hold: a NUL byte, or
    a character no file name holds (a lone surrogate from a JSON escape), before anything looks at a path."""
    for k, arg in enumerate(argv):
        why = "a NUL byte" if "\0" in arg else None if file_name_text(arg) else "a character no file name holds"
        if why is None:
            continue
        flag, value = arg.split("=", 1) if arg.startswith("--") and "=" in arg else (None, arg)
        flag = flag or (argv[k - 1] if k and argv[k - 1].startswith("-") else f"argument {k + 1}")
        raise InputError(f"{where}: {flag} {value!r} holds {why}; no path or value may")


def file_name_text(text: str) -> bool:
    """Whether ``text`` can be a file name's (encoded as the file system encodes names: a lone surrogate cannot)."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


def parsed_entry(argv: list[str], where: str) -> argparse.Namespace:
    """A fleet entry's fl.run arguments, parsed and checked as fl.run checks them (one line naming the entry), and
    what a fleet refuses besides: an empty entry, one that runs nothing, one that names no run (fl.run's default
    config), an odd argument (:func:`odd_argument`)."""
    from fl.launch import build_parser

    parser = build_parser()

    def refuse(message: str):
        raise InputError(f"{where}: {message}")

    parser.error = refuse  # one line naming the entry, never argparse's exit
    if not argv:
        raise InputError(f"{where}: empty; a fleet entry is a run's fl.run arguments (its --config or --set, and "
                         "--out), never the default config")  # fmt: skip
    odd_argument(argv, where)
    if "-h" in argv or "--help" in argv:
        raise InputError(f"{where}: --help runs nothing; a fleet entry starts or continues a run")
    args = parser.parse_args(argv)
    if args.compare or args.print_config:
        flag = "--compare" if args.compare else "--print-config"
        raise InputError(f"{where}: {flag} runs nothing; a fleet entry starts or continues a run")
    if not (args.config or args.resume or (args.set and args.out)):
        raise InputError(f"{where}: names no run; a fleet entry needs --config (or --set with --out) to start one, "
                         "or --resume to continue one, never fl.run's default config")  # fmt: skip
    flags_as_fl_run(args, where)
    return args


def same_run(config: RunConfig, out: Path) -> None:
    """Refuse (one line) a run folder ``out`` that holds a run (its config.json) of another config than the entry's
    ``config``: :func:`checked_run` would take its finished run for the entry's, or continue its started one with
    its own config. Compared as ``fl.sweep`` compares them (:meth:`fl.config.RunConfig.identity`), without what a
    resumed run may change: its device, and its plug-ins' code (checked on the resume, ``--accept-code-change``)."""
    from fl.checkpoints import config_key
    from fl.runfolder import saved_config

    if not (out / "config.json").is_file():
        return
    saved = saved_config(out)
    if config_key(saved) == config_key(config):
        return
    keys = differing_keys(saved.identity(), config.identity())
    hint = f"; to extend it: --resume {out} --set train.rounds=N" if keys == ["train.rounds"] else ""
    differ = f" (differing in {', '.join(keys[:3])})" if keys else ""
    raise InputError(f"{out} holds a run of another config{differ}; use another --out or remove it{hint}")


def differing_keys(theirs: dict, ours: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two config trees (either side's missing key included), sorted;
    ``train.device`` and ``plugins`` left out (a resume may change them)."""
    keys = []
    for key in sorted(set(theirs) | set(ours)):
        name = f"{prefix}{key}"
        if name in ("train.device", "plugins"):
            continue
        a, b = theirs.get(key), ours.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += differing_keys(a, b, f"{name}.")
        elif json.dumps(a) != json.dumps(b):
            keys.append(name)
    return keys


@dataclass(frozen=True)
class Checked:
    """A fleet entry that passed every check, nothing of it made or changed yet (:func:`checked_run`): its fl.run
    arguments (a started run's turned into its ``--resume``), its run folder, and its config (a start's; a resume's
    as :func:`fl.launch.locked_config` reads it)."""

    args: argparse.Namespace
    out: Path
    config: RunConfig


def checked_run(args: argparse.Namespace, accept: bool = False) -> Checked | None:
    """What a fleet entry (parsed: :func:`parsed_entry`) will do, everything that can refuse it checked, reading
    only (no folder made, no earlier run removed): None when its folder holds its finished run (unless
    ``--overwrite``: then it starts again, as ``fl.run --overwrite`` would); a started run of its config continued
    (unless ``--overwrite``; ``accept``: the fleet's ``--accept-code-change``), the others started. Refused: a folder
    holding a run of another config (:func:`same_run`), what ``fl.run`` refuses before it takes the folder's lock
    (:func:`fl.launch.checked_start`: the config, ``--init-from``, the folder), a folder another process runs in, a
    resume's config and checkpoint (:func:`resumable`)."""
    from fl.atomic import check_free
    from fl.launch import checked_start, locked_config
    from fl.runfolder import RUN_LOCK

    out = entry_folder(args)
    if not args.resume and not args.overwrite:
        same_run(load_config(args.config, list(args.set), notes=[]), out)
    if (out / "summary.json").is_file() and not args.overwrite:
        return None
    if not args.resume and (out / "config.json").is_file() and not args.overwrite:
        args = continued(args, out, accept)
    out, config = checked_start(args)
    check_free(out / RUN_LOCK, f"run directory {out}")
    if config is None:
        config = locked_config(args, out, None)  # a resume's: reads only (a start's is written under the lock)
        resumable(config, out)
    return Checked(args, out, config)


def continued(args: argparse.Namespace, out: Path, accept: bool) -> argparse.Namespace:
    """The arguments of an entry whose folder holds a started run of its config: ``--resume`` of that run (as
    scripts/resumable.sh continues it), the fleet's ``accept`` (``--accept-code-change``) with it."""
    resume = argparse.Namespace(**vars(args))
    resume.resume, resume.config, resume.set, resume.init_from, resume.out = out, None, [], None, None
    resume.overwrite, resume.accept_code_change = False, args.accept_code_change or accept
    return resume


def resumable(config: RunConfig, out: Path) -> None:
    """What the resume of the run in ``out`` (of ``config``) reads before it trains, checked now (one line; reading
    only): its checkpoint loads safely, whole and keyed with its config (:func:`fl.loop.resume_point`); a run
    stopped before its first checkpoint, the checkpoint its ``init_from.txt`` names, as ``--init-from`` checks it."""
    from fl.checkpoints import check_init_from, load_checkpoint
    from fl.loop import resume_point
    from fl.runfolder import read_origin

    if (out / "checkpoint.pt").exists():
        state = load_checkpoint(out / "checkpoint.pt", torch.device("cpu"), rounds=config.train.rounds)
        resume_point(config, out, state)
        return
    start = read_origin(out)
    if start is not None:
        check_init_from(config, start)


def checked_entries(
    entries: list[argparse.Namespace], spec: Path, accept: bool = False
) -> list[tuple[int, Checked | None]]:
    """Every entry checked (:func:`checked_run`), then the checkpoints the started ones start from
    (:func:`own_origins`) and every run's data (:func:`data_found`), before any entry's folder is made or changed;
    [(entry index, its check: None when finished)]. What is refused is one line naming the entry."""
    checked = []
    for k, args in enumerate(entries):
        with entry_errors(f"{spec} entry {k + 1}"):
            checked.append((k, checked_run(args, accept)))
    own_origins(checked, spec)
    data_found(checked, spec)
    return checked


@contextlib.contextmanager
def entry_errors(where: str) -> Iterator[None]:
    """An InputError, or an OS error on a path the entry names, as one line naming the entry (``where``)."""
    try:
        yield
    except InputError as error:
        raise InputError(f"{where}: {error}") from None
    except OSError as error:
        named = f" {error.filename}:" if error.filename else ""
        raise InputError(f"{where}:{named} {error.strerror or error}") from None


def own_origins(checked: list[tuple[int, Checked | None]], spec: Path) -> None:
    """Refuse (one line naming both entries) an entry whose ``--init-from`` checkpoint lies in a run folder that
    another entry of the fleet writes (a run it starts again or continues): that run rewrites or removes its
    checkpoints while this one would read them."""
    writers = {entry.out.resolve(): k for k, entry in checked if entry is not None}
    for k, entry in checked:
        start = entry.args.init_from if entry is not None else None
        writer = writers.get(start.parent.resolve()) if start is not None else None
        if writer is not None and writer != k:
            raise InputError(f"{spec} entry {k + 1}: --init-from {start} is in the run folder entry {writer + 1} "
                             "writes in this fleet; start it once that run has finished")  # fmt: skip


def data_found(checked: list[tuple[int, Checked | None]], spec: Path) -> None:
    """Every run's data found and read as the run reads it (:func:`fl.data.load`; each dataset once), before any
    entry's folder is made or changed: data that are missing refuse the spec naming the entry, never after an
    earlier entry's ``--overwrite`` removed its finished run."""
    from fl.data import load

    seen = set()
    for k, entry in checked:
        key = None if entry is None else (entry.config.data.dataset, entry.config.data.data_root or None)
        if key is None or key in seen:
            continue
        seen.add(key)
        with entry_errors(f"{spec} entry {k + 1}"):
            load(*key)


def made_ready(entry: Checked, locks: contextlib.ExitStack) -> tuple[RunConfig, Path, bool, Path | None, bool]:
    """A checked entry's folder made ready as ``fl.run`` makes it (a start's made, an ``--overwrite``'s earlier run
    removed: :func:`fl.runfolder.new_run_folder`), its lock held in ``locks`` and its config written (a start's) or
    read (a resume's) under it (:func:`fl.launch.locked_config`); the run as :func:`run_fleet` takes it."""
    from fl.atomic import locked
    from fl.launch import locked_config
    from fl.runfolder import RUN_LOCK, new_run_folder

    args, out = entry.args, entry.out
    if not args.resume:
        new_run_folder(out, args.overwrite, f"use --resume {out}, --overwrite, or another --out")
    locks.enter_context(locked(out / RUN_LOCK, busy=f"run directory {out}"))
    config = locked_config(args, out, None if args.resume else entry.config)
    return config, out, bool(args.resume), args.init_from, args.accept_code_change


def flags_as_fl_run(args: argparse.Namespace, where: str) -> None:
    """What ``fl.run`` refuses of an entry's flags, refused before the entry is looked at further (a finished run
    included): ``--resume`` with an ``--out`` elsewhere or ``--overwrite``, ``--init-from`` with ``--resume``; one
    line naming the entry."""
    from fl.launch import resume_in_place

    try:
        if args.init_from and args.resume:
            raise InputError("--init-from starts a new run; --resume continues one: use one of them")
        # --accept-code-change without --resume is checked later: a started entry is continued with it (checked_run)
        resume_in_place(args.resume, args.out, args.overwrite, args.accept_code_change and bool(args.resume))
    except InputError as error:
        raise InputError(f"{where}: {error}") from None


def entry_folder(args: argparse.Namespace) -> Path:
    """The run folder a fleet entry writes: ``--resume``, else ``--out``, else fl.run's default
    ``results/runs/<config name>``."""
    return args.resume or args.out or Path("results/runs") / (args.config.stem if args.config else "default")


def one_folder_each(entries: list[argparse.Namespace], spec: Path) -> None:
    """Refuse (one line naming both entries) two entries that write one run folder: the second would wait on the
    lock the fleet itself holds for the first."""
    seen: dict[Path, int] = {}
    for k, args in enumerate(entries):
        folder = entry_folder(args)
        with entry_errors(f"{spec} entry {k + 1}"):
            try:
                key = folder.resolve()
            except RuntimeError:  # a loop of symbolic links
                raise InputError(f"{folder}: a loop of symbolic links") from None
        if key in seen:
            raise InputError(f"{spec} entries {seen[key] + 1} and {k + 1} both write the run folder {folder}; give "
                             "each entry its own --out")  # fmt: skip
        seen[key] = k


@guarded("fl.fleet")
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fl.fleet SPEC.json``: the runs SPEC lists (each a list of ``python -m fl.run`` arguments) in one
    process as a fleet; a finished run is left as it is, a started one continues, the others start (``--overwrite``
    in an entry: its run starts again). Every entry is checked (:func:`checked_entries`) before any entry's folder
    is made or changed; then the folders are made ready (:func:`made_ready`) and the runs train together."""
    parser = ArgumentParser(prog="python -m fl.fleet", description="Many fl.run runs in one process (a fleet).")
    parser.add_argument("spec", type=Path, help="JSON list of fl.run argument lists")
    parser.add_argument(
        "--accept-code-change", action="store_true", help="continue started runs that other code started (recorded)"
    )
    args = parser.parse_args(argv)
    entries = [parsed_entry(entry, f"{args.spec} entry {k + 1}") for k, entry in enumerate(run_arguments(args.spec))]
    one_folder_each(entries, args.spec)
    checked = checked_entries(entries, args.spec, args.accept_code_change)
    for k, entry in checked:
        if entry is None:
            print(f"{args.spec} entry {k + 1} ({entry_folder(entries[k])}): finished", flush=True)
    with contextlib.ExitStack() as locks:
        runs = []
        for k, entry in checked:
            if entry is not None:
                with entry_errors(f"{args.spec} entry {k + 1}"):
                    runs.append(made_ready(entry, locks))
        if runs:
            run_fleet(runs, quiet=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
