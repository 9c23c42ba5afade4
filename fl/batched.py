"""Batched clients: the local updates of many same-architecture clients at once, with ``torch.func``.

The m participants' parameter vectors are stacked into W ∈ R^{m×P}; every local step evaluates all of them in
one call, ``vmap(grad(loss))`` over (W, their batches) with ``functional_call`` on the shared module, so a round of
100 small clients is a few large kernels instead of thousands of tiny ones. The step itself is the one every
executor takes (:func:`fl.step.step`, the sequential backend's too), on the m rows at once:

- batches: client i's mini-batches are exactly the sequential backend's (:func:`fl.clients.batches` with the
  same generator seeded from (seed, round, i)), padded to B with zero-weight samples; the loss is the weighted
  mean Σ_j m_j CE_j / Σ_j m_j, i.e. the mean over the real samples of the batch;
- clients of unequal size take K_i steps each: at step s ≥ K_i a client is masked (its W, momentum and Adam
  moments stay as they are);
- the algorithm's correction (``vmap`` of :meth:`~fl.algorithms.Algorithm.correction` over the rows and the
  clients' stacked states), weight decay λw, then plain SGD, heavy-ball momentum or Adam (torch.optim.Adam's
  formulas with each client's own step count, :func:`fl.optim.adam_update`);
- ``chunk`` bounds the clients per vmap call (memory: about chunk × B samples of activations at once);
- on CUDA, a round's steps after the first are recorded once as a CUDA graph and replayed (:mod:`fl.graphs`,
  ``train.graphs``; not with dropout): the same kernels, launched in one call a step.

A method's per-client objective is batched when it is a :class:`~fl.methods.base.BatchedTask` (HFMDs' mixed
batches and prototypes): each row's batch is its real batch padded to B followed by its extra samples padded to b,
its loss w_r · mean CE(real) + w_e · mean CE(extra), the real samples' features returned beside the gradient and
summed per class, the two terms' gradient share measured at step 0; tasks of one layout (b, features) share a call.

What cannot be batched, :func:`unbatchable` names in one line and the engine trains sequentially: another
:class:`LocalTask` (FedCOG's distillation), batch norm (running statistics are per-client module state), and
dropout (its masks would be drawn differently from the sequential backend's; with ``backend = "batched"`` named
explicitly dropout runs with vmap's independent draws).
In float64 the two backends agree to ~1e-12 (tested over two rounds of every algorithm with unequal clients and
partial participation); in float32 to rounding.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

import fl.step as step
from fl.algorithms import Algorithm, Context
from fl.clients import batches, carried_rows
from fl.flat import FlatModel
from fl.graphs import StepNotRecordable, graph_kind, replay

BACKENDS = ("auto", "sequential", "batched")


def unbatchable(model: nn.Module, tasks: list, explicit: bool, augment: str = "none") -> str | None:
    """Why these clients cannot be trained batched (one line), or None when they can."""
    if augment != "none":
        return f"train.augment = {augment!r} transforms each client's batches in the sequential backend"
    if any(task is not None and not hasattr(task, "extra") for task in tasks):
        return "the method gives each client its own objective (a LocalTask without a batched form)"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "the model has batch norm (running statistics per client)"
    if not explicit and has_dropout(model):
        return "the model has dropout (set train.backend = 'batched' to accept independent dropout draws)"
    return None


def has_dropout(model: nn.Module) -> bool:
    """Whether the model draws dropout masks (a dropout layer with p > 0)."""
    return any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())


def plan(
    indices: list[torch.Tensor], batch_size: int, generators: list[torch.Generator], budgets: list[tuple[int, int]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every client's batches as (index (S, m, B), weight (S, m, B), K (m,)) from its (epochs, steps) budget: S =
    max K_i steps, batches padded with index 0 and weight 0, a client past its K_i steps all zero weight."""
    lists = [list(batches(index, batch_size, g, *b)) for index, g, b in zip(indices, generators, budgets)]
    counts = torch.tensor([len(b) for b in lists])
    n_steps, m = int(counts.max()) if len(lists) else 0, len(lists)
    device = indices[0].device if indices else "cpu"
    index = torch.zeros(n_steps, m, batch_size, dtype=torch.long, device=device)
    weight = torch.zeros(n_steps, m, batch_size, device=device)
    for i, client in enumerate(lists):  # one write a client, not one a step (each is a kernel launch on a GPU)
        index[: len(client), i], weight[: len(client), i] = padded_batches(client, batch_size, device)
    return index, weight, counts


def budgets(group: Group) -> list[tuple[int, int]]:
    """Each client's (epochs, steps) of :func:`fl.clients.batches`: the group's own, else its local settings'."""
    return group.budgets or [(group.local.epochs, group.local.steps)] * len(group.indices)


def padded_batches(batches: list[torch.Tensor], width: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Index batches of at most ``width`` as (K, width) indices, padded with 0, and their (K, width) 0/1 mask (K =
    0 for no batch)."""
    if not batches:
        return torch.zeros(0, width, dtype=torch.long, device=device), torch.zeros(0, width, dtype=torch.bool,
                                                                                   device=device)  # fmt: skip
    lengths = torch.tensor([len(b) for b in batches], device=device)
    short = [F.pad(b, (0, width - len(b))) if len(b) < width else b for b in batches]
    return torch.stack(short), torch.arange(width, device=device) < lengths[:, None]


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
    tasks: list | None = None  # each client's fl.methods.base.BatchedTask or None (plain cross-entropy)
    budgets: list[tuple[int, int]] | None = None  # each client's (epochs, steps) (fl.clients.client_budget)


def layout(group: Group) -> tuple[int, bool]:
    """(b, features): the widest extra batch of the group's tasks and whether any wants the real features summed;
    groups of one layout share a vmapped call, (0, False) is plain cross-entropy."""
    tasks = [t for t in group.tasks or () if t is not None]
    return max((t.extra_width for t in tasks), default=0), any(t.feature_classes for t in tasks)


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
                        contexts=group.contexts[part], tasks=group.tasks and group.tasks[part])  # fmt: skip
        [(w, k)] = train_groups(flat, [piece], randomness)
        outs.append(w)
        steps += k
    return torch.cat(outs), steps


class Fleet(Protocol):
    """Trains several runs' clients together (:class:`fl.fleet.Rendezvous`): ``train`` returns this group's
    (models, step counts) and how many runs shared the computation; ``work`` computes this run's own training (its
    clients one after another) beside the other runs' and returns its result; ``together``: the runs that arrive
    with equal ``key`` have ``compute`` called once with all their items, and each gets its own result (DynaFed's
    batched syntheses)."""

    def train(self, flat: FlatModel, group: Group) -> tuple[tuple[torch.Tensor, list[int]], int]: ...

    def work(self, fn: Callable[[], object]) -> object: ...

    def together(self, key: Hashable, item: object, compute: Callable[[list], list]) -> object: ...


FLEET: ContextVar[Fleet | None] = ContextVar("FLEET", default=None)


def train_groups(
    flat: FlatModel, groups: list[Group], randomness: str = "error"
) -> list[tuple[torch.Tensor, list[int]]]:
    """The local training of every group's clients in one computation per :func:`layout`: one
    ``vmap(grad(loss))`` over all its groups' rows each step (``flat``'s module evaluates every row: the groups'
    models must have its architecture), then each group's own correction, weight decay and optimiser step (groups
    of one algorithm without a correction and equal settings: one step for all, a step size per row). Each
    group's (models (m, P), step counts K_i). A row's numbers do not depend on the other rows (float64 on the CPU:
    bit for bit, tested), so a group trained beside others equals the group trained alone."""
    by_layout: dict[tuple[int, bool], list[int]] = {}
    for k, group in enumerate(groups):
        by_layout.setdefault(layout(group), []).append(k)
    trained = [r for (width, features), members in by_layout.items()
               for r in _train(flat, [groups[k] for k in members], width, features, randomness)]  # fmt: skip
    return _in_place(list(by_layout.values()), trained)


def _in_place(parts: list[list[int]], results: list) -> list:
    """The results of the groups listed part after part, back in the groups' own order."""
    out: list = [None] * len(results)
    for k, result in zip((k for part in parts for k in part), results):
        out[k] = result
    return out


class _Split(nn.Module):
    """The model's (features, logits) in one forward pass (a :class:`fl.models.SplitModel`)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.model.features(x)
        return z, self.model.classifier(z)


def _units(groups: list[Group]) -> list[list[int]]:
    """The groups (by index) whose optimiser steps are one computation: groups of an algorithm without a
    correction, with equal algorithm settings and local settings, share their updates (a step size per row);
    every other group is a unit of its own."""
    units: list[list[int]] = []
    opened: dict[tuple, int] = {}
    for k, group in enumerate(groups):
        if type(group.algorithm).correction is Algorithm.correction:
            key = (type(group.algorithm), repr(group.algorithm), repr(group.local))
            if key in opened:
                units[opened[key]].append(k)
                continue
            opened[key] = len(units)
        units.append([k])
    return units


def _train(
    flat: FlatModel, groups: list[Group], width: int, features: bool, randomness: str
) -> list[tuple[torch.Tensor, list[int]]]:
    """:func:`train_groups` for groups of one layout: extra samples of ``width`` a row, features if wanted; the
    rows ordered by :func:`_units`, each unit's updates one computation."""
    units = _units(groups)
    return _in_place(units, _train_units(flat, [[groups[k] for k in unit] for unit in units], width, features,
                                         randomness))  # fmt: skip


def _train_units(
    flat: FlatModel, units: list[list[Group]], width: int, features: bool, randomness: str
) -> list[tuple[torch.Tensor, list[int]]]:
    """The units' rows through every step (:class:`_Pass`), eagerly or, on CUDA after step 0, as a recorded graph;
    each group's (W, K_i), the tasks handed their features and shares."""
    groups = [group for unit in units for group in unit]
    flat.model.train()
    plans = [plan(g.indices, g.local.batch_size, g.generators, budgets(g)) for g in groups]
    n_steps = max((p[0].shape[0] for p in plans), default=0)
    dtype = flat.params.dtype
    counts = [c for _, _, c in plans]
    bounds = np.cumsum([0, *(len(unit) for unit in units)])
    steps = [_Steps(unit, counts[a:b]) for unit, a, b in zip(units, bounds[:-1], bounds[1:])]
    extras = [_Extras(g, c, n_steps, width, dtype) for g, c in zip(groups, counts)]
    plans = [_padded(index, weight.to(dtype), n_steps) for index, weight, _ in plans]
    run = _Pass(flat, groups, steps, extras, plans, width, features, randomness)
    setting = groups[0].local.graphs if groups else "auto"  # a fleet's groups share it (fl.fleet.shape_key)
    kind = None if has_dropout(flat.model) else graph_kind(flat.params.device, len(groups), setting)  # dropout: eagerly
    first = 1 if kind and n_steps > 2 else n_steps  # step 0 eagerly (gradient shares, features begun), then a graph
    for s in range(first):
        run.body(s)
    if first < n_steps:
        before = run.take()
        try:
            run.put(replay(lambda state, s: run.advance(state, s), before, first, n_steps, kind))  # a plain function
        except StepNotRecordable as error:  # on CUDA, a capture that failed: the steps eagerly (the CPU's trace raises)
            if kind != "cuda":
                raise
            warnings.warn(str(error), RuntimeWarning, stacklevel=2)
            run.put(before)
            for s in range(first, n_steps):
                run.body(s)
    rows = np.cumsum([0, *(len(g.indices) for g in groups)])
    for e, c, a, b in zip(extras, counts, rows[:-1], rows[1:]):
        e.hand_back(None if run.sums is None else (run.sums[a:b], run.counts_seen[a:b]), c)
    return [result for state in steps for result in state.finish()]


def _gradients(flat: FlatModel, width: int, features: bool, randomness: str) -> Callable:
    """``gradients(W, xb, yb, mb, cb)``: every row's gradient of its batch loss as one flat row (m, P) and the real
    samples' features (or the loss), ``vmap(grad(loss))`` over the rows. The loss is the weighted mean of the
    cross-entropy over the real samples, or with ``width`` extra samples w_r · mean CE(real) + w_e · mean CE(extra)
    (cb the rows' (w_r, w_e))."""
    model, names, split = flat.model, flat.layout, _Split(flat.model)

    def loss(params, xb, yb, mb, cb):
        if features:
            z, logits = functional_call(split, {f"model.{k}": v for k, v in params.items()}, (xb,))
        else:
            z, logits = None, functional_call(model, params, (xb,))
        ce = F.cross_entropy(logits, yb, reduction="none")
        if not width:
            value = (ce * mb).sum() / mb.sum().clamp_min(1)
        else:  # the real batch, then the extra samples: w_r · mean CE(real) + w_e · mean CE(extra)
            b = xb.shape[0] - width
            real = (ce[:b] * mb[:b]).sum() / mb[:b].sum().clamp_min(1)
            value = cb[0] * real + cb[1] * (ce[b:] * mb[b:]).sum() / mb[b:].sum().clamp_min(1)
        return value, (z[: xb.shape[0] - width] if features else value)

    per_parameter = vmap(grad(loss, has_aux=True), randomness=randomness)

    def gradients(W, xb, yb, mb, cb):  # by parameter, then one flat row per client (no zero-filled slice gradients)
        out, aux = per_parameter(flat.named(W), xb, yb, mb, cb)
        return torch.cat([out[name].flatten(1) for name, _ in names], 1), aux

    return gradients


class _Pass:
    """One batched call's steps: the units' rows (:class:`_Steps`), the groups' extras and padded plans, and the
    real samples' features summed per class (``sums`` (rows, C, d), ``counts_seen`` (rows, C)) where wanted."""

    def __init__(self, flat: FlatModel, groups: list[Group], steps: list[_Steps], extras: list[_Extras],
                 plans: list[tuple[torch.Tensor, torch.Tensor]], width: int, features: bool,
                 randomness: str) -> None:  # fmt: skip
        self.groups, self.steps, self.extras, self.plans = groups, steps, extras, plans
        self.width, self.features = width, features
        self.gradients = _gradients(flat, width, features, randomness)
        self.cb = torch.cat([e.coefficients for e in extras])
        classes = max((t.feature_classes for e in extras for t in e.tasks if t is not None), default=0)
        self.arange = torch.arange(classes, device=flat.params.device)
        self.sums = self.counts_seen = None

    def body(self, s: int | torch.Tensor) -> None:
        """Step s of every row (an int eagerly, a 0-d tensor in a recorded graph)."""
        parts = [e.batch(g.x[_at(index, s)], g.y[_at(index, s)], _at(weight, s), s)
                 for g, e, (index, weight) in zip(self.groups, self.extras, self.plans)]  # fmt: skip
        xb, yb, mb = (torch.cat(p) if len(p) > 1 else p[0] for p in zip(*parts))
        steps, cb = self.steps, self.cb
        W = torch.cat([state.W for state in steps]) if len(steps) > 1 else steps[0].W
        if isinstance(s, int) and s == 0 and any(e.share for e in self.extras):
            g_real, _ = self.gradients(W, xb, yb, mb, cb * cb.new_tensor([1.0, 0.0]))
            g_extra, _ = self.gradients(W, xb, yb, mb, cb * cb.new_tensor([0.0, 1.0]))
            _shares(self.extras, g_real, g_extra)
        g_all, z = self.gradients(W, xb, yb, mb, cb)
        start = 0
        for state in steps:
            state.step(g_all[start : start + state.m], s)
            start += state.m
        if self.features:
            self._sum_features(xb, yb, mb, z)

    def _sum_features(self, xb: torch.Tensor, yb: torch.Tensor, mb: torch.Tensor, z: torch.Tensor) -> None:
        """Add the step's real samples' features z to their classes' sums."""
        real = slice(0, xb.shape[1] - self.width)
        onehot = (yb[:, real, None] == self.arange).to(z.dtype) * mb[:, real, None]  # one_hot without a host check
        step_sums, step_counts = torch.einsum("mbc,mbd->mcd", onehot, z), onehot.sum(1)
        self.sums = step_sums if self.sums is None else self.sums + step_sums
        self.counts_seen = step_counts if self.counts_seen is None else self.counts_seen + step_counts

    def put(self, state: tuple[torch.Tensor, ...]) -> None:
        """Take back what :meth:`take` gave."""
        tensors = iter(state)
        for unit in self.steps:
            unit.put(tensors)
        if self.features:
            self.sums, self.counts_seen = next(tensors), next(tensors)

    def take(self) -> tuple[torch.Tensor, ...]:
        """What a step changes: every unit's :meth:`_Steps.take`, then the feature sums where wanted."""
        return (*(t for unit in self.steps for t in unit.take()),
                *((self.sums, self.counts_seen) if self.features else ()))  # fmt: skip

    def advance(self, state: tuple[torch.Tensor, ...], s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One recorded step: from ``state`` (:meth:`take`'s) to the next."""
        self.put(state)
        self.body(s)
        return self.take()


class _Extras:
    """One group's tasks in the batched steps: their extra samples (gathered from the tasks' sample sets,
    concatenated once), loss weights (m, 2), and where the features and gradient shares go back."""

    def __init__(self, group: Group, counts: torch.Tensor, n_steps: int, width: int, dtype: torch.dtype) -> None:
        m = len(group.indices)
        self.tasks = list(group.tasks or [None] * m)
        self.width, self.share = width, False
        device = group.x.device
        self.coefficients = torch.tensor([[1.0, 0.0]] * m, dtype=dtype, device=device).reshape(m, 2)
        self.index = torch.zeros(n_steps, m, width, dtype=torch.long, device=device)
        self.mask = torch.zeros(n_steps, m, width, dtype=dtype, device=device)
        self.wants_share = [False] * m
        self.shares: list[dict | None] = [None] * m
        sets: dict[int, int] = {}  # id of a task's sample set -> its offset in the concatenation
        xs, ys, offset = [], [], 0
        for j, (task, k) in enumerate(zip(self.tasks, counts.tolist())):
            extra = task.extra(k) if task is not None and width else None
            if extra is None:
                continue
            if id(extra.x) not in sets:
                sets[id(extra.x)] = offset
                xs.append(extra.x)
                ys.append(extra.y)
                offset += len(extra.y)
            steps, b = extra.index.shape
            self.index[:steps, j, :b] = extra.index + sets[id(extra.x)]
            self.mask[:steps, j, :b] = extra.mask
            self.coefficients[j] = self.coefficients.new_tensor(extra.weights)
            self.wants_share[j] = extra.share and k > 0
        self.share = any(self.wants_share)
        self.x = torch.cat(xs) if xs else None
        self.y = torch.cat(ys) if ys else None

    def batch(self, xb: torch.Tensor, yb: torch.Tensor, mb: torch.Tensor, s: int):
        """Step s's rows: the real batch (m, B, ...) followed by the extra samples (m, b, ...)."""
        if not self.width:
            return xb, yb, mb
        index = _at(self.index, s)
        if self.x is None:  # no task of this group has extra samples: zero-weight padding
            x_extra = xb.new_zeros(xb.shape[0], self.width, *xb.shape[2:])
            y_extra = yb.new_zeros(yb.shape[0], self.width)
        else:
            x_extra, y_extra = self.x[index], self.y[index]
        return torch.cat([xb, x_extra], 1), torch.cat([yb, y_extra], 1), torch.cat([mb, _at(self.mask, s)], 1)

    def hand_back(self, kept, counts: torch.Tensor) -> None:
        """Each task's feature sums and counts (None where it took no step or wants none) and its share."""
        for j, task in enumerate(self.tasks):
            if task is None:
                continue
            trained = kept is not None and task.feature_classes and counts[j] > 0
            c = task.feature_classes
            task.take(kept[0][j, :c] if trained else None, kept[1][j, :c] if trained else None, self.shares[j])


def _shares(extras: list[_Extras], g_real: torch.Tensor, g_extra: torch.Tensor) -> None:
    """Each asking row's ``pool_share`` = ‖g_e‖ / (‖g_r‖ + ‖g_e‖) and the cosine of the two gradient terms."""
    n_real, n_extra = g_real.norm(dim=1), g_extra.norm(dim=1)
    cosine = F.cosine_similarity(g_real, g_extra, dim=1)
    start = 0
    for e in extras:
        for j, asks in enumerate(e.wants_share):
            r = start + j
            if asks:
                share = float(n_extra[r]) / max(float(n_real[r]) + float(n_extra[r]), 1e-300)
                e.shares[j] = {"pool_share": share, "cosine": float(cosine[r])}
        start += len(e.tasks)


def _at(t: torch.Tensor, s: int | torch.Tensor) -> torch.Tensor:
    """``t[s]``; for a 0-d tensor s by ``index_select``, which reads no value on the host (a recorded graph's step)."""
    return t[s] if isinstance(s, int) else t.index_select(0, s.reshape(1)).squeeze(0)


def _padded(index: torch.Tensor, weight: torch.Tensor, n_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A group's (index, weight) made ``n_steps`` long with zero-weight batches of sample 0 (masked steps)."""
    extra = n_steps - index.shape[0]
    if extra:
        index = torch.cat([index, index.new_zeros(extra, *index.shape[1:])])
        weight = torch.cat([weight, weight.new_zeros(extra, *weight.shape[1:])])
    return index, weight


class _Steps:
    """A unit's clients through the steps (one group, or groups merged by :func:`_units`): their local state
    (:class:`fl.step.Local`, models W (m, P)) stepped by :func:`fl.step.step` with the algorithm's correction (vmapped
    over the rows), weight decay and the optimiser, masked past each K_i; a step size per row where groups are
    merged."""

    def __init__(self, groups: list[Group], counts: list[torch.Tensor]) -> None:
        self.groups, self.sizes = groups, [len(g.indices) for g in groups]
        self.counts = torch.cat(counts) if len(counts) > 1 else counts[0]
        self.m = sum(self.sizes)
        group = groups[0]
        self.contexts = contexts = [c for g in groups for c in g.contexts]
        algorithm, local = group.algorithm, group.local
        starts = [g.contexts[0].x.detach().expand(n, -1) for g, n in zip(groups, self.sizes)]
        W = torch.cat(starts).clone() if len(starts) > 1 else starts[0].clone()
        self.limits = self.counts.to(W.device)  # K_i where the steps run (no copy from the host in a step)
        lr = group.lr
        if len(groups) > 1:
            rates = [g.lr for g, n in zip(groups, self.sizes) for _ in range(n)]
            lr = torch.tensor(rates, dtype=W.dtype, device=W.device)[:, None]
        self.rule = step.Rule(lr, local.momentum, local.weight_decay, local.optimizer)
        self.correction = _corrections(algorithm, contexts)  # (merged units have none)
        self.carried = carried_rows(local)  # kept optimiser state: start from each client's rows
        kept = {k: torch.stack([c.client[k] for c in contexts]) for k in self.carried}
        self.state = step.init(W, self.rule, kept)

    @property
    def W(self) -> torch.Tensor:
        return self.state.w

    def step(self, g: torch.Tensor, s: int | torch.Tensor) -> None:
        """Local step s of the unit's rows with their batch gradients g (m, P)."""
        self.state = step.step(self.state, g, s, self.rule, self.correction, (self.limits > s)[:, None])

    def take(self) -> tuple[torch.Tensor, ...]:
        """What a step changes: W, then the momentum or the Adam moments where the optimiser has them."""
        return self.state.tensors()

    def put(self, tensors) -> None:
        """Take back what :meth:`take` gave, in its order, from the iterator ``tensors``."""
        self.state = self.state.with_tensors(tuple(next(tensors) for _ in self.take()))

    def finish(self) -> list[tuple[torch.Tensor, list[int]]]:
        """Each group's (W, K_i), the kept optimiser state written back into the contexts as the sequential backend
        leaves it."""
        if self.carried:
            done = self.counts.to(self.W.device, self.W.dtype)[:, None]
            kept = step.final(self.state, self.rule, done)
            for j, c in enumerate(self.contexts):
                c.client.update({k: v[j] for k, v in kept.items()})
        if len(self.sizes) == 1:
            return [(self.W, self.counts.tolist())]
        return list(zip(self.W.split(self.sizes), (c.tolist() for c in self.counts.split(self.sizes))))


def _corrections(algorithm: Algorithm, contexts: list[Context]) -> Callable | None:
    """The algorithm's correction of every row, ``w (m, P) -> (m, P)`` (vmapped over the rows and the clients'
    stacked states), or None where it has none (plain SGD)."""
    clients = {k: torch.stack([c.client[k] for c in contexts]) for k in algorithm.client_keys}
    x0, server, head_mask = contexts[0].x, contexts[0].server, contexts[0].head_mask
    probe = algorithm.correction(x0, Context(x0, server, {k: v[0] for k, v in clients.items()}, head_mask))
    if probe is None:
        return None

    def correction(w, client):
        return algorithm.correction(w, Context(x0, server, client, head_mask))

    batched = vmap(correction)
    return lambda W: batched(W, clients)
