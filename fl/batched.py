"""Batched clients: the local updates of many same-architecture clients at once, with ``torch.func``.

The m participants' parameter vectors are stacked into W ∈ R^{m×P}; every local step evaluates all of them in
one call, ``vmap(grad(loss))`` over (W, their batches) with ``functional_call`` on the shared module, so a round of
100 small clients is a few large kernels instead of thousands of tiny ones. Everything else is the sequential
engine's step (:func:`fl.engine.local_train`), row by row:

- batches: client i's mini-batches are exactly the sequential backend's (:func:`fl.clients.batches` with the
  same generator seeded from (seed, round, i)), padded to B with zero-weight samples; the loss is the weighted
  mean Σ_j m_j CE_j / Σ_j m_j, i.e. the mean over the real samples of the batch;
- clients of unequal size take K_i steps each: at step s ≥ K_i a client is masked (its W, momentum and Adam
  moments stay as they are);
- the algorithm's correction (``vmap`` of :meth:`~fl.algorithms.Algorithm.correction` over the rows and the
  clients' stacked states), weight decay λw, then plain SGD, heavy-ball momentum or Adam (torch.optim.Adam's
  formulas with each client's own step count);
- ``chunk`` bounds the clients per vmap call (memory: about chunk × B samples of activations at once).

What cannot be batched, :func:`unbatchable` names in one line and the engine trains sequentially: a method's
per-client objective (FedCOG's distillation, HFMDs' mixed batches and prototypes: a :class:`LocalTask`), batch
norm (running statistics are per-client module state), and dropout (its masks would be drawn differently from the
sequential backend's; with ``backend = "batched"`` named explicitly dropout runs with vmap's independent draws).
In float64 the two backends agree to ~1e-12 (tested over two rounds of every algorithm with unequal clients and
partial participation); in float32 to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fl.algorithms import Algorithm, Context
from fl.clients import STEP_KEY, batches, carried_rows
from fl.flat import FlatModel

BACKENDS = ("auto", "sequential", "batched")


def unbatchable(model: nn.Module, tasks: list, explicit: bool, augment: str = "none") -> str | None:
    """Why these clients cannot be trained batched (one line), or None when they can."""
    if augment != "none":
        return f"train.augment = {augment!r} transforms each client's batches in the sequential backend"
    if any(task is not None for task in tasks):
        return "the method gives each client its own objective (a LocalTask)"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "the model has batch norm (running statistics per client)"
    if not explicit and has_dropout(model):
        return "the model has dropout (set train.backend = 'batched' to accept independent dropout draws)"
    return None


def has_dropout(model: nn.Module) -> bool:
    """Whether the model draws dropout masks (a dropout layer with p > 0)."""
    return any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())


def plan(
    indices: list[torch.Tensor], batch_size: int, generators: list[torch.Generator], epochs: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every client's batches as (index (S, m, B), weight (S, m, B), K (m,)): S = max K_i steps, batches padded
    with index 0 and weight 0, a client past its K_i steps all zero weight."""
    lists = [list(batches(index, batch_size, g, epochs, steps)) for index, g in zip(indices, generators)]
    counts = torch.tensor([len(b) for b in lists])
    n_steps, m = int(counts.max()) if len(lists) else 0, len(lists)
    device = indices[0].device if indices else "cpu"
    index = torch.zeros(n_steps, m, batch_size, dtype=torch.long, device=device)
    weight = torch.zeros(n_steps, m, batch_size, device=device)
    for i, client in enumerate(lists):
        for s, batch in enumerate(client):
            index[s, i, : len(batch)] = batch
            weight[s, i, : len(batch)] = 1
    return index, weight, counts


@dataclass
class Group:
    """One run's participants in a batched call: its data (x, y), the clients' training sets and batch-order
    generators, its algorithm, the clients' contexts (server model, states), step size and local settings. A fleet
    (:mod:`fl.fleet`) trains the groups of several runs in one call."""

    x: torch.Tensor
    y: torch.Tensor
    indices: list[torch.Tensor]
    generators: list[torch.Generator]
    algorithm: Algorithm
    contexts: list[Context]
    lr: float
    local: object  # fl.clients.LocalConfig


def train_clients(
    flat: FlatModel, group: Group, chunk: int = 0, randomness: str = "error"
) -> tuple[torch.Tensor, list[int]]:
    """Local training of the group's clients from the server model (``contexts[i].x``): their final models (m, P)
    and step counts K_i, in chunks of ``chunk`` clients (0: all at once)."""
    size = chunk or len(group.indices) or 1
    outs, steps = [], []
    for start in range(0, len(group.indices), size):
        part = slice(start, start + size)
        piece = replace(group, indices=group.indices[part], generators=group.generators[part],
                        contexts=group.contexts[part])  # fmt: skip
        [(w, k)] = train_groups(flat, [piece], randomness)
        outs.append(w)
        steps += k
    return torch.cat(outs), steps


class Fleet(Protocol):
    """Trains several runs' clients together (:class:`fl.fleet.Rendezvous`): ``train`` returns this group's
    (models, step counts) and how many runs shared the computation; ``work`` computes this run's own training (its
    clients one after another) beside the other runs' and returns its result."""

    def train(self, flat: FlatModel, group: Group) -> tuple[tuple[torch.Tensor, list[int]], int]: ...

    def work(self, fn: Callable[[], object]) -> object: ...


FLEET: ContextVar[Fleet | None] = ContextVar("FLEET", default=None)


def train_groups(
    flat: FlatModel, groups: list[Group], randomness: str = "error"
) -> list[tuple[torch.Tensor, list[int]]]:
    """The local training of every group's clients in one computation: one ``vmap(grad(loss))`` over all groups'
    rows each step (``flat``'s module evaluates every row: the groups' models must have its architecture), then
    each group's own correction, weight decay and optimiser step. Each group's (models (m, P), step counts K_i).
    A row's numbers do not depend on the other rows (float64 on the CPU: bit for bit, tested), so a group trained
    beside others equals the group trained alone."""
    model, layout = flat.model, flat.layout
    model.train()
    plans = [plan(g.indices, g.local.batch_size, g.generators, g.local.epochs, g.local.steps) for g in groups]
    n_steps = max((p[0].shape[0] for p in plans), default=0)
    dtype = flat.params.dtype

    def loss(params, xb, yb, mb):
        logits = functional_call(model, params, (xb,))
        return (F.cross_entropy(logits, yb, reduction="none") * mb).sum() / mb.sum().clamp_min(1)

    per_parameter = vmap(grad(loss), randomness=randomness)

    def gradients(W, xb, yb, mb):  # by parameter, then one flat row per client (no zero-filled slice gradients)
        out = per_parameter(flat.named(W), xb, yb, mb)
        return torch.cat([out[name].flatten(1) for name, _ in layout], 1)

    steps = [_Steps(g, counts) for g, (_, _, counts) in zip(groups, plans)]
    plans = [_padded(index, weight.to(dtype), n_steps) for index, weight, _ in plans]
    for s in range(n_steps):
        parts = [(g.x[index[s]], g.y[index[s]], weight[s]) for g, (index, weight) in zip(groups, plans)]
        xb, yb, mb = (torch.cat(p) if len(p) > 1 else p[0] for p in zip(*parts))
        W = torch.cat([state.W for state in steps]) if len(steps) > 1 else steps[0].W
        g_all = gradients(W, xb, yb, mb)
        start = 0
        for state in steps:
            state.step(g_all[start : start + state.m], s)
            start += state.m
    return [state.finish() for state in steps]


def _padded(index: torch.Tensor, weight: torch.Tensor, n_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A group's (index, weight) made ``n_steps`` long with zero-weight batches of sample 0 (masked steps)."""
    extra = n_steps - index.shape[0]
    if extra:
        index = torch.cat([index, index.new_zeros(extra, *index.shape[1:])])
        weight = torch.cat([weight, weight.new_zeros(extra, *weight.shape[1:])])
    return index, weight


class _Steps:
    """One group's clients through the steps: their models W (m, P), the algorithm's correction, weight decay and
    the optimiser (plain SGD, heavy-ball momentum or torch.optim.Adam's formulas), masked past each K_i."""

    def __init__(self, group: Group, counts: torch.Tensor) -> None:
        self.group, self.counts, self.m = group, counts, len(group.indices)
        contexts, algorithm, local = group.contexts, group.algorithm, group.local
        x0 = contexts[0].x
        self.W = x0.detach().expand(self.m, -1).clone()
        self.clients = {k: torch.stack([c.client[k] for c in contexts]) for k in algorithm.client_keys}
        server, head_mask = contexts[0].server, contexts[0].head_mask
        probe = algorithm.correction(x0, Context(x0, server, {k: v[0] for k, v in self.clients.items()}, head_mask))

        def correction(w, client):
            return algorithm.correction(w, Context(x0, server, client, head_mask))

        self.corrections = vmap(correction) if probe is not None else None
        self.carried = carried_rows(local)  # kept optimiser state: start from each client's rows
        W = self.W
        self.velocity = torch.zeros_like(W) if local.momentum else None
        if self.velocity is not None and self.carried:
            self.velocity = torch.stack([c.client["momentum"] for c in contexts])
        self.adam = local.optimizer == "adam"
        if self.adam:
            self.first, self.second = torch.zeros_like(W), torch.zeros_like(W)
            self.done = torch.zeros(self.m, 1, dtype=W.dtype, device=W.device)  # steps taken before this round
            if self.carried:
                self.first = torch.stack([c.client["adam_m"] for c in contexts])
                self.second = torch.stack([c.client["adam_v"] for c in contexts])
                self.done = torch.stack([c.client[STEP_KEY] for c in contexts])

    def step(self, g: torch.Tensor, s: int) -> None:
        local, lr, W = self.group.local, self.group.lr, self.W
        active = (self.counts > s).to(W.device)[:, None]
        if self.corrections is not None:
            g = g + self.corrections(W, self.clients)
        if local.weight_decay:
            g = g + local.weight_decay * W
        if self.adam:  # torch.optim.Adam (β = 0.9, 0.999, ε = 1e-8), step t = (steps before) + s + 1 per client
            self.first = torch.where(active, self.first.lerp(g, 0.1), self.first)
            self.second = torch.where(active, self.second.mul(0.999).addcmul(g, g, value=0.001), self.second)
            t = self.done + (s + 1)
            step_size = lr / (1 - 0.9**t)
            denom = self.second.sqrt() / (1 - 0.999**t).sqrt() + 1e-8
            update = step_size * self.first / denom
        elif self.velocity is not None:
            self.velocity = torch.where(active, self.velocity * local.momentum + g, self.velocity)
            update = lr * self.velocity
        else:
            update = lr * g
        self.W = torch.where(active, W - update, W)

    def finish(self) -> tuple[torch.Tensor, list[int]]:
        """(W, K_i), the kept optimiser state written back into the contexts as the sequential backend leaves it."""
        for j, c in enumerate(self.group.contexts):
            if self.adam and self.carried:
                c.client.update(
                    adam_m=self.first[j], adam_v=self.second[j], **{STEP_KEY: self.done[j] + self.counts[j].item()}
                )
            elif self.carried:
                c.client.update(momentum=self.velocity[j])
        return self.W, self.counts.tolist()
