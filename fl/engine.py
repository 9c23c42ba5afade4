"""The round loop: select clients, send the server model, train locally, aggregate, evaluate.

Knows nothing of any specific algorithm or method: an :class:`fl.algorithms.Algorithm` supplies the local-step
correction, the client state update and the server update (see :mod:`fl.algorithms.base` for the equations), a
:class:`fl.methods.Method` its hooks before and after each client's local training, in every local step and after
aggregation (see :mod:`fl.methods.base`). Randomness is a pure function of (seed, round, client): client
selection uses ``numpy.random.default_rng([seed, t])``, client i's batch order and dropout use a torch seed drawn
from ``SeedSequence([seed, t, i])``, the method's own draws ``SeedSequence([seed, t, i, 1])`` on client i and
``SeedSequence([seed, t, 0, 2])`` on the server after aggregation and ``SeedSequence([seed, t, 0, 3])`` before the
round, so a run
resumed from a checkpoint repeats the uninterrupted run bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

import fl.batched as batched
import fl.step as step
from fl.algorithms import Algorithm, Context, State
from fl.augment import crop_flip
from fl.clients import STEP_KEY, ClientSet, LocalConfig, batches, carried_rows, client_budget
from fl.flat import FlatModel
from fl.methods.base import ClientRound, LocalTask, Method, ServerRound, new_state, numbers_sent_up


@dataclass
class EngineState:
    """Everything a checkpoint holds: the next round to run, server model, the algorithm's server and client
    states, the method's state (see :mod:`fl.methods.base`)."""

    round: int
    x: torch.Tensor
    server: State
    clients: State  # each (N, P)
    lr: float
    extra: dict = field(default_factory=dict)
    method: dict = field(default_factory=new_state)


def client_seed(seed: int, t: int, i: int, *stream: int) -> int:
    """A 32-bit seed for client i in round t (``stream`` separates further independent draws)."""
    return int(np.random.SeedSequence([seed, t, i, *stream]).generate_state(1)[0])


@contextmanager
def global_draws(seed: int) -> Iterator[None]:
    """Torch's global generators seeded with ``seed`` inside the block (dropout draws), the CPU's state restored
    after it: ``fork_rng(devices=[])`` around ``torch.manual_seed``. While CUDA is not initialised only the CPU
    generator is seeded, which draws the same numbers; ``torch.manual_seed`` would also queue a seeding of every
    not-yet-started accelerator, which formats a stack trace each call (~0.3 ms, a tenth of a small client's step
    time)."""
    with torch.random.fork_rng(devices=[]):
        if torch.cuda.is_initialized():
            torch.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(seed)
        yield


def server_seed(seed: int, t: int) -> int:
    """The seed of the server's own draws in round t (a method's server hook), apart from every client's."""
    return client_seed(seed, t, 0, 2)


def aggregation_weights(data: ClientSet, selected, weighting: str, like: torch.Tensor) -> torch.Tensor:
    """The participants' weights in the average: n_i/Σn_j ("size") or 1/|S| ("uniform"), as ``like``'s dtype."""
    sizes = torch.tensor(data.sizes[selected], dtype=like.dtype, device=like.device)
    return sizes / sizes.sum() if weighting == "size" else torch.full_like(sizes, 1 / len(selected))


def n_participants(n_clients: int, participation: float) -> int:
    """⌈C·N⌉ clients a round (at least one)."""
    return max(1, int(np.ceil(participation * n_clients - 1e-9)))


def select_clients(seed: int, t: int, n_clients: int, participation: float) -> np.ndarray:
    m = n_participants(n_clients, participation)
    if m >= n_clients:
        return np.arange(n_clients)
    return np.sort(np.random.default_rng([seed, t]).choice(n_clients, m, replace=False))


def local_train(
    flat: FlatModel,
    samples: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    local: LocalConfig,
    lr: float,
    correction: Callable[[torch.Tensor], torch.Tensor | None],
    generator: torch.Generator,
    budget: tuple[int, int] | None = None,
    task: LocalTask | None = None,
    carry: dict[str, torch.Tensor] | None = None,
) -> int:
    """The sequential executor of :mod:`fl.step`: local training on x[index] of ``samples`` = (x, y, index), E
    epochs or τ batches (``budget`` = (epochs, steps) of :func:`fl.clients.batches`, else ``local``'s), each batch's
    gradient of ``task.loss`` (cross-entropy without a task) by autograd on the loaded model, then
    :func:`fl.step.step` (``correction(w)``, ``local``'s weight decay and optimiser, torch.optim's arithmetic);
    returns the number of steps K. ``local.augment = "crop-flip"`` transforms every batch
    (:func:`fl.augment.crop_flip`, black shifted in, its draws from ``generator``). ``carry``: the optimiser state
    the client keeps from round to round (:func:`fl.clients.carried_rows`): read at the start, replaced by the new
    state at the end."""
    x, y, index = samples
    model = flat.model
    model.train()
    rule = step_rule(local, lr, torch_order=True)
    state = step_init(flat.params, rule, carry)
    black = x.amin(dim=(0, 2, 3)) if local.augment != "none" else None  # what RandomCrop's zero padding shows
    k = 0
    for batch in batches(index, local.batch_size, generator, *(budget or (local.epochs, local.steps))):
        flat.grads.zero_()
        xb, yb = x[batch], y[batch]
        if black is not None:
            xb = crop_flip(xb, generator, black)
        loss = F.cross_entropy(model(xb), yb) if task is None else task.loss(model, xb, yb)
        loss.backward()
        state = step.step(state, flat.grads, k, rule, correction)  # torch order: flat.params stepped in place
        k += 1
    if carry:
        kept = step.final(state, rule, k)
        carry.update({key: v.clone() if key != STEP_KEY else torch.full_like(carry[key], v) for key, v in kept.items()})
    return k


def step_rule(local: LocalConfig, lr: float | torch.Tensor, torch_order: bool = False) -> step.Rule:
    """:class:`fl.step.Rule` of the local settings at step size ``lr`` (torch_order: the sequential arithmetic)."""
    return step.Rule(lr, local.momentum, local.weight_decay, local.optimizer, torch_order)


def step_init(w: torch.Tensor, rule: step.Rule, carry: dict[str, torch.Tensor] | None) -> step.Local:
    """:func:`fl.step.init` for one client: the kept rows of ``carry`` only where they hold a state (Adam: a step
    count above 0, as a fresh torch.optim.Adam starts)."""
    fresh = not carry or (rule.optimizer == "adam" and float(carry[STEP_KEY]) <= 0)
    return step.init(w, rule, None if fresh else carry)


@torch.no_grad()
def batch_sums(flat: FlatModel, x: torch.Tensor, y: torch.Tensor, starts, batch: int = 2000) -> list[tuple[float, int]]:
    """Summed cross-entropy and correct predictions of the loaded parameters on the batches x[start : start + batch]
    (``fl.workers`` evaluates batches in parallel with this; :func:`evaluate` adds them up in batch order)."""
    flat.model.eval()
    sums = []
    for start in starts:
        logits = flat.model(x[start : start + batch])
        loss = F.cross_entropy(logits, y[start : start + batch], reduction="sum").item()
        sums.append((loss, (logits.argmax(1) == y[start : start + batch]).sum().item()))
    return sums


@torch.no_grad()
def correct(flat: FlatModel, x: torch.Tensor, y: torch.Tensor, batch: int = 2000) -> torch.Tensor:
    """Whether the loaded parameters predict each sample's label (bool, one per sample), in batches of ``batch``."""
    flat.model.eval()
    return torch.cat([flat.model(x[s : s + batch]).argmax(1) == y[s : s + batch] for s in range(0, len(y), batch)])


@torch.no_grad()
def per_sample(
    flat: FlatModel, x: torch.Tensor, y: torch.Tensor, batch: int = 2000
) -> tuple[torch.Tensor, torch.Tensor]:
    """(whether each sample is predicted right, its cross-entropy) under the loaded parameters, in batches."""
    flat.model.eval()
    hits, losses = [], []
    for s in range(0, len(y), batch):
        logits = flat.model(x[s : s + batch])
        hits.append(logits.argmax(1) == y[s : s + batch])
        losses.append(torch.nn.functional.cross_entropy(logits, y[s : s + batch], reduction="none"))
    return torch.cat(hits), torch.cat(losses)


def combine_sums(sums: list[tuple[float, int]], n: int) -> tuple[float, float]:
    """Mean cross-entropy and accuracy from per-batch sums, added in batch order (the same floats everywhere)."""
    loss, correct = 0.0, 0
    for batch_loss, batch_correct in sums:
        loss += batch_loss
        correct += batch_correct
    return loss / n, correct / n


def evaluate(flat: FlatModel, x: torch.Tensor, y: torch.Tensor, batch: int = 2000) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of the currently loaded parameters."""
    return combine_sums(batch_sums(flat, x, y, range(0, len(y), batch), batch), len(y))


def init_state(
    flat: FlatModel, algorithm: Algorithm, n_clients: int, lr: float, client_state: str = "device",
    carried: tuple[str, ...] = (),
) -> EngineState:  # fmt: skip
    """Round 1: the model's parameters as x, zero server and client states; the (N, P) client states on the
    model's device, or with ``client_state = "host"`` in host memory (pinned when CUDA is there), only the round's
    participants' rows travel to the device. ``carried``: the clients' optimiser rows kept across rounds
    (:func:`fl.clients.carried_rows`), zero (a fresh optimiser) at the start."""
    x = flat.params.detach().clone()
    zeros = torch.zeros_like(x)
    clients = client_zeros(algorithm.client_keys + carried, n_clients, x)
    return EngineState(
        round=1,
        x=x,
        server={k: zeros.clone() for k in algorithm.server_keys},
        clients=place_clients(clients, client_state),
        lr=lr,
    )


def client_zeros(keys: tuple[str, ...], n_clients: int, x: torch.Tensor) -> State:
    """Zero client-state rows for ``n_clients`` like ``x``: P numbers each (the algorithm's states and the kept
    optimiser's moments), one for Adam's step count."""
    width = {STEP_KEY: 1}
    return {k: torch.zeros(n_clients, width.get(k, x.numel()), dtype=x.dtype, device=x.device) for k in keys}


def place_clients(clients: State, where: str) -> State:
    """The (N, P) client states where ``where`` ("device": unchanged; "host": in host memory, pinned on CUDA)."""
    if where != "host":
        return clients
    pin = torch.cuda.is_available()
    return {k: v.cpu().pin_memory() if pin else v.cpu() for k, v in clients.items()}


def run_round(
    state: EngineState,
    flat: FlatModel,
    algorithm: Algorithm,
    data: ClientSet,
    local: LocalConfig,
    seed: int,
    method: Method | None = None,
    pool: ClientPool | None = None,
) -> tuple[EngineState, dict]:
    """One round t = state.round; returns the new state (round t+1) and the round's record (participants, and the
    seconds spent in local training and in the method's hooks). The (N, P) client states are updated in place."""
    new, record, updates = compute_round(state, flat, algorithm, data, local, seed, method, pool)
    apply_round(new, updates)
    return new, record


def apply_round(state: EngineState, updates: tuple[np.ndarray, State]) -> None:
    """Write the participants' new client states into the (N, P) arrays (in place: they can be large)."""
    selected, stack = updates
    for k, v in stack.items():
        target = state.clients[k]
        target[torch.as_tensor(selected, device=target.device)] = v.to(target.device)


def wants_batched(flat: FlatModel, local: LocalConfig) -> bool:
    """Whether ``local.backend`` asks for the batched backend here ("auto": on CUDA)."""
    return local.backend == "batched" or (local.backend == "auto" and flat.params.is_cuda)


def train_participants(
    flat: FlatModel, algorithm: Algorithm, data: ClientSet, local: LocalConfig, state: EngineState, seed: int,
    participants: list[int], contexts: list[Context], tasks: list,
) -> tuple[list[tuple[torch.Tensor, int]], dict]:  # fmt: skip
    """Local training of the participants from the server model: [(y_i, K_i)] and the backend used
    (``{"backend": ..., "backend_note": why not batched}``). Batched (:mod:`fl.batched`) when ``local.backend``
    asks for it ("auto": on CUDA) and nothing rules it out, else one client after another. In a fleet
    (:mod:`fl.fleet`, :data:`fl.batched.FLEET` set) the same work is handed to the fleet, which computes it with the
    other runs' (``"fleet"`` in the record: the runs that shared a batched call, or True)."""
    t = state.round
    wanted = wants_batched(flat, local)
    note = batched.unbatchable(flat.model, tasks, local.backend == "batched", local.augment) if wanted else None
    fleet = batched.FLEET.get()  # a fleet (fl.fleet) trains these rows with other runs' in one computation
    if wanted and note is None:
        generators = [torch.Generator().manual_seed(client_seed(seed, t, i)) for i in participants]
        group = batched.Group(
            data.x,
            data.y,
            [data.train[i] for i in participants],
            generators,
            algorithm,
            contexts,
            state.lr,
            local,
            tasks,
            [client_budget(local, len(data.original[i])) for i in participants],
        )
        if fleet is not None:  # no dropout there (fl.fleet refuses it): no global draws to seed
            (ys, steps), runs = fleet.train(flat, group)
            return list(zip(ys.unbind(), steps)), {"backend": "batched", "fleet": runs}
        with global_draws(client_seed(seed, t, participants[0]) + 1):  # independent dropout draws ("batched")
            ys, steps = batched.train_clients(flat, group, local.chunk, "different")
        return list(zip(ys.unbind(), steps)), {"backend": "batched"}

    def one_after_another() -> list[tuple[torch.Tensor, int]]:
        return [
            train_client(flat, algorithm, data, local, state.lr, seed, t, i, ctx, task)
            for i, ctx, task in zip(participants, contexts, tasks)
        ]

    trained = one_after_another() if fleet is None else fleet.work(one_after_another)  # a fleet: beside the others
    said = {"backend_note": note} if note and local.backend == "batched" else {}
    return trained, {"backend": "sequential"} | said | ({"fleet": True} if fleet is not None else {})


def train_client(
    flat: FlatModel, algorithm: Algorithm, data: ClientSet, local: LocalConfig, lr: float, seed: int, t: int, i: int,
    ctx: Context, task: LocalTask | None = None,
) -> tuple[torch.Tensor, int]:  # fmt: skip
    """Client i's local training in round t from the server model ``ctx.x``: its local model y_i and step count K_i
    (the batch order and dropout draws seeded from (seed, t, i)). The sequential backend, the worker processes and
    the Flower client all call this."""
    flat.load(ctx.x)
    generator = torch.Generator().manual_seed(client_seed(seed, t, i))
    carry = {k: ctx.client[k] for k in carried_rows(local)}  # the kept optimiser state, back into ctx.client
    with global_draws(client_seed(seed, t, i) + 1):  # dropout draws: seeded per (round, client)
        samples = (data.x, data.y, data.train[i])
        budget = client_budget(local, len(data.original[i]))
        steps = local_train(flat, samples, local, lr, lambda w: algorithm.correction(w, ctx), generator, budget, task,
                            carry)  # fmt: skip
    ctx.client.update(carry)
    return flat.params.detach().clone(), steps


def client_work(
    flat: FlatModel, algorithm: Algorithm, data: ClientSet, local: LocalConfig, method: Method, hook: ClientRound,
    ctx: Context, lr: float, seed: int,
) -> tuple[torch.Tensor, int, float]:  # fmt: skip
    """Client i's whole round where it trains alone (a worker process, a Flower node): the method's hook before
    local training, the training from the server model ``hook.x``, the hook after; (y_i, K_i, seconds in the
    method's hooks)."""
    tick = time.perf_counter()
    task = method.before_client(hook)
    seconds = time.perf_counter() - tick
    y, steps = train_client(flat, algorithm, data, local, lr, seed, hook.t, hook.i, ctx, task)
    tick, hook.task = time.perf_counter(), task
    method.after_client(hook, y)
    return y, steps, seconds + time.perf_counter() - tick


def merge_log(log: dict, client_log: dict) -> None:
    """A client's round log into the round's, in participant order: lists extend, other values replace."""
    for key, value in client_log.items():
        log[key] = log.get(key, []) + value if isinstance(value, list) else value


class ClientPool(Protocol):
    """Trains a round's participants elsewhere, each with :func:`client_work` (:class:`fl.workers.Workers`)."""

    size: int

    def train(
        self, t: int, state: EngineState, method_state: dict, participants: list[int], rows: list[State]
    ) -> tuple[list[tuple[torch.Tensor, int]], list[dict], float]: ...


@dataclass
class Round:
    """Round t as :func:`configure_round` sets it up (every executor's, Flower's server's too): the selected clients
    S (sorted), their aggregation weights, the method's working state (its hooks replace entries), its log and the
    round's clock (seconds in local training and in the method's hooks, kept by :meth:`timed` alone)."""

    t: int
    selected: list[int]
    weights: torch.Tensor
    method_state: dict
    log: dict = field(default_factory=dict)
    clock: dict = field(default_factory=lambda: {"seconds_local": 0.0, "seconds_method": 0.0})

    def timed(self, key: str, fn: Callable, *args):
        """``fn(*args)``, its seconds added to the clock's ``key``."""
        tick = time.perf_counter()
        out = fn(*args)
        self.clock[key] += time.perf_counter() - tick
        return out


def configure_round(
    state: EngineState, flat: FlatModel, data: ClientSet, local: LocalConfig, seed: int, method: Method
) -> Round:
    """The round's first phase: select S_t (:func:`select_clients`), weigh it, and run the method's hook before the
    round (its draws seeded from (seed, t, 0, 3))."""
    t = state.round
    selected = select_clients(seed, t, data.n_clients, local.participation)
    weights = aggregation_weights(data, selected, local.weighting, state.x)
    method_state = {part: dict(entries) for part, entries in state.method.items()}  # hooks replace entries
    rnd = Round(t, selected.tolist(), weights, method_state)
    hook = ServerRound(t, state.x, flat, data, method_state, client_seed(seed, t, 0, 3), rnd.log, tuple(rnd.selected))
    rnd.timed("seconds_method", method.before_round, hook)
    return rnd


def client_contexts(state: EngineState, flat: FlatModel, participants: list[int]) -> list[Context]:
    """What each participant sees: the server model and state, its own rows of the (N, P) states (on x's device)."""
    rows = {k: v[torch.as_tensor(participants, device=v.device)].to(state.x.device) for k, v in state.clients.items()}
    return [Context(state.x, state.server, {k: v[j] for k, v in rows.items()}, flat.head_mask)
            for j in range(len(participants))]  # fmt: skip


def execute_round(
    rnd: Round, state: EngineState, flat: FlatModel, algorithm: Algorithm, data: ClientSet, local: LocalConfig,
    seed: int, method: Method, pool: ClientPool | None = None,
) -> tuple[list[Context], list[tuple[torch.Tensor, int]], dict]:  # fmt: skip
    """The round's second phase, the participants' work by one executor: worker processes (``pool``), else the
    method's client hooks around :func:`train_participants` (sequential, batched or in a fleet). Their contexts
    (kept optimiser rows written back), [(y_i, K_i)] and the executor's record entries."""
    t, participants = rnd.t, rnd.selected
    # what the clients see: the method's payload from the server, and their own entries (written through)
    payload = method.client_payload(rnd.method_state)
    client_view = {"server": payload, "clients": rnd.method_state.setdefault("clients", {})}
    contexts = client_contexts(state, flat, participants)
    if pool is not None and not wants_batched(flat, local):
        tick = time.perf_counter()
        trained, logs, seconds_method = pool.train(t, state, client_view, participants, [c.client for c in contexts])
        for client_log in logs:
            merge_log(rnd.log, client_log)
        rnd.clock["seconds_method"] += seconds_method  # summed over the workers' clients
        rnd.clock["seconds_local"] += time.perf_counter() - tick - seconds_method / pool.size
        return contexts, trained, {"backend": "workers", "workers": pool.size}
    hooks = [ClientRound(t, i, state.x, flat, data, local, client_view, client_seed(seed, t, i, 1), rnd.log)
             for i in participants]  # fmt: skip
    tasks = rnd.timed("seconds_method", lambda: [method.before_client(h) for h in hooks])
    trained, backend = rnd.timed("seconds_local", train_participants, flat, algorithm, data, local, state, seed,
                                 participants, contexts, tasks)  # fmt: skip
    rnd.timed("seconds_method", _after_clients, method, hooks, tasks, trained)
    return contexts, trained, backend


def _after_clients(method: Method, hooks: list[ClientRound], tasks: list, trained: list) -> None:
    """The method's hook after each client's local training, in participant order."""
    for hook, task, (y_i, _) in zip(hooks, tasks, trained):
        hook.task = task
        method.after_client(hook, y_i)


def aggregate_round(
    rnd: Round, state: EngineState, algorithm: Algorithm, n_clients: int, contexts: list[Context],
    trained: list[tuple[torch.Tensor, int]], local: LocalConfig,
) -> tuple[torch.Tensor, State, State]:  # fmt: skip
    """The round's third phase on the server: every participant's ``client_update``, then ``server_update`` on the
    local models and the client states' changes (new - old); (x, server state, the participants' new client rows)."""
    ys, old, new = [], {k: [] for k in algorithm.client_keys}, {k: [] for k in algorithm.client_keys}
    for ctx, (y_i, steps) in zip(contexts, trained):
        ys.append(y_i)
        for k, v in algorithm.client_update(y_i, ctx, steps, state.lr).items():
            old[k].append(ctx.client[k])
            new[k].append(v)
    stack = {k: torch.stack(v) for k, v in new.items()}
    deltas = {k: stack[k] - torch.stack(v) for k, v in old.items()}
    x, server = algorithm.server_update(state.x, state.server, torch.stack(ys), rnd.weights, deltas, n_clients)
    stack |= {k: torch.stack([ctx.client[k] for ctx in contexts]) for k in carried_rows(local)}  # the new state
    return x, server, stack


def close_round(
    rnd: Round, state: EngineState, x: torch.Tensor, server: State, flat: FlatModel, data: ClientSet, seed: int,
    method: Method, backend: dict,
) -> tuple[EngineState, dict]:  # fmt: skip
    """The round's end (every executor's, Flower's too): the numbers the method's entries sent up, its hook after
    aggregation (draws seeded from (seed, t, 0, 2)); the new state (round t+1) and the round's record."""
    t, log = rnd.t, rnd.log
    if up := numbers_sent_up(method, rnd.method_state.get("clients", {}), rnd.selected):  # what its server hooks read
        log["numbers_sent"] = log.get("numbers_sent", 0) + up
    hook = ServerRound(t, x, flat, data, rnd.method_state, server_seed(seed, t), log)
    x = rnd.timed("seconds_method", method.after_aggregate, hook)
    record = {"round": t, "clients": rnd.selected, **rnd.clock, **backend} | ({"method": log} if log else {})
    return EngineState(t + 1, x, server, state.clients, state.lr, state.extra, rnd.method_state), record


def compute_round(
    state: EngineState,
    flat: FlatModel,
    algorithm: Algorithm,
    data: ClientSet,
    local: LocalConfig,
    seed: int,
    method: Method | None = None,
    pool: ClientPool | None = None,
) -> tuple[EngineState, dict, tuple[np.ndarray, State]]:
    """Round t = state.round without touching ``state`` (so an interrupted round leaves it whole): configure
    (:func:`configure_round`), execute (:func:`execute_round`), aggregate (:func:`aggregate_round`,
    :func:`close_round`); the new state, the record, and the client-state updates that :func:`apply_round` writes
    into the shared (N, P) arrays. With a ``pool`` (worker processes on the CPU) the participants' hooks and
    training run there, bit for bit as here."""
    method = method or Method()
    rnd = configure_round(state, flat, data, local, seed, method)
    contexts, trained, backend = execute_round(rnd, state, flat, algorithm, data, local, seed, method, pool)
    x, server, stack = aggregate_round(rnd, state, algorithm, data.n_clients, contexts, trained, local)
    new_state, record = close_round(rnd, state, x, server, flat, data, seed, method, backend)
    return new_state, record, (np.array(rnd.selected, dtype=np.int64), stack)
