"""DynaFed's trajectory matching (dynafed.txt Sec. 4, eq. 3-4): the distance d(w̃, w*), the soft-label loss, the
reference unroll A(X, y, w^t, s') (``torch.func.grad`` through ``functional_call``), a segment's target and its
matching loss, and the unroll vmapped over several runs (the batched path). The fast unroll, with the same numbers,
is :mod:`fl.methods.dynafed_fast`; the method that calls them is :mod:`fl.methods.dynafed`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fl.estimators import soft_cross_entropy


def distance(w: torch.Tensor, start: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """d(w̃, w*) of eq. 3: cosine distance of the updates from ``start``, or the normalised squared distance."""
    if kind == "cosine":
        return 1 - F.cosine_similarity(w - start, target - start, dim=0)
    return (w - target).pow(2).sum() / (start - target).pow(2).sum().clamp_min(torch.finfo(w.dtype).tiny)


def label_loss(logits: torch.Tensor, probabilities: torch.Tensor, class_mean: bool) -> torch.Tensor:
    """CE(w; X, softmax(y)) with soft labels; ``class_mean``: also averaged over the C classes (÷ C), as the
    authors' code's ``kd_loss`` (a mean over batch and classes) computes it."""
    loss = soft_cross_entropy(logits, probabilities)
    return loss / logits.shape[1] if class_mean else loss


def unroll(
    model, named, w, inputs, label_logits, steps: int, lr: torch.Tensor, augment: Callable | None = None,
    class_mean: bool = False,
) -> torch.Tensor:  # fmt: skip
    """A(X, y, w, s'): ``steps`` full-batch SGD steps on CE(w; X, softmax(y)), differentiable in X, y and α; with
    ``augment`` each step sees its own augmentation of X (DSA, differentiable in X)."""

    def loss(vector, batch):
        logits = functional_call(model, named(vector), (batch,))
        return label_loss(logits, F.softmax(label_logits, 1), class_mean)

    step = grad(loss)
    for _ in range(steps):
        w = w - lr * step(w, inputs if augment is None else augment(inputs))
    return w


def match_target(trajectory: torch.Tensor, t: int, middle) -> torch.Tensor:
    """w* of a segment from w^t: the mean of w^{t+m} for m in ``middle`` ("paper": w^{t+s} and 2 between;
    "code": 2 to s draws with replacement from t+1..t+s)."""
    return torch.stack([trajectory[t + m] for m in middle]).mean(0)


class Unroll(Protocol):
    """A fast unroll (:class:`fl.methods.dynafed_fast.FastUnroll`): A(X, y, w^t, s') with :func:`unroll`'s numbers."""

    def unroll(self, start, inputs, label_logits, steps: int, lr, augment=None, class_mean: bool = False): ...


@dataclass(frozen=True, eq=False)
class Matching:
    """What a synthesis's matching loss reads, segment after segment: the model called on a flat parameter vector
    (``named(w)``: its parameters as views of w), the trajectory w^1..w^L, D_syn's images X and label logits y, the
    inner step size α, s' inner steps (``steps``), the distance (``kind``: "euclidean" or "cosine"), DSA
    (``augment``, None: none) and whether the soft-label loss is also averaged over the classes."""

    model: nn.Module
    named: Callable
    trajectory: torch.Tensor
    inputs: torch.Tensor
    label_logits: torch.Tensor
    lr: torch.Tensor
    steps: int
    kind: str
    augment: Callable | None = None
    class_mean: bool = False


def match_loss(matching: Matching, t: int, middle, fast: Unroll | None = None) -> torch.Tensor:
    """The matching loss of one segment: start w^t, target the mean of w^{t+m} for m in ``middle``; the unroll by
    ``fast`` (:meth:`fl.methods.dynafed_fast.FastUnroll.unroll`) or, without it, by the reference :func:`unroll`."""
    m = matching
    start = m.trajectory[t]
    target = match_target(m.trajectory, t, middle)
    if fast is None:
        end = unroll(m.model, m.named, start, m.inputs, m.label_logits, m.steps, m.lr, m.augment, m.class_mean)
    else:
        end = fast.unroll(start, m.inputs, m.label_logits, m.steps, m.lr, m.augment, m.class_mean)
    return distance(end, start, target, m.kind)


def unroll_many(
    model, named, w, inputs, label_logits, steps: int, lr: torch.Tensor, augments: list[Callable | None],
    class_mean: bool = False,
) -> torch.Tensor:  # fmt: skip
    """:func:`unroll` for R syntheses at once: w (R, P), inputs (R, n, ...), label logits (R, n, C), α (R,); one
    ``vmap(grad(loss))`` over the R rows each inner step (their convolutions grouped), each row's augmentation
    drawn from its own generator as its :func:`unroll` alone would."""

    def loss(vector, batch, logits):
        return label_loss(functional_call(model, named(vector), (batch,)), F.softmax(logits, 1), class_mean)

    step = vmap(grad(loss))
    for _ in range(steps):
        batch = torch.stack([x if a is None else a(x) for a, x in zip(augments, inputs.unbind())])
        w = w - lr[:, None] * step(w, batch, label_logits)
    return w
