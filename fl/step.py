"""One client's local step as pure functions over stacked rows: :func:`init`, :func:`step`, :func:`final`.

A client (or m clients stacked as rows) trains from the server model x with the local state L = (w, v, m, s, k₀):
the model w, the heavy-ball momentum v, Adam's first and second moments m and s, and k₀ its Adam steps before
this round. Each local step takes the mini-batch gradient g = ∇F(w; batch) and

    g <- g + correction(w)          (the algorithm's change to plain SGD, :meth:`fl.algorithms.Algorithm.correction`)
    g <- g + λ w                    (weight decay)
    w <- w - η g                    (SGD), or v <- β v + g, w <- w - η v (momentum), or Adam's step on g

a row past its K_i steps masked (``active``: it keeps w, v, m and s). :func:`final` hands back the optimiser rows
a client keeps from round to round (:func:`fl.clients.carried_rows`). Every executor steps with these: the
sequential backend (:func:`fl.engine.local_train`, also what worker processes and Flower nodes run) on one row,
the batched backend and the fleet (:mod:`fl.batched`) on the ``vmap``'d gradients of many.

The two arithmetic orders (:attr:`Rule.torch_order`): the sequential executors compute as torch.optim does (λ w
fused into one add, torch.optim.Adam's own step, :func:`fl.optim.adam_update_torch`, which updates w, m and s in
place), the batched ones as rows (λ·w added, :func:`fl.optim.adam_update`, new tensors); the two differ in the
last bit of a weight-decay or Adam step, and each executor keeps its own so that no number it computed before
changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from fl.clients import STEP_KEY
from fl.optim import adam_update, adam_update_torch


@dataclass(frozen=True)
class Rule:
    """The local optimiser: step size η (a number, or an (m, 1) column, one a row), heavy-ball β, weight decay λ,
    "sgd" or "adam", and the arithmetic order (True: torch.optim's, the sequential executors')."""

    lr: float | torch.Tensor
    momentum: float = 0.0
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    torch_order: bool = False


class Local(NamedTuple):
    """L = (w, v, m, s, k₀) of one client or m stacked rows (w, v, m, s: (P,) or (m, P)); v None without
    momentum, m, s None without Adam; k₀ (Adam's steps before the round) a number in torch order, else (m, 1)."""

    w: torch.Tensor
    velocity: torch.Tensor | None = None
    first: torch.Tensor | None = None
    second: torch.Tensor | None = None
    done: torch.Tensor | float | None = None

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """What a step changes, in order (w, then v, or m and s): a recorded graph's state (:mod:`fl.graphs`)."""
        return tuple(t for t in (self.w, self.velocity, self.first, self.second) if t is not None)

    def with_tensors(self, tensors: tuple[torch.Tensor, ...]) -> Local:
        """This state with :meth:`tensors`' values replaced by ``tensors`` (the same order)."""
        it = iter(tensors)
        return Local(*(next(it) if t is not None else None for t in self[:4]), self.done)


def init(w: torch.Tensor, rule: Rule, carried: dict[str, torch.Tensor] | None = None) -> Local:
    """L at the start of the round from the rows w (not copied: in torch order its steps update w) and the kept
    optimiser rows ``carried`` (:func:`fl.clients.carried_rows`, copied; None or empty: a fresh optimiser, zero v,
    m, s and k₀)."""
    velocity = first = second = done = None
    if rule.momentum and rule.optimizer != "adam":
        velocity = carried["momentum"].clone() if carried else torch.zeros_like(w)
    if rule.optimizer == "adam":
        if carried:
            first, second, done = carried["adam_m"].clone(), carried["adam_v"].clone(), carried[STEP_KEY]
        else:
            first, second = torch.zeros_like(w), torch.zeros_like(w)
            done = torch.zeros(*w.shape[:-1], 1, dtype=w.dtype, device=w.device)
        done = float(done) if rule.torch_order else done
    return Local(w, velocity, first, second, done)


def step(
    state: Local,
    g: torch.Tensor,
    s: int | torch.Tensor,
    rule: Rule,
    correction: Callable[[torch.Tensor], torch.Tensor | None] | None = None,
    active: torch.Tensor | None = None,
) -> Local:
    """Local step s (0-based; an int, or a 0-d tensor in a recorded graph) with the batch gradient g: L after it.
    ``active`` (m, 1) bool masks the rows past their K_i steps (None: every row steps). In torch order (one client,
    no mask) w, v, m and s are updated in place, as torch.optim does, and L's own tensors come back; else new
    tensors."""
    w = state.w
    extra = correction(w) if correction is not None else None
    if extra is not None:
        g = g + extra
    if rule.weight_decay:
        g = g.add(w, alpha=rule.weight_decay) if rule.torch_order else g + rule.weight_decay * w
    if rule.optimizer == "adam":
        return _adam(state, g, s, rule, active)
    if rule.torch_order:  # torch.optim's way: in place, every row stepping
        if state.velocity is not None:
            g = state.velocity.mul_(rule.momentum).add_(g)
        state.w.sub_(rule.lr * g)
        return state
    velocity = state.velocity
    if velocity is not None:
        velocity = velocity * rule.momentum + g
        if active is not None:
            velocity = torch.where(active, velocity, state.velocity)
        g = velocity
    new = w - rule.lr * g
    return Local(new if active is None else torch.where(active, new, w), velocity, None, None, state.done)


def _adam(state: Local, g: torch.Tensor, s: int | torch.Tensor, rule: Rule, active: torch.Tensor | None) -> Local:
    """Adam's step at t = k₀ + s + 1 (each row its own t)."""
    if rule.torch_order:
        first, second, w = adam_update_torch(state.first, state.second, g, state.done + s + 1, rule.lr, state.w)
        return Local(w, None, first, second, state.done)
    mask = active if active is not None else torch.ones((), dtype=torch.bool, device=g.device)
    first, second, update = adam_update(state.first, state.second, g, state.done + (s + 1), rule.lr, mask)
    return Local(torch.where(mask, state.w - update, state.w), None, first, second, state.done)


def final(state: Local, rule: Rule, steps: torch.Tensor | int) -> dict[str, torch.Tensor]:
    """The optimiser rows a client keeps to its next round after K = ``steps`` steps this one (K_i a row, as an
    (m, 1) column where rows): Adam's m, s and step count k₀ + K, or the momentum v; {} for plain SGD."""
    if rule.optimizer == "adam":
        return {"adam_m": state.first, "adam_v": state.second, STEP_KEY: state.done + steps}
    return {"momentum": state.velocity} if state.velocity is not None else {}
