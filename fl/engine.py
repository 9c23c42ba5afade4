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

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from fl import batched
from fl.algorithms import Algorithm, Context, State
from fl.flat import FlatModel
from fl.methods.base import ClientRound, LocalTask, Method, ServerRound, new_state


@dataclass
class ClientSet:
    """Every client's training, validation and original (unshuffled) samples as index tensors into one pool of
    preprocessed float features ``x`` and labels ``y``; ``received`` is the shuffled-in or synthetic part of each
    training set (empty without shuffling)."""

    x: torch.Tensor
    y: torch.Tensor
    train: list[torch.Tensor]
    val: list[torch.Tensor]
    original: list[torch.Tensor]
    received: list[torch.Tensor]
    test_x: torch.Tensor
    test_y: torch.Tensor
    n_classes: int

    @property
    def n_clients(self) -> int:
        return len(self.train)

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(t) for t in self.train])


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


@dataclass(frozen=True)
class LocalConfig:
    """epochs: local epochs E; batch_size: B; K = E·⌈n_i/B⌉ local steps, or K = τ = ``steps`` when steps > 0
    (FedCOG counts iterations: τ = 400; the batches then run through fresh permutations until τ are taken).
    participation: C, the fraction of the N clients sampled each round (⌈C·N⌉ of them, without replacement).
    weighting: "size" (n_i/Σn_j) or "uniform". momentum: heavy-ball momentum β of the client's SGD
    (v <- βv + g, w <- w - ηv, v = 0 at the start of every round; 0: plain SGD). optimizer: "sgd", or "adam"
    (``torch.optim.Adam`` at step size η on the corrected gradient, its moments fresh every round: DynaFed's
    clients). weight_decay: λ of the coupled L2 term added to every gradient (g <- g + λw, after the algorithm's
    correction; torch.optim's ``weight_decay``). backend: "sequential" (one client after another), "batched" (all
    participants at once through ``torch.func``, :mod:`fl.batched`), or "auto" (batched on CUDA); chunk: clients
    per batched call (0: all). client_state: where the (N, P) per-client states live, "device" or "host"
    (:func:`init_state`)."""

    epochs: int = 1
    batch_size: int = 64
    participation: float = 1.0
    weighting: str = "size"
    steps: int = 0
    momentum: float = 0.0
    optimizer: str = "sgd"
    weight_decay: float = 0.0
    backend: str = "sequential"
    chunk: int = 0
    client_state: str = "device"


def client_seed(seed: int, t: int, i: int, *stream: int) -> int:
    """A 32-bit seed for client i in round t (``stream`` separates further independent draws)."""
    return int(np.random.SeedSequence([seed, t, i, *stream]).generate_state(1)[0])


def server_seed(seed: int, t: int) -> int:
    """The seed of the server's own draws in round t (a method's server hook), apart from every client's."""
    return client_seed(seed, t, 0, 2)


def aggregation_weights(data: ClientSet, selected, weighting: str, like: torch.Tensor) -> torch.Tensor:
    """The participants' weights in the average: n_i/Σn_j ("size") or 1/|S| ("uniform"), as ``like``'s dtype."""
    sizes = torch.tensor(data.sizes[selected], dtype=like.dtype, device=like.device)
    return sizes / sizes.sum() if weighting == "size" else torch.full_like(sizes, 1 / len(selected))


def select_clients(seed: int, t: int, n_clients: int, participation: float) -> np.ndarray:
    m = max(1, int(np.ceil(participation * n_clients - 1e-9)))
    if m >= n_clients:
        return np.arange(n_clients)
    return np.sort(np.random.default_rng([seed, t]).choice(n_clients, m, replace=False))


def batches(
    index: torch.Tensor, batch_size: int, generator: torch.Generator, epochs: int, steps: int = 0
) -> Iterator[torch.Tensor]:
    """Mini-batches of ``index``: each pass a fresh permutation cut into batches of B (the last one smaller);
    ``epochs`` passes, or exactly ``steps`` batches when steps > 0."""
    if not len(index):
        return
    taken = 0
    for _ in itertools.count() if steps else range(epochs):
        order = index[torch.randperm(len(index), generator=generator).to(index.device)]
        for start in range(0, len(order), batch_size):
            yield order[start : start + batch_size]
            taken += 1
            if taken == steps:
                return


def local_train(
    flat: FlatModel,
    x: torch.Tensor,
    y: torch.Tensor,
    index: torch.Tensor,
    epochs: int,
    batch_size: int,
    lr: float,
    correction: Callable[[torch.Tensor], torch.Tensor | None],
    generator: torch.Generator,
    steps: int = 0,
    momentum: float = 0.0,
    task: LocalTask | None = None,
    optimizer: str = "sgd",
    weight_decay: float = 0.0,
) -> int:
    """Local SGD (or Adam) on x[index] (E epochs, or τ = ``steps`` batches) with ``correction(w)`` added to every
    gradient (and ``weight_decay``·w) and the objective ``task.loss`` (cross-entropy without a task); returns the
    number of steps K."""
    model = flat.model
    model.train()
    velocity = torch.zeros_like(flat.params) if momentum else None
    adam = None
    if optimizer == "adam":
        flat.params.grad = flat.grads  # the flat vector is the one parameter Adam updates
        adam = torch.optim.Adam([flat.params], lr=lr)
    k = 0
    for batch in batches(index, batch_size, generator, epochs, steps):
        flat.grads.zero_()
        xb, yb = x[batch], y[batch]
        loss = F.cross_entropy(model(xb), yb) if task is None else task.loss(model, xb, yb)
        loss.backward()
        extra = correction(flat.params)
        if extra is not None:
            flat.grads.add_(extra)
        if weight_decay:
            flat.grads.add_(flat.params, alpha=weight_decay)
        if adam is not None:
            adam.step()
        elif velocity is None:
            flat.params.sub_(lr * flat.grads)
        else:
            flat.params.sub_(lr * velocity.mul_(momentum).add_(flat.grads))
        k += 1
    return k


@torch.no_grad()
def evaluate(flat: FlatModel, x: torch.Tensor, y: torch.Tensor, batch: int = 2000) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of the currently loaded parameters."""
    flat.model.eval()
    loss, correct = 0.0, 0
    for start in range(0, len(y), batch):
        logits = flat.model(x[start : start + batch])
        loss += F.cross_entropy(logits, y[start : start + batch], reduction="sum").item()
        correct += (logits.argmax(1) == y[start : start + batch]).sum().item()
    return loss / len(y), correct / len(y)


def init_state(
    flat: FlatModel, algorithm: Algorithm, n_clients: int, lr: float, client_state: str = "device"
) -> EngineState:
    """Round 1: the model's parameters as x, zero server and client states; the (N, P) client states on the
    model's device, or with ``client_state = "host"`` in host memory (pinned when CUDA is there), only the round's
    participants' rows travel to the device."""
    x = flat.params.detach().clone()
    zeros = torch.zeros_like(x)
    clients = {k: torch.zeros(n_clients, x.numel(), dtype=x.dtype, device=x.device) for k in algorithm.client_keys}
    return EngineState(
        round=1,
        x=x,
        server={k: zeros.clone() for k in algorithm.server_keys},
        clients=place_clients(clients, client_state),
        lr=lr,
    )


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
) -> tuple[EngineState, dict]:
    """One round t = state.round; returns the new state (round t+1) and the round's record (participants, and the
    seconds spent in local training and in the method's hooks). The (N, P) client states are updated in place."""
    new, record, updates = compute_round(state, flat, algorithm, data, local, seed, method)
    apply_round(new, updates)
    return new, record


def apply_round(state: EngineState, updates: tuple[np.ndarray, State]) -> None:
    """Write the participants' new client states into the (N, P) arrays (in place: they can be large)."""
    selected, stack = updates
    for k, v in stack.items():
        target = state.clients[k]
        target[torch.as_tensor(selected, device=target.device)] = v.to(target.device)


def train_participants(
    flat: FlatModel, algorithm: Algorithm, data: ClientSet, local: LocalConfig, state: EngineState, seed: int,
    participants: list[int], contexts: list[Context], tasks: list,
) -> tuple[list[tuple[torch.Tensor, int]], dict]:  # fmt: skip
    """Local training of the participants from the server model: [(y_i, K_i)] and the backend used
    (``{"backend": ..., "backend_note": why not batched}``). Batched (:mod:`fl.batched`) when ``local.backend``
    asks for it ("auto": on CUDA) and nothing rules it out, else one client after another."""
    t = state.round
    wanted = local.backend == "batched" or (local.backend == "auto" and flat.params.is_cuda)
    note = batched.unbatchable(flat.model, tasks, local.backend == "batched") if wanted else None
    if wanted and note is None:
        with torch.random.fork_rng(devices=[]):  # independent dropout draws (explicit "batched" only)
            torch.manual_seed(client_seed(seed, t, participants[0]) + 1)
            generators = [torch.Generator().manual_seed(client_seed(seed, t, i)) for i in participants]
            ys, steps = batched.train_clients(
                flat, data.x, data.y, [data.train[i] for i in participants], generators, algorithm, contexts,
                state.lr, local, local.chunk, "different",
            )  # fmt: skip
        return list(zip(ys.unbind(), steps)), {"backend": "batched"}
    trained = [
        train_client(flat, algorithm, data, local, state.x, state.lr, seed, t, i, ctx, task)
        for i, ctx, task in zip(participants, contexts, tasks)
    ]
    return trained, {"backend": "sequential"} | ({"backend_note": note} if note and local.backend == "batched" else {})


def train_client(
    flat: FlatModel, algorithm: Algorithm, data: ClientSet, local: LocalConfig, x: torch.Tensor, lr: float,
    seed: int, t: int, i: int, ctx: Context, task: LocalTask | None = None,
) -> tuple[torch.Tensor, int]:  # fmt: skip
    """Client i's local training in round t from the server model x: its local model y_i and step count K_i (the
    batch order and dropout draws seeded from (seed, t, i)). The sequential backend and the Flower client both
    call this."""
    flat.load(x)
    generator = torch.Generator().manual_seed(client_seed(seed, t, i))
    with torch.random.fork_rng(devices=[]):  # dropout draws: seeded per (round, client), global state restored
        torch.manual_seed(client_seed(seed, t, i) + 1)
        steps = local_train(
            flat, data.x, data.y, data.train[i], local.epochs, local.batch_size, lr,
            lambda w: algorithm.correction(w, ctx), generator, local.steps, local.momentum, task, local.optimizer,
            local.weight_decay,
        )  # fmt: skip
    return flat.params.detach().clone(), steps


def compute_round(
    state: EngineState,
    flat: FlatModel,
    algorithm: Algorithm,
    data: ClientSet,
    local: LocalConfig,
    seed: int,
    method: Method | None = None,
) -> tuple[EngineState, dict, tuple[np.ndarray, State]]:
    """Round t = state.round without touching ``state`` (so an interrupted round leaves it whole): the new state,
    the record, and the client-state updates that :func:`apply_round` writes into the shared (N, P) arrays."""
    method = method or Method()
    t = state.round
    selected = select_clients(seed, t, data.n_clients, local.participation)
    weights = aggregation_weights(data, selected, local.weighting, state.x)
    ys, old, new = [], {k: [] for k in algorithm.client_keys}, {k: [] for k in algorithm.client_keys}
    clock, log = {"seconds_local": 0.0, "seconds_method": 0.0}, {}
    method_state = {part: dict(entries) for part, entries in state.method.items()}  # hooks replace entries
    tick = time.perf_counter()
    round_seed = client_seed(seed, t, 0, 3)
    method.before_round(ServerRound(t, state.x, flat, data, method_state, round_seed, log, tuple(selected.tolist())))
    clock["seconds_method"] += time.perf_counter() - tick
    participants = selected.tolist()
    rows = {k: v[torch.as_tensor(participants, device=v.device)].to(state.x.device) for k, v in state.clients.items()}
    contexts = [Context(state.x, state.server, {k: v[j] for k, v in rows.items()}, flat.head_mask)
                for j in range(len(participants))]  # fmt: skip
    tick = time.perf_counter()
    hooks = [ClientRound(t, i, state.x, flat, data, local, method_state, client_seed(seed, t, i, 1), log)
             for i in participants]  # fmt: skip
    tasks = [method.before_client(h) for h in hooks]
    clock["seconds_method"] += time.perf_counter() - tick
    tick = time.perf_counter()
    trained, backend = train_participants(flat, algorithm, data, local, state, seed, participants, contexts, tasks)
    clock["seconds_local"] += time.perf_counter() - tick
    for hook, task, ctx, (y_i, steps) in zip(hooks, tasks, contexts, trained):
        tick = time.perf_counter()
        hook.task = task
        method.after_client(hook, y_i)
        clock["seconds_method"] += time.perf_counter() - tick
        ys.append(y_i)
        for k, v in algorithm.client_update(y_i, ctx, steps, state.lr).items():
            old[k].append(ctx.client[k])
            new[k].append(v)
    stack = {k: torch.stack(v) for k, v in new.items()}
    x, server = algorithm.server_update(
        state.x, state.server, torch.stack(ys), weights, {k: torch.stack(v) for k, v in old.items()}, stack,
        data.n_clients,
    )  # fmt: skip
    tick = time.perf_counter()
    x = method.after_aggregate(ServerRound(t, x, flat, data, method_state, server_seed(seed, t), log))
    clock["seconds_method"] += time.perf_counter() - tick
    record = {"round": t, "clients": participants, **clock, **backend} | ({"method": log} if log else {})
    new_state = EngineState(t + 1, x, server, state.clients, state.lr, state.extra, method_state)
    return new_state, record, (selected, stack)
