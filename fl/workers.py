"""Clients in parallel on the CPU: a round's participants train in N long-lived worker processes.

A worker is a spawned process with one torch thread. It is started once and set up once per run
(:meth:`Workers.setup`): it builds its own copy of the model (:class:`ModelSpec`) and receives the algorithm, the
method and the client set, whose tensors reach it through shared memory (torch's multiprocessing sharing), not
pickled every round. Each round the parent sends every worker the round's header once (server model, step size, the
algorithm's server state, the method's server state), then clients one at a time as workers free up, largest first,
so that clients of unequal size balance. For each client the worker runs :func:`fl.engine.client_work` (the method's
hook before local training, the training, the hook after) and sends back y_i, K_i, the client's method entries and
its log; the parent does the rest of the round as before.

Every draw in a client's round depends on (seed, round, client) only, and each process computes with one thread, so
which worker trains which client changes nothing: the run equals the in-process loop with one thread bit for bit.
Messages after set-up carry numpy arrays (plain copies), so no shared-memory handle outlives its round.

A worker ignores SIGINT (Ctrl-C reaches the whole process group: the parent alone decides to stop) and exits when
the parent goes away. A worker that dies stops the round with :class:`WorkerLost`, one line; ``fl.run`` then saves
the state before the round, which resumes like any interrupted run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

from fl.algorithms import Algorithm, Context
from fl.clients import ClientSet, LocalConfig, carried_rows
from fl.engine import EngineState, batch_sums, client_seed, client_work, combine_sums
from fl.flat import FlatModel
from fl.matmul_conv import use_matmul
from fl.methods.base import ClientRound, Method
from fl.models import build_model
from theory.errors import USER_CODE, InputError, user_code_failure


class WorkerLost(InputError):
    """A worker process died (killed, out of memory): the round is lost, the run's state before it is whole."""


@dataclass(frozen=True)
class ModelSpec:
    """How a worker builds its copy of the run's model (:func:`fl.models.build_model`); its initial parameters do
    not matter: every client starts from the server model."""

    name: str
    shape: tuple[int, ...]
    n_classes: int
    dtype: str = "float32"
    width: int = 0  # the model's channel count (ModelConfig.width); 0: its default
    conv: str = "torch"  # how its convolutions are computed (ModelConfig.conv; "matmul": fl.matmul_conv)

    def __call__(self) -> torch.nn.Module:
        kwargs = {"width": self.width} if self.width else {}
        model = build_model(self.name, self.shape, self.n_classes, **kwargs).to(getattr(torch, self.dtype))
        return use_matmul(model) if self.conv == "matmul" else model


@dataclass
class RunSpec:
    """Everything a worker keeps for a run: what builds the model, the algorithm, the method, the client set (its
    tensors in shared memory), the local-training settings and the run seed."""

    model: Any  # a picklable callable returning the nn.Module (ModelSpec)
    algorithm: Algorithm
    method: Method
    data: ClientSet
    local: LocalConfig
    seed: int


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def resolve_workers(requested: int, participants: int, device: str) -> int:
    """How many worker processes a run uses: ``train.workers`` (0: auto = the machine's cores, or
    ``$SHUFFLEFL_WORKERS`` where set, capped by the round's participants); 1, or any device but the CPU: none."""
    if device != "cpu":
        return 1
    if requested == 0:
        requested = int(os.environ.get("SHUFFLEFL_WORKERS", 0) or available_cores())
    return max(1, min(requested, participants))


def to_wire(value):
    """Tensors as numpy copies (plain pickling, nothing shared), through dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return WireTensor(value.detach().cpu().numpy().copy())
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_wire(v) for v in value)
    return value


def from_wire(value):
    if isinstance(value, WireTensor):
        return torch.from_numpy(value.array)
    if isinstance(value, dict):
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(from_wire(v) for v in value)
    return value


@dataclass
class WireTensor:
    """A tensor's numbers on their way between processes (numpy keeps the dtype)."""

    array: np.ndarray


class Workers:
    """N worker processes (spawned, one torch thread each) that train clients with :func:`fl.engine.client_work`;
    :func:`get_workers` keeps one set per size for the life of the process."""

    def __init__(self, size: int) -> None:
        context = mp.get_context("spawn")
        self.size = size
        self.connections: list[Connection] = []
        self.processes = []
        for k in range(size):
            parent_end, child_end = context.Pipe()
            process = context.Process(target=serve, args=(child_end, os.getpid()), name=f"shufflefl-worker-{k}")
            process.daemon = True
            process.start()
            child_end.close()
            self.connections.append(parent_end)
            self.processes.append(process)
        self.run: RunSpec | None = None
        self.broken = False

    def alive(self) -> bool:
        return not self.broken and all(p.is_alive() for p in self.processes)

    def setup(self, run: RunSpec) -> None:
        """Hand every worker the run (once per run; the client set's tensors move to shared memory)."""
        if self.run is run:
            return
        for tensor in (run.data.x, run.data.y, run.data.test_x, run.data.test_y, *run.data.train):
            tensor.share_memory_()
        for k in range(self.size):  # first where to import from: a plug-in's module (fl.plugins) must unpickle
            self.send(k, ("path", (list(sys.path), dict(USER_CODE))), "setting up")  # and whose files are whose
            self.send(k, ("setup", run), "setting up")
        for k in range(self.size):
            self.receive(k, "setting up")
        self.run = run

    def lost(self, k: int, doing: str) -> WorkerLost:
        """Worker k is gone: stop the others and say so in one line."""
        process = self.processes[k]
        process.join(1)
        self.close()
        return WorkerLost(f"client worker {k} (pid {process.pid}) died while {doing} (exit code {process.exitcode})")

    def send(self, k: int, message, doing: str) -> None:
        try:
            self.connections[k].send(message)
        except OSError:  # a broken pipe: the worker is gone
            raise self.lost(k, doing) from None

    def receive(self, k: int, doing: str):
        """Worker k's next message; a dead worker or a worker's error stops the run in one line."""
        conn, process = self.connections[k], self.processes[k]
        ready = wait([conn, process.sentinel])
        try:
            if conn not in ready:
                raise EOFError
            kind, *payload = conn.recv()
        except (EOFError, OSError):
            raise self.lost(k, doing) from None
        if kind == "error":
            self.close()
            message, trace, plugin = payload
            if plugin is not None:  # a plug-in's own failure: one line naming it, as in the main process
                raise InputError(plugin)
            raise (InputError if message.startswith("InputError:") else RuntimeError)(
                f"client worker {k} failed while {doing}: {message.split(': ', 1)[-1]}\n{trace}"
            )
        return payload

    def train(
        self, t: int, state: EngineState, method_state: dict, participants: list[int], rows: list[dict]
    ) -> tuple[list[tuple[torch.Tensor, int]], list[dict], float]:
        """Round t's participants, each with its algorithm state ``rows[j]`` and its method entries: [(y_i, K_i)]
        and the clients' logs in participant order, and the seconds spent in the method's hooks (summed). The
        clients' new method entries are written into ``method_state["clients"]``, their kept optimiser rows into
        ``rows[j]``."""
        assert self.run is not None, "Workers.setup first"
        try:
            header = (t, state.x, float(state.lr), state.server, method_state.get("server", {}))
            for k in range(self.size):
                self.send(k, ("round", to_wire(header)), f"starting round {t}")
            clients = method_state.setdefault("clients", {})
            sizes = self.run.data.sizes
            queue = sorted(range(len(participants)), key=lambda j: (-sizes[participants[j]], j))
            results: dict[int, tuple] = {}
            busy: dict[int, int] = {}

            def send(k: int) -> None:
                j = queue.pop(0)
                i = participants[j]
                self.send(k, ("client", to_wire((j, i, rows[j], clients.get(i)))), f"training round {t}")
                busy[k] = j

            for k in range(min(self.size, len(queue))):
                send(k)
            while busy:
                ready = wait([self.connections[k] for k in busy] + [self.processes[k].sentinel for k in busy])
                for k in [k for k in busy if self.connections[k] in ready or self.processes[k].sentinel in ready]:
                    (j, y, steps, entries, log, seconds, kept) = from_wire(self.receive(k, f"training round {t}")[0])
                    rows[j].update({key: v.to(state.x.device) for key, v in kept.items()})  # kept optimiser state
                    results[j] = (y.to(state.x.device), steps, entries, log, seconds)
                    del busy[k]
                    if queue:
                        send(k)
        except BaseException:
            self.close()  # a round cut short (Ctrl-C, a lost worker) leaves messages in flight: start afresh
            raise
        trained, logs, seconds_method = [], [], 0.0
        for j, i in enumerate(participants):
            y, steps, entries, log, seconds = results[j]
            if entries is not None:
                clients[i] = entries
            trained.append((y, steps))
            logs.append(log)
            seconds_method += seconds
        return trained, logs, seconds_method

    def evaluate(self, x: torch.Tensor, batch: int = 2000) -> tuple[float, float]:
        """:func:`fl.engine.evaluate` of the server model ``x`` on the test set, its batches spread over the workers
        and added up in batch order: the same numbers as in one process."""
        assert self.run is not None, "Workers.setup first"
        starts = list(range(0, len(self.run.data.test_y), batch))
        shares = [starts[k :: self.size] for k in range(self.size)]
        try:
            for k, share in enumerate(shares):
                self.send(k, ("evaluate", to_wire((x, share, batch))), "evaluating")
            sums = {}
            for k in range(self.size):
                sums.update(zip(shares[k], self.receive(k, "evaluating")[0]))
        except BaseException:
            self.close()
            raise
        return combine_sums([sums[start] for start in starts], len(self.run.data.test_y))

    def close(self) -> None:
        """Stop every worker (at once: a worker mid-round has nothing to keep)."""
        self.broken = True
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.close()
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(5)


_WORKERS: dict[int, Workers] = {}


def get_workers(size: int) -> Workers:
    """A live set of ``size`` workers, started on first use and kept for the process (a run sets it up once; the
    next run in the same process reuses the processes)."""
    workers = _WORKERS.get(size)
    if workers is None or not workers.alive():
        workers = _WORKERS[size] = Workers(size)
    return workers


@atexit.register
def close_all() -> None:
    for workers in _WORKERS.values():
        workers.close()
    _WORKERS.clear()


def serve(conn: Connection, parent: int) -> None:
    """A worker's loop: set-up, then rounds of clients, until the parent closes the pipe or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    torch.set_num_threads(1)
    run = flat = header = None
    while True:
        if not conn.poll(1.0):
            if os.getppid() != parent:
                return
            continue
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if kind == "path":
                paths, user_code = payload
                sys.path.extend(p for p in paths if p not in sys.path)
                USER_CODE.update(user_code)
            elif kind == "setup":
                run, flat = payload, FlatModel(payload.model())
                conn.send(("ok",))
            elif kind == "round":
                header = from_wire(payload)
            elif kind == "evaluate":
                x, starts, batch = from_wire(payload)
                flat.load(x)
                conn.send(("done", batch_sums(flat, run.data.test_x, run.data.test_y, starts, batch)))
            elif kind == "client":
                conn.send(("done", to_wire(train_one(run, flat, header, *from_wire(payload)))))
        except BaseException as error:  # a worker's failure is the parent's to report (a plug-in's: in one line)
            said = user_code_failure(error) if isinstance(error, Exception) else None
            conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=-3), said))


def train_one(run: RunSpec, flat: FlatModel, header: tuple, j: int, i: int, rows: dict, entries: dict | None):
    """Client i's round in this worker: (j, y_i, K_i, its method entries, its log, seconds in the method's hooks,
    its kept optimiser rows)."""
    t, x, lr, server, method_server = header
    method_state = {"server": method_server, "clients": {} if entries is None else {i: entries}}
    ctx = Context(x, server, rows, flat.head_mask)
    log: dict = {}
    hook = ClientRound(t, i, x, flat, run.data, run.local, method_state, client_seed(run.seed, t, i, 1), log)
    y, steps, seconds = client_work(flat, run.algorithm, run.data, run.local, run.method, hook, ctx, lr, run.seed)
    kept = {k: rows[k] for k in carried_rows(run.local)}
    return j, y, steps, method_state["clients"].get(i), log, seconds, kept
