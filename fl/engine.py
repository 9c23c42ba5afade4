"""The round loop: select clients, send the server model, train locally, aggregate, evaluate.

Knows nothing of any specific algorithm: an :class:`fl.algorithms.Algorithm` supplies the local-step correction,
the client state update and the server update (see :mod:`fl.algorithms.base` for the equations). Randomness is a
pure function of (seed, round, client): client selection uses ``numpy.random.default_rng([seed, t])`` and client
i's batch order and dropout use a torch seed drawn from ``SeedSequence([seed, t, i])``, so a run resumed from a
checkpoint repeats the uninterrupted run bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from fl.algorithms import Algorithm, Context, State
from fl.flat import FlatModel


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
    """Everything a checkpoint holds: the next round to run, server model, server and client states."""

    round: int
    x: torch.Tensor
    server: State
    clients: State  # each (N, P)
    lr: float
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LocalConfig:
    """epochs: local epochs E; batch_size: B; K = E·⌈n_i/B⌉ local steps. participation: C, the fraction of the N
    clients sampled each round (⌈C·N⌉ of them, without replacement). weighting: "size" (n_i/Σn_j) or "uniform"."""

    epochs: int = 1
    batch_size: int = 64
    participation: float = 1.0
    weighting: str = "size"


def client_seed(seed: int, t: int, i: int) -> int:
    return int(np.random.SeedSequence([seed, t, i]).generate_state(1)[0])


def select_clients(seed: int, t: int, n_clients: int, participation: float) -> np.ndarray:
    m = max(1, int(np.ceil(participation * n_clients - 1e-9)))
    if m >= n_clients:
        return np.arange(n_clients)
    return np.sort(np.random.default_rng([seed, t]).choice(n_clients, m, replace=False))


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
) -> int:
    """E epochs of mini-batch SGD on x[index] with ``correction(w)`` added to every gradient; returns K."""
    model = flat.model
    model.train()
    steps = 0
    for _ in range(epochs):
        order = index[torch.randperm(len(index), generator=generator).to(index.device)]
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            flat.grads.zero_()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            extra = correction(flat.params)
            if extra is not None:
                flat.grads.add_(extra)
            flat.params.sub_(lr * flat.grads)
            steps += 1
    return steps


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


def init_state(flat: FlatModel, algorithm: Algorithm, n_clients: int, lr: float) -> EngineState:
    x = flat.params.detach().clone()
    zeros = torch.zeros_like(x)
    return EngineState(
        round=1,
        x=x,
        server={k: zeros.clone() for k in algorithm.server_keys},
        clients={k: torch.zeros(n_clients, x.numel(), dtype=x.dtype, device=x.device) for k in algorithm.client_keys},
        lr=lr,
    )


def run_round(
    state: EngineState,
    flat: FlatModel,
    algorithm: Algorithm,
    data: ClientSet,
    local: LocalConfig,
    seed: int,
) -> tuple[EngineState, dict]:
    """One round t = state.round; returns the new state (round t+1) and the round's record."""
    t = state.round
    selected = select_clients(seed, t, data.n_clients, local.participation)
    sizes = torch.tensor(data.sizes[selected], dtype=state.x.dtype, device=state.x.device)
    weights = sizes / sizes.sum() if local.weighting == "size" else torch.full_like(sizes, 1 / len(selected))
    ys, old, new = [], {k: [] for k in algorithm.client_keys}, {k: [] for k in algorithm.client_keys}
    for i in selected.tolist():
        ctx = Context(state.x, state.server, {k: v[i] for k, v in state.clients.items()}, flat.head_mask)
        flat.load(state.x)
        generator = torch.Generator().manual_seed(client_seed(seed, t, i))
        with torch.random.fork_rng(devices=[]):  # dropout draws: seeded per (round, client), global state restored
            torch.manual_seed(client_seed(seed, t, i) + 1)
            steps = local_train(
                flat, data.x, data.y, data.train[i], local.epochs, local.batch_size, state.lr,
                lambda w, ctx=ctx: algorithm.correction(w, ctx), generator,
            )  # fmt: skip
        y_i = flat.params.detach().clone()
        ys.append(y_i)
        for k, v in algorithm.client_update(y_i, ctx, steps, state.lr).items():
            old[k].append(ctx.client[k])
            new[k].append(v)
    stack = {k: torch.stack(v) for k, v in new.items()}
    x, server = algorithm.server_update(
        state.x, state.server, torch.stack(ys), weights, {k: torch.stack(v) for k, v in old.items()}, stack,
        data.n_clients,
    )  # fmt: skip
    for k, v in stack.items():  # in place: (N, P) arrays can be large
        state.clients[k][torch.as_tensor(selected, device=v.device)] = v
    record = {"round": t, "clients": selected.tolist()}
    return EngineState(t + 1, x, server, state.clients, state.lr, state.extra), record
