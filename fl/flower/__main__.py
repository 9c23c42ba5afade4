"""``python -m fl.flower``: one config through Flower's simulation engine (one SuperNode per client).

    python -m fl.flower --config configs/fmnist_quick.toml --out results/runs/quick_flower
    python -m fl.flower --resume results/runs/quick_flower

The run folder is ``fl.run``'s (config.json, metrics.jsonl, checkpoint.pt, summary.json), so ``python -m fl.run
--compare`` and the figures read it alike, and it is locked as ``fl.run`` locks it (:data:`fl.runfolder.RUN_LOCK`): one
writer at a time, whichever of the two entry points. Ctrl-C (or SIGTERM) stops the server at its next exchange with
the clients, saves the checkpoint of the last whole round, shuts Ray down and exits; the run lives in a session of
its own under a small supervisor (:func:`supervise`), so a SIGTERM to the whole process group (``timeout``, SLURM)
reaches the run alone, never Ray's workers first: the last whole round is saved and the exit code is 143.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

from fl.atomic import locked
from fl.config import RunConfig, load_config
from fl.launch import resume_in_place
from fl.runfolder import RUN_LOCK, new_run_folder, read_run_config
from theory.cli import ArgumentParser, guarded
from theory.errors import InputError
from theory.output import read_object, write_text_atomically

RAY_RESOLUTION = 1e-4  # Ray refuses a fractional resource finer than this


@functools.lru_cache(maxsize=1)
def machine_cpus() -> float:
    """The CPUs Ray gives its node on this machine (cgroup limits included; ``os.cpu_count()`` without Ray)."""
    try:
        from ray._private.utils import get_num_cpus
    except ImportError:
        return float(os.cpu_count() or 1)
    return float(get_num_cpus())


def check_resources(cpus_per_client: float, n_clients: int) -> None:
    """Refuse, before Ray starts, a per-client CPU share Ray cannot schedule (it then waits forever or fails deep
    inside): not a finite number, not above 0 (Ray's resolution: 0.0001), more than the machine has, or so small that
    the pool of Ray actors (one process each, CPUs / share of them) would outnumber both the clients and the CPUs."""
    cpus = machine_cpus()
    what = f"--cpus-per-client {cpus_per_client!r}"
    if not math.isfinite(cpus_per_client) or cpus_per_client < RAY_RESOLUTION:
        raise InputError(f"{what}: must be a number from {RAY_RESOLUTION:g} to the machine's {cpus:g} CPUs")
    if cpus_per_client > cpus:
        raise InputError(f"{what}: more than the machine's {cpus:g} CPUs (Ray could place no client)")
    actors = int(cpus / cpus_per_client)
    if actors > max(n_clients, cpus):
        raise InputError(
            f"{what}: Ray would start {actors} actor processes for {n_clients} clients on {cpus:g} CPUs; "
            f"use at least {cpus / max(n_clients, cpus):.4g}"
        )


def simulate(
    config: RunConfig, out: Path, resume: bool = False, cpus_per_client: float = 1.0, accept_code_change: bool = False
) -> dict:
    """Run ``config`` into ``out`` in Flower's simulation engine; returns the summary. The caller holds the run
    folder's lock. Ctrl-C: the server stops at its next exchange with the clients and saves its checkpoint (the
    InputError of :func:`fl.loop.execute` that says so is raised here); Ray is shut down whatever happens.

    The engine runs in a thread of its own (:class:`Engine`), never in the thread that receives the signal: a
    KeyboardInterrupt in Flower's engine made it shut Ray down while its worker threads were still calling Ray, and
    Ray's core then ended the whole process at once (exit 1, the checkpoint never saved; or, milder, an actor's death
    or a broken pipe logged). Here the signal only asks the server to stop; the server's app ends, and Flower winds
    its engine down as after any run: its workers leave, then Ray is shut down."""
    try:
        from flwr.simulation import run_simulation
    except ImportError:
        raise InputError('Flower is not installed: pip install -e ".[flower]"') from None
    from fl.flower.app import ServerRun, check_supported, client_app

    check_supported(config)
    check_resources(cpus_per_client, config.data.clients)
    server = ServerRun(config, out, resume, accept_code_change=accept_code_change)
    hold_engine_errors()
    resources = {"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}}
    quiet_known_notices()
    engine = Engine(
        lambda: run_simulation(server.app(), client_app, num_supernodes=config.data.clients, backend_config=resources)
    )
    try:
        engine.run()
    except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, SIGTERM (theory.cli.signals_as_interrupts)
        if isinstance(stop, SystemExit) and stop.code != signal.SIGTERM:
            raise
        quiet_engine()
        server.stop_and_wait()
        engine.join()  # Flower winds its engine down (Ctrl-C again to leave at once)
        if isinstance(server.error, InputError):  # "interrupted after round t; continue with --resume ..."
            raise server.error from None
        raise
    finally:
        server.stop.set()  # a server still waiting for clients (the engine failed) gives up
        shutdown_ray()
        ENGINE_ERRORS.flush()  # a run that ended otherwise than by a stop: its engine's errors, held, now
    summary = out / "summary.json"
    if not summary.exists():
        raise InputError(f"{out}: the Flower run ended without a summary (see the log above)")
    return read_object(summary, "summary.json of the Flower run")


class Engine:
    """A call (Flower's ``run_simulation``) in a daemon thread: :meth:`run` starts it and waits, in steps a signal
    can interrupt (in the thread that receives it, as the start itself), and raises what the call raised;
    :meth:`join` waits without raising. Ray's notice that ``ray.init`` outside the main thread sets no SIGTERM
    handler is silenced: that is the point."""

    def __init__(self, call) -> None:
        self.raised: list[BaseException] = []
        self.ended = threading.Event()  # the call returned or raised
        self.thread = threading.Thread(target=self._run, args=(call,), name="flower-engine", daemon=True)
        ray_worker = logging.getLogger("ray._private.worker")
        if not any(isinstance(f, RayThreadNotice) for f in ray_worker.filters):
            ray_worker.addFilter(RayThreadNotice())

    def _run(self, call) -> None:
        try:
            call()
        except BaseException as error:  # handed to the waiting thread
            self.raised.append(error)
        finally:
            self.ended.set()

    def join(self) -> None:
        """Wait until the call has ended (at once if a stop came before the thread started).

        On :attr:`ended`, never on ``Thread.join`` or ``Thread.is_alive``: a KeyboardInterrupt raised inside them
        (Ctrl-C while the thread runs) makes CPython 3.11 mark the live thread stopped (bpo-45274's fix), the next
        wait returns at once, and Ray was shut down under the engine. An interrupted Event.wait leaves the
        Event as it was. The wait is in slices of 0.1 s because the main thread runs its signal handlers only between
        them: a signal the kernel gave another thread (or ``_thread.interrupt_main``) does not wake a blocked wait."""
        while not self.ended.wait(0.1):
            if self.thread.ident is None:  # never started: nothing to wait for
                return

    def run(self) -> None:
        self.thread.start()
        self.join()
        if self.raised:
            raise self.raised[0]


class RayThreadNotice(logging.Filter):
    """Drops Ray's notice that ``ray.init`` outside the main thread sets no SIGTERM handler (:class:`Engine`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


# The two notices every simulation printed, dropped by exactly their text: Flower's deprecation of run_simulation
# (its replacement, `flwr run`, drives a SuperLink from the command line; the library call stays what a Python
# program can use) and Ray's tip that it may stop overriding CUDA_VISIBLE_DEVICES for actors without GPUs.
RUN_SIMULATION_DEPRECATED = "The `run_simulation` function is deprecated"
RAY_ACCELERATOR_TIP = "Tip: In future versions of Ray, Ray will no longer override accelerator"


class HeldEngineErrors(logging.Filter):
    """Flower's engine threads report an error (the error, then its traceback) the moment they see it. A stop
    (Ctrl-C, or SIGTERM to the run's session, which Ray's actors and raylet share) can break them before this process
    has handled its own signal: a client actor's death (``ActorDiedError``), a pipe to Ray that broke
    (``OSError: Broken pipe``). Such a report, the stop's consequence and not an error of the run, then came before
    the run's own last line. So every error Flower logs is held for :attr:`HOLD` seconds and logged after them, in
    order, unless the run was stopped by then (:func:`quiet_engine`); :meth:`flush` logs what is still held when the
    run ends otherwise. A real error is reported late, never lost; a stop's is not reported."""

    HOLD = 3.0

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False
        self.held: list[logging.LogRecord] = []
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args and any(str(arg).startswith(RUN_SIMULATION_DEPRECATED) for arg in record.args):
            return False  # Flower's notice on every run: `flwr run` is a CLI to a SuperLink, not a library call
        if getattr(record, "held", False):  # released after its hold
            return not self.stopped
        if self.stopped:
            return False
        if record.levelno < logging.ERROR:
            return True
        record.held = True
        with self.lock:
            self.held.append(record)
        timer = threading.Timer(self.HOLD, self.release, (record,))
        timer.daemon = True  # a process that ends meanwhile drops it (simulate flushes before it ends)
        timer.start()
        return False

    def release(self, until: logging.LogRecord | None = None) -> None:
        """Log the held records up to ``until`` (all: None), in the order they came."""
        with self.lock:
            if until is None:
                cut = len(self.held)
            elif until in self.held:
                cut = self.held.index(until) + 1
            else:  # released already (a flush)
                return
            due, self.held = self.held[:cut], self.held[cut:]
        for record in due:
            logging.getLogger(record.name).handle(record)

    def flush(self) -> None:
        self.release()


ENGINE_ERRORS = HeldEngineErrors()


def hold_engine_errors() -> None:
    """:class:`HeldEngineErrors` on Flower's logger (once), not yet stopped."""
    logger = logging.getLogger("flwr")
    if ENGINE_ERRORS not in logger.filters:
        logger.addFilter(ENGINE_ERRORS)
    ENGINE_ERRORS.stopped = False


def quiet_known_notices() -> None:
    """Ray's accelerator tip ignored (a FutureWarning, exactly its text); Flower's deprecation notice of
    ``run_simulation`` is dropped by :class:`HeldEngineErrors` on Flower's logger."""
    warnings.filterwarnings("ignore", message=re.escape(RAY_ACCELERATOR_TIP), category=FutureWarning)


def quiet_engine() -> None:
    """After the user's stop, Flower's engine threads report what the stop does to them (a client actor that dies
    as Ray shuts down: ``ActorDiedError`` with its traceback, depending on what was in flight): the consequence of
    the stop, not an error of the run, so Flower's log is silenced from here on (reports held before included); the
    run's own one-line message still ends the output."""
    ENGINE_ERRORS.stopped = True
    logging.getLogger("flwr").setLevel(logging.CRITICAL + 1)


def shutdown_ray() -> None:
    """Ray's local cluster down (Flower's backend does it when its engine ends normally)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@guarded("fl.flower")
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m fl.flower", description="Run one config in Flower's simulation engine.")
    parser.add_argument(
        "--config", type=Path, help="TOML config (see configs/); defaults apply to anything it leaves out"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value"
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="run directory (default results/runs/<config name>_flower)")
    parser.add_argument(
        "--resume", type=Path, metavar="RUN_DIR",
        help="continue the interrupted run in RUN_DIR (fl.run's or fl.flower's), with its own config",
    )  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run directory's results")
    parser.add_argument(
        "--cpus-per-client", type=float, default=1.0,
        help="CPUs Ray reserves per client (from 0.0001 to the machine's CPUs; 1 by default)",
    )  # fmt: skip
    parser.add_argument(
        "--accept-code-change", action="store_true",
        help="with --resume: continue a run that other code started (the change is recorded in provenance.json)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from fl.flower.app import check_supported

    resume_in_place(args.resume, args.out, args.overwrite, args.accept_code_change)
    if args.resume:
        if args.config or args.set:
            raise InputError("--resume takes the run's own config; drop --config/--set")
        out = args.resume
        config = read_run_config(out)  # read again under the lock; here only to check it before anything runs
    else:
        config = load_config(args.config, args.set)
        out = args.out or Path("results/runs") / f"{args.config.stem if args.config else 'default'}_flower"
    check_supported(config)
    check_resources(args.cpus_per_client, config.data.clients)
    if not args.resume:
        new_run_folder(out, args.overwrite, f"use --resume {out}, --overwrite, or another --out")
    # one writer per run folder, fl.run or fl.flower: a second start or resume stops before writing anything
    with locked(out / RUN_LOCK, busy=f"run directory {out}"):
        if args.resume:
            config = read_run_config(out)
        else:
            write_text_atomically(out / "config.json", json.dumps(config.to_dict(), indent=2))
        summary = simulate(config, out, bool(args.resume), args.cpus_per_client, args.accept_code_change)
    print(f"{out}: {summary['rounds']} rounds, final test accuracy {summary['final_test_accuracy']}")
    return 0


def exit_now(code: int) -> None:
    """Leave without waiting for threads that Flower's engine or Ray left behind (they can hold the interpreter's
    exit for a minute after Ctrl-C); the run folder is whole by then, Ray is down."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


SUPERVISED = "SHUFFLEFL_FLOWER_SUPERVISED"  # set in the run's own process, which a supervisor started


def supervise(argv: Sequence[str]) -> int:
    """Run ``python -m fl.flower ARGV`` in a session of its own and pass it Ctrl-C and SIGTERM as one SIGINT to the
    run alone. A SIGTERM to the whole process group (what ``timeout`` and SLURM send) would reach Ray's workers too,
    and they would die before the run could save its last whole round (Ray's native dump, exit 134); and Ray's driver
    answers a SIGTERM of its own with a native stack dump. Sent a SIGINT alone, the run stops at its next exchange
    with the clients, saves the checkpoint and shuts Ray down. Exit: 143 after a SIGTERM (128 + 15), else the run's
    own code."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-m", "fl.flower", *argv], env=os.environ | {SUPERVISED: "1"},
                             start_new_session=True)  # fmt: skip
    received: list[int] = []

    def forward(signum, _frame) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):  # as Ctrl-C: Ray's own SIGTERM handler prints a native dump
            child.send_signal(signal.SIGINT)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover - wait() retries on EINTR since Python 3.5
                continue
    finally:  # the caller's handlers back (a process that goes on, a test among others, keeps its Ctrl-C)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 + signal.SIGTERM if signal.SIGTERM in received else code


if __name__ == "__main__":
    exit_now(main() if os.environ.get(SUPERVISED) else supervise(sys.argv[1:]))
