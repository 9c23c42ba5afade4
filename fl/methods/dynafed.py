"""DynaFed (dynafed.txt Sec. 4, Algorithms 1-2, appendix B): server-side data synthesis from the global trajectory.

Clients run the engine's algorithm unchanged. The server records the global models w^1, ..., w^L of the first L
rounds (``trajectory_rounds``; on the CPU). After aggregating round L it learns D_syn = (X, y) by trajectory
matching (Algorithm 1, eq. 3-4):

    min_{X, y}  E_{t ~ U(1, L−s)} d(w̃, w*),   w̃ = A(X, y, w^t, s'),

where A takes s' (``inner_steps``) full-batch SGD steps w <- w − α ∇_w CE(w; X, softmax(y)) from w^t, unrolled and
differentiated with ``torch.func`` (``functional_call`` + ``grad``: no copied modules), and the target w* is
w^{t+s} (s = ``segment`` = 5) averaged with ``target_average`` = 2 checkpoints drawn between w^t and w^{t+s}
(Sec. 6: "the target checkpoint is averaged with 2 checkpoints sampled between"). X starts as Gaussian noise, the
label logits y at zero (equal probabilities over all labels, Sec. 4.1); X is learned by Adam at ``data_lr`` =
5e-2 (the paper) and y by Adam at ``label_lr`` = 1e-2 (the paper names one rate; the authors' code uses these
two), for ``iterations`` = N outer steps (paper: 1000). |D_syn| = ``per_class`` × classes (150 on 10 classes).
d (``distance``): "euclidean", ||w̃ − w*||² / ||w^t − w*||² over all parameters (the normalised trajectory
matching loss the authors' code optimises), or "cosine", 1 − cos(w̃ − w^t, w* − w^t) (the distance Fig. 6 plots).
The inner step size α starts at ``inner_lr`` and is itself learned by Adam at ``inner_lr_lr`` (the authors'
code: the paper's "inner lr 1e-5" is the learning rate of a learnable step size that starts at 0.04; 0 keeps α
fixed). ``augment = "dsa"`` (the default) applies the code's differentiable siamese augmentation
(:mod:`fl.augment`, strategy ``dsa_strategy``, one group per call) to X in every inner step and in every
fine-tuning step; "none" turns it off.

From round L+1 on (Algorithm 2; the code also fine-tunes in round L itself), after every aggregation, the server
fine-tunes the global model on D_syn (Algorithm 2 line 12) with ``finetune_steps`` full-batch steps of
``finetune_optimizer`` at ``finetune_lr`` on the soft labels softmax(y). The paper gives none of the three; we
take the authors' code's: 20 epochs of Adam at 1e-4 with batches of 256, i.e. 20 full-batch steps on 150 images
(a fresh Adam each round).

How the unroll and its backward are computed (:class:`MatchingPath`, environment variable ``SHUFFLEFL_MATCHING``)
does not change the numbers beyond rounding: the reference path (:func:`unroll`: ``torch.func.grad`` through
``functional_call``) and the fast path (:class:`FastUnroll`: the model's layers as functions, an instance norm
with hand-written first and second derivatives, ``torch.autograd.grad``; on CUDA also TF32, channels-last and one
CUDA graph per inner step) give the same D_syn to 1e-10 in float64 (tests/fl/methods/test_dynafed_fast.py). The
batched path (``SHUFFLEFL_MATCHING=batched``: :func:`unroll_many`, the reference unroll vmapped over runs) lets a
fleet compute the syntheses of several runs as one (:func:`synthesize_together`), each run's D_syn that of its
synthesis alone to float64 rounding (tests/fl/test_fleet.py).

The synthesis log (seconds, matching loss every ``log_every`` iterations, the learned α, the matching path) lands in
the metrics row of round L; the run folder gets ``dynafed_dsyn.png`` (D_syn with each image's most likely soft label
and its probability). The estimators' δ² compares ∇f of the real clients with ∇ of the soft-label loss on D_syn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fl.augment import DSA_STRATEGY, dsa, strategy_groups
from fl.batched import FLEET
from fl.estimators import soft_cross_entropy
from fl.methods.base import WORK_FOLDER, Method, Picture, ServerRound, require
from fl.precision import PRECISIONS, arithmetic, cuda_tf32
from fl.torchfiles import load_safely
from theory.errors import InputError
from theory.output import replace_durably

DISTANCES = ("cosine", "euclidean")
OPTIMISERS = ("sgd", "adam")
AUGMENTS = ("dsa", "none")
TARGET_DRAWS = ("paper", "code")


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


def match_loss(
    model, named, trajectory, inputs, label_logits, lr, t: int, middle, steps: int, kind: str,
    augment: Callable | None = None, class_mean: bool = False, fast: FastUnroll | None = None,
) -> torch.Tensor:  # fmt: skip
    """The matching loss of one segment: start w^t, target the mean of w^{t+m} for m in ``middle``; the unroll by
    ``fast`` (:meth:`FastUnroll.unroll`) or, without it, by the reference :func:`unroll`."""
    start = trajectory[t]
    target = match_target(trajectory, t, middle)
    if fast is None:
        end = unroll(model, named, start, inputs, label_logits, steps, lr, augment, class_mean)
    else:
        end = fast.unroll(start, inputs, label_logits, steps, lr, augment, class_mean)
    return distance(end, start, target, kind)


# -- The fast matching path --------------------------------------------------------------------------------------
#
# Profiled on the CPU (ConvNet-3 of width 32, 150 images, s' = 20, float32), the reference path spends ~37% of an
# outer iteration in the instance norm's first and second derivatives, which autograd composes from ~85 elementwise
# operations per norm and inner step, ~15% in torch's CPU average pool (4x slower on NCHW than two sums of
# neighbours), and issues ~17,900 operations per outer iteration. On a GPU each is a kernel launch, and the H200's
# 3-4 TFLOP/s (issue 38) point to launches and memory traffic, not arithmetic, as the limit: with the instance norm
# of :func:`instance_norm` (derivatives written out, ~8 passes over the activations each) the fast path issues
# ~10,000 and writes ~30% fewer bytes, and on CUDA one graph per inner step replays them without Python. On the
# CPU, where the convolutions dominate, the whole gains 6-10% (benchmarks/synthesis_bench.py at width 32).

MATCHING_ENV = "SHUFFLEFL_MATCHING"
SWITCHES = ("instance_norm", "tf32", "channels_last", "graphs")
CUDA_SWITCHES = SWITCHES[1:]


@dataclass(frozen=True)
class MatchingPath:
    """How the matching unroll A(X, y, w^t, s') and its backward run. ``fast`` False: the reference path
    (:func:`unroll`). ``fast``: :class:`FastUnroll` (on the CPU with the pool of :func:`average_pool`), and

    - instance_norm: the instance norm of :func:`instance_norm` (derivatives written out: ~40% fewer operations in
      an outer iteration, ~30% fewer bytes written) instead of ``F.group_norm`` (on the CPU, at width 32, as fast
      or up to 5% faster);
    - tf32 (CUDA, float32): convolutions and matrix products in TF32 (torch's default already runs cuDNN's
      convolutions in TF32, the reference path's included; this adds the head's matrix product and pins it);
    - channels_last (CUDA): images and convolution weights in NHWC (cuDNN's tensor-core kernels need no
      transposes);
    - graphs (CUDA): each inner step, forward and backward, captured once as a CUDA graph (the unroll has fixed
      shapes; DSA's draws stay outside, in the eager code between the steps) and replayed; checked once against
      the eager steps, and dropped (with a note in the synthesis log) when capture fails or the two disagree.

    ``batched``: the reference unroll vmapped over runs (:func:`unroll_many`), so that in a fleet the syntheses of
    several runs (seeds) are one computation (:func:`synthesize_together`; alone, one run in it).

    ``SHUFFLEFL_MATCHING`` picks it: "auto" (or unset: the fast path with every switch that :meth:`on` keeps for
    the device), "reference", "batched", or "fast" followed by the switches wanted, joined by "+" ("fast",
    "fast+instance_norm+graphs"); a CUDA switch does nothing off CUDA."""

    fast: bool = True
    instance_norm: bool = True
    tf32: bool = True
    channels_last: bool = True
    graphs: bool = True
    batched: bool = False

    @classmethod
    def parse(cls, text: str) -> MatchingPath:
        """The path a ``SHUFFLEFL_MATCHING`` value names (see the class docstring)."""
        text = text.strip()
        if text in ("", "auto"):
            return cls()
        if text in ("reference", "batched"):
            return cls(False, False, False, False, False, text == "batched")
        head, *switches = text.split("+")
        unknown = [s for s in switches if s not in SWITCHES]
        if head != "fast" or unknown or len(set(switches)) != len(switches):
            raise InputError(
                f"{MATCHING_ENV}={text!r}: must be auto, reference, batched, or fast followed by +switches from "
                f"{', '.join(SWITCHES)} (e.g. fast+instance_norm+graphs)"
            )
        return cls(True, *(s in switches for s in SWITCHES))

    @classmethod
    def from_environment(cls) -> MatchingPath:
        return cls.parse(os.environ.get(MATCHING_ENV, "auto"))

    def on(self, device: torch.device | str, dtype: torch.dtype, precision: str = "auto") -> MatchingPath:
        """The switches that apply on ``device`` in ``dtype`` with the method's ``precision``: no CUDA switch off
        CUDA (a CPU run's numbers do not depend on what a GPU would have used), TF32 only in float32 and only where
        the precision is the device's own ("auto"; otherwise :func:`fl.precision.arithmetic` decides it), no CUDA
        graph under BF16 autocast (its casts are not captured)."""
        if not self.fast:
            return MatchingPath.parse("batched" if self.batched else "reference")
        cuda = torch.device(device).type == "cuda"
        tf32 = cuda and self.tf32 and dtype == torch.float32 and precision == "auto"
        graphs = cuda and self.graphs and precision != "bf16"
        return MatchingPath(True, self.instance_norm, tf32, cuda and self.channels_last, graphs)

    def describe(self) -> str:
        if not self.fast:
            return "batched" if self.batched else "reference"
        return "+".join(["fast", *(s for s in SWITCHES if getattr(self, s))])


def _mean_hw(a: torch.Tensor) -> torch.Tensor:
    return a.mean((2, 3), keepdim=True)


def _dot_hw(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """mean over H, W of a·b, per (n, c)."""
    return (a * b).mean((2, 3), keepdim=True)


class _InstanceNormGrad(torch.autograd.Function):
    """The first derivative of the instance norm as a function of (g, x, γ), with its own derivative written out.

    Per image and channel, over its M = H·W values: x̂ = (x − mean x)·r, r = (var x + eps)^(-1/2), y = γ x̂ + β.
    With a = mean(g), b = mean(g x̂) and P v = v − mean(v) − x̂ mean(v x̂) (symmetric; x̂'s Jacobian is r P):

        dx = γ r P g,  dγ = Σ M b,  dβ = Σ M a.

    For cotangents (u, p, q) of (dx, dγ, dβ), with c = mean(u P g) and e = mean(u x̂):

        ∂/∂g = q + p x̂ + γ r P u
        ∂/∂x = p r P g − γ r² (c x̂ + e P g + b P u)
        ∂/∂γ = Σ r M c

    (∂/∂x takes the total derivative through r and x̂; tested against autograd's own second derivative of
    ``F.group_norm`` and by ``gradgradcheck``). x̂ and r arrive as saved values; x only links the graph."""

    @staticmethod
    def forward(ctx, g, x, weight, x_hat, rstd):
        m = x.shape[2] * x.shape[3]
        a, b = _mean_hw(g), _dot_hw(g, x_hat)
        pg = torch.addcmul(g - a, x_hat, b, value=-1)
        ctx.save_for_backward(weight, x_hat, rstd, pg, b)
        return pg * (weight.view(1, -1, 1, 1) * rstd), b.sum(0).flatten() * m, a.sum(0).flatten() * m

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, u, p, q):
        weight, x_hat, rstd, pg, b = ctx.saved_tensors
        m = x_hat.shape[2] * x_hat.shape[3]
        u_mean, e, c = _mean_hw(u), _dot_hw(u, x_hat), _dot_hw(u, pg)
        gr = weight.view(1, -1, 1, 1) * rstd
        p, q = p.view(1, -1, 1, 1), q.view(1, -1, 1, 1)
        grad_g = torch.addcmul(torch.addcmul(q - gr * u_mean, u, gr), x_hat, p - gr * e)
        gr2 = gr * rstd  # ∂/∂x = (p r − γr² e) Pg + γr² (b e − c) x̂ − γr² b u + γr² b mean(u)
        grad_x = torch.addcmul(gr2 * b * u_mean, pg, p * rstd - gr2 * e)
        grad_x = torch.addcmul(torch.addcmul(grad_x, x_hat, gr2 * (b * e - c)), u, -gr2 * b)
        return grad_g, grad_x, (rstd * c).sum(0).flatten() * m, None, None


class _InstanceNorm(torch.autograd.Function):
    """``F.group_norm`` with one group per channel (ConvNet-3's instance norm), twice differentiable through
    :class:`_InstanceNormGrad`."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        centred = x - _mean_hw(x)
        rstd = torch.rsqrt(_dot_hw(centred, centred) + eps)
        x_hat = centred * rstd
        ctx.save_for_backward(x, weight, x_hat, rstd)
        return torch.addcmul(bias.view(1, -1, 1, 1), x_hat, weight.view(1, -1, 1, 1))

    @staticmethod
    def backward(ctx, grad):
        x, weight, x_hat, rstd = ctx.saved_tensors
        return (*_InstanceNormGrad.apply(grad, x, weight, x_hat, rstd), None)


def instance_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """F.group_norm(x, C, weight, bias, eps) with cheaper first and second derivatives (:class:`_InstanceNormGrad`)."""
    return _InstanceNorm.apply(x, weight, bias, eps)


def _pool_pairs(x: torch.Tensor) -> torch.Tensor:
    """2×2 mean of the even part of x (n, c, h, w), as two sums of neighbours."""
    h, w = x.shape[2:]
    rows = x[:, :, : h - h % 2].unflatten(2, (h // 2, 2))
    rows = rows[:, :, :, 0] + rows[:, :, :, 1]
    cols = rows[:, :, :, : w - w % 2].unflatten(3, (w // 2, 2))
    return (cols[..., 0] + cols[..., 1]) * 0.25


def _unpool_pairs(g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The adjoint of :func:`_pool_pairs`: g/4 on each 2×2 block, zeros on a dropped odd row or column."""
    n, c, h, w = g.shape
    quarter = (g * 0.25).unsqueeze(-1).expand(n, c, h, w, 2).reshape(n, c, h, 2 * w)
    out = quarter.unsqueeze(3).expand(n, c, h, 2, 2 * w).reshape(n, c, 2 * h, 2 * w)
    return F.pad(out, (0, shape[3] - 2 * w, 0, shape[2] - 2 * h)) if tuple(shape[2:]) != (2 * h, 2 * w) else out


class _AveragePool(torch.autograd.Function):
    """``F.avg_pool2d(x, 2)`` on the CPU, where torch's kernel on NCHW tensors takes ~4× the time of two sums of
    neighbours (and its backward ~2× that of the broadcast below); linear, so every derivative is one of the two."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return _pool_pairs(x)

    @staticmethod
    def backward(ctx, grad):
        return _AverageUnpool.apply(grad, ctx.shape)


class _AverageUnpool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad, shape):
        return _unpool_pairs(grad, shape)

    @staticmethod
    def backward(ctx, grad):
        return _AveragePool.apply(grad), None


def average_pool(x: torch.Tensor, module: nn.AvgPool2d) -> torch.Tensor:
    """``module(x)``; a 2×2 pool of stride 2 on a CPU tensor by :class:`_AveragePool`."""
    m = module
    plain = m.kernel_size in (2, (2, 2)) and m.stride in (2, (2, 2)) and m.padding in (0, (0, 0))
    if plain and not m.ceil_mode and m.divisor_override is None and x.device.type == "cpu" and x.dim() == 4:
        return _AveragePool.apply(x)
    return F.avg_pool2d(x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, m.divisor_override)


def _layer(module: nn.Module, norm: bool) -> Callable | None:
    """``module``'s forward as f(h, params) on its parameters (a dict: weight, bias), or None where unknown;
    ``norm``: a GroupNorm of one group per channel by :func:`instance_norm`."""
    m = module
    if isinstance(m, nn.Conv2d) and m.padding_mode == "zeros" and isinstance(m.padding, tuple):
        return lambda h, p: F.conv2d(h, p["weight"], p.get("bias"), m.stride, m.padding, m.dilation, m.groups)
    if isinstance(m, nn.GroupNorm) and m.affine:
        if norm and m.num_groups == m.num_channels:
            return lambda h, p: instance_norm(h, p["weight"], p["bias"], m.eps)
        return lambda h, p: F.group_norm(h, m.num_groups, p["weight"], p["bias"], m.eps)
    if isinstance(m, nn.Linear):
        return lambda h, p: F.linear(h, p["weight"], p.get("bias"))
    simple = {
        nn.ReLU: lambda h, p: F.relu(h),
        nn.Tanh: lambda h, p: torch.tanh(h),
        nn.Flatten: lambda h, p: h.flatten(m.start_dim, m.end_dim),
        nn.AvgPool2d: lambda h, p: average_pool(h, m),
        nn.MaxPool2d: lambda h, p: F.max_pool2d(h, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode),
    }
    return simple.get(type(m))


def functional_layers(
    model: nn.Module, names: list[str], norm: bool = True
) -> list[tuple[str, Callable, list[str], bool]] | None:
    """The model as a list of (prefix, f(h, params), its parameters' names, is a convolution) when it is
    ``head(body(h))`` with ``body`` an ``nn.Sequential`` of known layers and ``head`` one (or a Sequential of them)
    and these layers own exactly the parameters ``names``; else None (the fast path then calls the module through
    ``functional_call``). Whether ``forward`` really is head(body(h)) is checked on numbers at the first unroll."""
    body, head = getattr(model, "body", None), getattr(model, "head", None)
    if not isinstance(body, nn.Sequential) or not isinstance(head, nn.Module):
        return None
    parts = [(f"body.{k}", m) for k, m in body.named_children()]
    heads = [(f"head.{k}", m) for k, m in head.named_children()] if isinstance(head, nn.Sequential) else []
    heads = heads or [("head", head)]
    layers = [
        (p, _layer(m, norm), [n for n, _ in m.named_parameters()], isinstance(m, nn.Conv2d)) for p, m in parts + heads
    ]
    owned = [f"{prefix}.{n}" for prefix, _, own, _ in layers for n in own]
    if any(f is None for _, f, _, _ in layers) or sorted(owned) != sorted(names):
        return None
    return layers


class FastUnroll:
    """A(X, y, w^t, s') of :func:`unroll` with the same numbers, faster (:class:`MatchingPath`): the model as
    functions of views of w (``w.split``: one node in the graph, not one slice per parameter), the instance norm of
    :func:`instance_norm`, softmax(y) once per unroll, ``torch.autograd.grad(create_graph=True)`` instead of
    ``torch.func.grad``; on CUDA the switches of ``path``. ``notes``: what was switched off on the way, and why."""

    # Relative differences that still count as "the same": float64 differs by rounding alone; in float32 (TF32 on
    # CUDA) other kernels differ by ~1e-3 in a forward pass, and the unroll amplifies rounding (measured on the CPU:
    # float32 is 2e-3 from float64 in the gradient in X). A wrong layer or graph is off by O(1).
    LAYER_TOLERANCE: ClassVar[dict] = {torch.float64: 1e-9, torch.float32: 2e-2}
    GRAPH_TOLERANCE: ClassVar[dict] = {torch.float64: 1e-9, torch.float32: 5e-2}

    def __init__(self, model: nn.Module, layout: list[tuple[str, torch.Size]], path: MatchingPath) -> None:
        self.model, self.path, self.notes = model, path, []
        self.names = [name for name, _ in layout]
        self.shapes = [shape for _, shape in layout]
        self.sizes = [shape.numel() for shape in self.shapes]
        self.layers = functional_layers(model, self.names, path.instance_norm)
        self.checked_layers = False
        self.graphs: list[Callable] | None = None
        self.graph_key: tuple | None = None

    def describe(self) -> str:
        text = self.path.describe() + ("" if self.layers is not None else " (functional_call)")
        return text + "".join(f"; {note}" for note in self.notes)

    def named(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: part.view(shape) for n, part, shape in zip(self.names, w.split(self.sizes), self.shapes)}

    def forward(self, w: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        named = self.named(w)
        if self.layers is None:
            return functional_call(self.model, named, (batch,))
        cl = self.path.channels_last and batch.dim() == 4
        h = batch.contiguous(memory_format=torch.channels_last) if cl else batch
        for prefix, layer, own, conv in self.layers:
            params = {n: named[f"{prefix}.{n}"] for n in own}
            if conv and cl:
                params["weight"] = params["weight"].contiguous(memory_format=torch.channels_last)
            h = layer(h, params)
        return h

    def step(self, w, batch, probabilities, lr, class_mean: bool) -> torch.Tensor:
        """One inner step w − α ∇_w CE(w; batch, probabilities), differentiable in all four."""
        if not w.requires_grad:  # w^t itself: the first step differentiates at a leaf
            w = w.detach().requires_grad_(True)
        loss = label_loss(self.forward(w, batch), probabilities, class_mean)
        (gradient,) = torch.autograd.grad(loss, w, create_graph=True)
        return w - lr * gradient

    def check_layers(self, w: torch.Tensor, batch: torch.Tensor) -> None:
        """Once: the layers reproduce the module's forward (else fall back to ``functional_call``)."""
        self.checked_layers = True
        if self.layers is None:
            return
        with torch.no_grad():
            mine = self.forward(w, batch)
            theirs = functional_call(self.model, self.named(w), (batch,))
        error = relative_error(mine, theirs)
        if not error <= self.LAYER_TOLERANCE.get(w.dtype, 2e-2):
            self.layers = None
            self.notes.append(f"layers differ from the module's forward ({error:.1e}): functional_call")

    def unroll(self, start, inputs, label_logits, steps: int, lr, augment: Callable | None = None,
               class_mean: bool = False) -> torch.Tensor:  # fmt: skip
        """A(X, y, w^t, s') from ``start`` (see :func:`unroll`)."""
        with cuda_tf32(True) if self.path.tf32 else contextlib.nullcontext():
            if not self.checked_layers:
                self.check_layers(start, inputs)
            if self.path.graphs:
                self.prepare_graphs(start, inputs, label_logits, steps, lr, class_mean)
            probabilities = F.softmax(label_logits, 1)
            w = start
            for k in range(steps):
                batch = inputs if augment is None else augment(inputs)
                if self.graphs is not None:
                    w = self.graphs[k](w, batch, probabilities, lr)
                else:
                    w = self.step(w, batch, probabilities, lr, class_mean)
            return w

    def prepare_graphs(self, start, inputs, label_logits, steps: int, lr, class_mean: bool) -> None:
        """Capture one CUDA graph per inner step (``torch.cuda.make_graphed_callables``: forwards in order,
        backwards in reverse, one memory pool), once per shape and gradient pattern; check them against the eager
        steps on copies of the inputs (no augmentation, so no random draw is taken from the synthesis); on failure
        or disagreement switch graphs off for good, with a note."""
        key = (steps, class_mean, inputs.shape, inputs.dtype, label_logits.requires_grad, lr.requires_grad)
        if self.graph_key == key:
            return
        self.graph_key, self.graphs = key, None
        try:
            graphs = self.capture(start, inputs, label_logits, steps, lr, class_mean)
            error = self.compare_graphs(graphs, start, inputs, label_logits, steps, lr, class_mean)
        except Exception as failure:  # any capture failure: the eager steps are always right
            self.path = dataclasses.replace(self.path, graphs=False)
            self.notes.append(f"graphs off: capture failed ({type(failure).__name__}: {str(failure)[:120]})")
            return
        if not error <= self.GRAPH_TOLERANCE.get(inputs.dtype, 5e-2):
            self.path = dataclasses.replace(self.path, graphs=False)
            self.notes.append(f"graphs off: they differ from the eager steps by {error:.1e}")
            return
        self.graphs = graphs

    def capture(self, start, inputs, label_logits, steps: int, lr, class_mean: bool) -> list[Callable]:
        def sample(tensor: torch.Tensor, requires_grad: bool) -> torch.Tensor:
            return tensor.detach().clone().requires_grad_(requires_grad)

        probabilities = F.softmax(label_logits.detach(), 1)
        callables, samples = [], []
        for k in range(steps):
            callables.append(lambda w, b, p, a: self.step(w, b, p, a, class_mean))
            samples.append((
                sample(start, k > 0), sample(inputs, inputs.requires_grad),
                sample(probabilities, label_logits.requires_grad), sample(lr, lr.requires_grad),
            ))  # fmt: skip
        torch.cuda.synchronize()
        graphs = torch.cuda.make_graphed_callables(tuple(callables), tuple(samples), allow_unused_input=True)
        return list(graphs)

    def compare_graphs(self, graphs, start, inputs, label_logits, steps: int, lr, class_mean: bool) -> float:
        """The largest relative difference, graphed against eager, of w_end and of the gradients of Σ w_end in
        X, y and α, on copies of the inputs."""
        results = []
        for use in (graphs, None):
            x, y, a = (t.detach().clone().requires_grad_(t.requires_grad) for t in (inputs, label_logits, lr))
            probabilities = F.softmax(y, 1)
            w = start
            for k in range(steps):
                w = use[k](w, x, probabilities, a) if use else self.step(w, x, probabilities, a, class_mean)
            wanted = [v for v in (x, y, a) if v.requires_grad]
            results.append([w.detach().clone(), *torch.autograd.grad(w.sum(), wanted)])
        return max(relative_error(g, e) for g, e in zip(*results))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a − b|| / ||b|| (∞ when not finite; ||a − b|| where b = 0)."""
    difference = float((a.detach() - b.detach()).norm())
    scale = float(b.detach().norm())
    error = difference / scale if scale > 0 else difference
    return error if math.isfinite(error) else math.inf


class Progress:
    """The synthesis in progress, kept in ``folder/dynafed_synthesis.pt`` (the run folder, :data:`WORK_FOLDER`)
    every ``save_every`` iterations: D_syn, the label logits, α, both Adam states, the segment draws' and DSA's
    generator states, the losses and the seconds so far. An interrupted run recomputes the round and continues the
    synthesis from there, bit for bit as without the interruption; the file only counts for the same trajectory,
    settings and seed (its ``key``). No folder (tests, Flower): nothing is kept."""

    FILE = "dynafed_synthesis.pt"

    def __init__(self, folder: Path | None, method: DynaFed, trajectory: torch.Tensor, seed: int) -> None:
        self.path = None if folder is None else folder / self.FILE
        digest = hashlib.sha256(trajectory.detach().cpu().double().numpy().tobytes())
        shaping = repr((dataclasses.replace(method, save_every=1), seed))  # what shapes the numbers
        if method.precision == "auto":  # as before the setting existed: a synthesis saved then still resumes
            shaping = shaping.replace(", precision='auto'", "")
        digest.update(shaping.encode())
        self.key = digest.hexdigest()

    def restore(self, inputs, label_logits, lr, optimiser, lr_optimiser, draws, generator) -> tuple[int, list, float]:
        """Load a matching saved synthesis into the given tensors, optimisers and generators; (the next iteration,
        the losses, the seconds so far): (0, [], 0.0) when there is none."""
        if self.path is None or not self.path.exists():
            return 0, [], 0.0
        saved = load_safely(self.path, "saved DynaFed synthesis", "delete it to synthesise anew", inputs.device)
        if not isinstance(saved, dict) or saved.get("key") != self.key:
            return 0, [], 0.0
        with torch.no_grad():
            for tensor, name in ((inputs, "inputs"), (label_logits, "label_logits"), (lr, "lr")):
                tensor.copy_(saved[name])
        optimiser.load_state_dict(saved["optimiser"])
        if lr_optimiser is not None:
            lr_optimiser.load_state_dict(saved["lr_optimiser"])
        draws.bit_generator.state = saved["draws"]
        generator.set_state(saved["generator"])
        return saved["iteration"], saved["losses"], saved["seconds"]

    def save(self, iteration, inputs, label_logits, lr, optimiser, lr_optimiser, draws, generator, losses, seconds):
        if self.path is None:
            return
        payload = {
            "key": self.key, "iteration": iteration, "inputs": inputs.detach().cpu(),
            "label_logits": label_logits.detach().cpu(), "lr": lr.detach().cpu(), "optimiser": optimiser.state_dict(),
            "lr_optimiser": None if lr_optimiser is None else lr_optimiser.state_dict(),
            "draws": draws.bit_generator.state, "generator": generator.get_state(), "losses": losses,
            "seconds": seconds,
        }  # fmt: skip
        replace_durably(self.path, lambda tmp: torch.save(payload, tmp))


class Synthesis:
    """One run's synthesis (Algorithm 1) in progress: D_syn's images X and label logits y, the inner step size α,
    their Adam optimisers, the segment draws and DSA's generator (the round's), continued from its saved progress
    (:class:`Progress`, in the run folder of :data:`WORK_FOLDER` when it was made)."""

    def __init__(self, method: DynaFed, s: ServerRound, path: MatchingPath | None = None) -> None:
        server, flat, device, dtype = s.state["server"], s.flat, s.x.device, s.x.dtype
        self.method, self.flat, self.together_with = method, flat, 1
        self.trajectory = trajectory = server.pop("trajectory").to(device)
        n_classes, shape = s.data.n_classes, tuple(s.data.x.shape[1:])
        n = method.per_class * n_classes
        self.inputs = torch.randn((n, *shape), generator=s.generator, dtype=dtype).to(device).requires_grad_(True)
        self.label_logits = torch.zeros(n, n_classes, dtype=dtype, device=device, requires_grad=method.label_lr > 0)
        self.lr = torch.tensor(method.inner_lr, dtype=dtype, device=device, requires_grad=method.inner_lr_lr > 0)
        groups = [{"params": [self.inputs], "lr": method.data_lr}]
        groups += [{"params": [self.label_logits], "lr": method.label_lr}] if method.label_lr > 0 else []
        self.optimiser = torch.optim.Adam(groups)
        self.lr_optimiser = torch.optim.Adam([self.lr], lr=method.inner_lr_lr) if method.inner_lr_lr > 0 else None
        self.draws, self.generator = np.random.default_rng(s.seed), s.generator
        self.augment = method.augmenter(s.generator, shape)
        flat.model.eval()
        self.path = (path or MatchingPath.from_environment()).on(device, dtype, method.precision)
        self.device = device
        self.fast = FastUnroll(flat.model, flat.layout, self.path) if self.path.fast else None
        self.learned = [v for v in (self.inputs, self.label_logits, self.lr) if v.requires_grad]
        self.progress = Progress(WORK_FOLDER.get(), method, trajectory, s.seed)
        self.first, self.losses, earlier = self.progress.restore(*self._state()[:-2], self.draws, s.generator)
        self.start = time.perf_counter() - earlier

    def _state(self) -> tuple:
        return self.inputs, self.label_logits, self.lr, self.optimiser, self.lr_optimiser, self.draws, self.generator

    def key(self) -> tuple:
        """What must agree for syntheses to be computed as one: the method's settings, the model, the shapes,
        dtype and device, and the iteration they continue from."""
        shapes = tuple((name, tuple(shape)) for name, shape in self.flat.layout)
        return ("dynafed", self.method, repr(self.flat.model), shapes, tuple(self.inputs.shape), self.inputs.dtype,
                self.inputs.device, tuple(self.trajectory.shape), self.first)  # fmt: skip

    def run(self) -> None:
        """The synthesis alone, from its first iteration to the last."""
        for n_iter in range(self.first, self.method.iterations):
            self.iterate(n_iter)

    def iterate(self, n_iter: int) -> torch.Tensor:
        """Outer iteration ``n_iter`` alone: a segment, the matching loss, its backward and the updates; the loss."""
        method = self.method
        t, middle = method.draw_segment(self.draws, len(self.trajectory))  # w^t, t+s in the trajectory (0-based)
        self.zero_grad()
        with self.arithmetic():
            loss = match_loss(
                self.flat.model, self.flat.named, self.trajectory, self.inputs, self.label_logits, self.lr, t, middle,
                method.inner_steps, method.distance, self.augment, method.class_mean, self.fast,
            )  # fmt: skip
            loss.backward(inputs=self.learned)  # only these: the fast path's first inner step differentiates at a leaf
        self.advance(n_iter, loss)
        return loss.detach()

    def arithmetic(self) -> contextlib.AbstractContextManager:
        """The precision the matching runs in (``method.precision``; "auto": the device's own settings)."""
        if self.method.precision == "auto":
            return contextlib.nullcontext()
        return arithmetic(self.method.precision, self.device)

    def zero_grad(self) -> None:
        self.optimiser.zero_grad()
        if self.lr_optimiser is not None:
            self.lr_optimiser.zero_grad()

    def advance(self, n_iter: int, loss: torch.Tensor) -> None:
        """Iteration ``n_iter``'s update from the gradients of its matching ``loss``, its log and saved progress."""
        method = self.method
        self.optimiser.step()
        if self.lr_optimiser is not None:
            self.lr_optimiser.step()
            with torch.no_grad():
                self.lr.clamp_(min=1e-8)
        if n_iter % method.log_every == 0 or n_iter == method.iterations - 1:
            self.losses.append([n_iter, float(loss.detach())])
        if (n_iter + 1) % method.save_every == 0 or n_iter + 1 == method.iterations:
            self.progress.save(n_iter + 1, *self._state(), self.losses, time.perf_counter() - self.start)

    def release(self) -> None:
        """Drop what only the synthesis needed: the fast path's CUDA graphs (each holds a private memory pool, ~10
        GiB at the paper's settings) and both Adam states. D_syn, its labels and α stay (:meth:`finish` keeps
        them). :func:`return_memory` then gives the freed blocks back to the device."""
        if self.fast is not None:
            self.fast.graphs, self.fast.graph_key = None, None
        self.optimiser = self.lr_optimiser = None

    def finish(self, s: ServerRound) -> None:
        """D_syn, its labels and α into the server state; the synthesis log into the round's."""
        server = s.state["server"]
        server["x_syn"] = self.inputs.detach()
        server["y_syn"] = self.label_logits.detach()
        server["alpha"] = self.lr.detach().clone()
        path = self.path.describe() if self.fast is None else self.fast.describe()
        if self.path.batched:
            path += f" ({self.together_with} run{'s' * (self.together_with > 1)})"
        path += "" if self.method.precision == "auto" else f"; {self.method.precision}"
        s.log["synthesis"] = {
            "seconds": time.perf_counter() - self.start, "loss": self.losses, "alpha": float(self.lr.detach()),
            "path": path,
        }  # fmt: skip


def return_memory(device: torch.device) -> None:
    """After a synthesis: collect what it left in reference cycles (a graphed step's closures refer back to their
    :class:`FastUnroll`) and, on CUDA, hand the caching allocator's free blocks back to the device, so that a run's
    later rounds, the syntheses after it in a process and the other processes on the chip find the memory free (the
    lease's scheduler admits by the device's free memory). Three fast syntheses alive in one process reserved 43.4
    GiB on the H100, one 21.7 (results/ledger/bench/2026-11-27-h100)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


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


def synthesize_together(jobs: list[Synthesis]) -> list[None]:
    """Several runs' syntheses (equal :meth:`Synthesis.key`: settings and shapes, seeds apart) as one computation:
    every iteration one :func:`unroll_many` over the runs, each with its own segment draws, DSA draws, Adam states,
    log and progress file. A run's D_syn equals its synthesis alone to rounding (float64 on the CPU: ~1e-12,
    tested), not bit for bit: the grouped convolutions sum in another order."""
    for job in jobs:
        job.together_with = len(jobs)
    for n_iter in range(jobs[0].first, jobs[0].method.iterations):
        iterate_together(jobs, n_iter)
    return [None] * len(jobs)


def iterate_together(jobs: list[Synthesis], n_iter: int) -> torch.Tensor:
    """Outer iteration ``n_iter`` of every job in one :func:`unroll_many`; their losses (R,)."""
    method, flat = jobs[0].method, jobs[0].flat
    segments = [job.method.draw_segment(job.draws, len(job.trajectory)) for job in jobs]
    for job in jobs:
        job.zero_grad()
    starts = torch.stack([job.trajectory[t] for job, (t, _) in zip(jobs, segments)])
    targets = torch.stack([match_target(job.trajectory, t, middle) for job, (t, middle) in zip(jobs, segments)])
    inputs, label_logits, lr = (
        torch.stack([getattr(job, k) for job in jobs]) for k in ("inputs", "label_logits", "lr")
    )
    with jobs[0].arithmetic():
        ends = unroll_many(flat.model, flat.named, starts, inputs, label_logits, method.inner_steps, lr,
                           [job.augment for job in jobs], method.class_mean)  # fmt: skip
        losses = torch.stack([distance(end, a, b, method.distance) for end, a, b in zip(ends, starts, targets)])
        losses.sum().backward(inputs=[v for job in jobs for v in job.learned])
    for job, loss in zip(jobs, losses):
        job.advance(n_iter, loss)
    return losses.detach()


@dataclass(frozen=True)
class DynaFed(Method):
    """trajectory_rounds: L (20). segment: s (5). inner_steps: s' (not given; 20). per_class: D_syn images per
    class (15: 150 on 10 classes). iterations: N outer steps (1000). data_lr: Adam lr for X and y (5e-2).
    label_lr: Adam lr for the label logits y (1e-2, the authors' code). inner_lr / inner_lr_lr: the learnable
    inner step size α and its Adam lr (0.04 / 1e-5, the authors' code). distance: "euclidean" or "cosine".
    target_average: checkpoints between w^t and w^{t+s} averaged into the target (2). finetune_steps /
    finetune_lr / finetune_optimizer: the server's fine-tuning after each aggregation from round L+1 (20 / 1e-4 /
    "adam", the authors' code; the paper leaves them open). log_every: iterations between logged matching
    losses. save_every: iterations between saves of the synthesis in progress (:class:`Progress`; the numbers do not
    depend on it). precision: the arithmetic of the matching's products and convolutions (:mod:`fl.precision`):
    "auto" (the device's: float32 on the CPU; on CUDA, TF32 on the fast path and cuDNN's default, TF32 convolutions,
    on the others), or "fp32", "tf32" (emulated off CUDA) or "bf16" on any device; the server's fine-tuning is not
    affected. augment: "dsa" (each inner step sees its own differentiable augmentation of X, DSA) or "none".
    dsa_strategy: DSA's transformations, joined by "_" (DSA's and DynaFed's default: all six). target_draw: how a
    segment's target is drawn: "paper" (w^{t+s} averaged with ``target_average`` checkpoints between) or "code"
    (2..s checkpoints of w^{t+1..t+s}, with replacement, as the authors' code draws them). initial_checkpoint: the
    trajectory starts with the initial model w^0 (the authors' code) instead of w^1. class_mean: the matching's
    soft-label loss also averaged over the C classes, as the authors' code's ``kd_loss``."""

    name: ClassVar[str] = "dynafed"
    trajectory_rounds: int = 20
    segment: int = 5
    inner_steps: int = 20
    per_class: int = 15
    iterations: int = 1000
    data_lr: float = 0.05
    label_lr: float = 0.01
    inner_lr: float = 0.04
    inner_lr_lr: float = 1e-5
    distance: str = "euclidean"
    target_average: int = 2
    finetune_steps: int = 20
    finetune_lr: float = 1e-4
    finetune_optimizer: str = "adam"
    log_every: int = 10
    save_every: int = 5
    augment: str = "dsa"
    dsa_strategy: str = DSA_STRATEGY
    target_draw: str = "paper"
    initial_checkpoint: bool = False
    class_mean: bool = False
    precision: str = "auto"

    def check(self) -> DynaFed:
        require(self.segment >= 1, "segment", "must be >= 1")
        require(
            self.trajectory_rounds >= self.segment + 1, "trajectory_rounds",
            f"L must be >= segment + 1 = {self.segment + 1} (a segment w^t -> w^(t+s) must fit in the trajectory)",
        )  # fmt: skip
        require(self.per_class >= 1, "per_class", "must be >= 1 (D_syn cannot be empty)")
        require(self.inner_steps >= 1, "inner_steps", "must be >= 1")
        require(self.iterations >= 0, "iterations", "must be >= 0")
        require(self.data_lr > 0, "data_lr", "must be > 0")
        require(self.label_lr >= 0, "label_lr", "must be >= 0 (0: the labels stay uniform)")
        require(self.inner_lr > 0, "inner_lr", "must be > 0")
        require(self.inner_lr_lr >= 0, "inner_lr_lr", "must be >= 0 (0: a fixed inner step size)")
        require(self.distance in DISTANCES, "distance", f"must be one of {', '.join(DISTANCES)}")
        require(self.target_average >= 0, "target_average", "must be >= 0")
        require(self.finetune_steps >= 0, "finetune_steps", "must be >= 0")
        require(self.finetune_lr > 0, "finetune_lr", "must be > 0")
        require(self.finetune_optimizer in OPTIMISERS, "finetune_optimizer", f"must be one of {', '.join(OPTIMISERS)}")
        require(self.log_every >= 1, "log_every", "must be >= 1")
        require(self.save_every >= 1, "save_every", "must be >= 1")
        require(self.augment in AUGMENTS, "augment", f"must be one of {', '.join(AUGMENTS)}")
        try:
            strategy_groups(self.dsa_strategy)
        except ValueError as error:
            require(False, "dsa_strategy", str(error))
        require(self.target_draw in TARGET_DRAWS, "target_draw", f"must be one of {', '.join(TARGET_DRAWS)}")
        require(self.target_draw == "paper" or self.segment >= 2, "segment", "must be >= 2 with target_draw 'code'")
        require(self.precision in ("auto", *PRECISIONS), "precision", f"must be auto or one of {', '.join(PRECISIONS)}")
        return self

    def first_stateful_round(self) -> int:
        return 1  # the trajectory starts with round 1

    def shares_state_with(self, other: Method, next_round: int) -> bool:
        """Before the synthesis the state is the trajectory alone, which the synthesis settings (N, DSA, the target
        draw, ...) do not touch: another DynaFed's with the same trajectory settings is this one's."""
        return (
            isinstance(other, DynaFed)
            and (other.trajectory_rounds, other.initial_checkpoint) == (self.trajectory_rounds, self.initial_checkpoint)
            and next_round <= self.trajectory_rounds
        )

    def client_payload(self, state: dict) -> dict:
        """Nothing: DynaFed's clients train plain FedAvg; its trajectory and D_syn stay on the server."""
        return {}

    def before_round(self, s: ServerRound) -> None:
        if s.t == 1 and self.initial_checkpoint:  # the code's trajectory starts with the initial model w^0
            self.record(s)

    def record(self, s: ServerRound) -> None:
        """Append s.x to the trajectory (replacing the entry: the previous state stays whole). The trajectory lives
        on the CPU; a resumed checkpoint loads it onto the run's device, hence ``previous.cpu()``."""
        server = s.state["server"]
        previous = server.get("trajectory", torch.empty(0, s.x.numel(), dtype=s.x.dtype))
        server["trajectory"] = torch.cat([previous.cpu(), s.x.detach().cpu()[None]])

    def augmenter(self, generator: torch.Generator, shape: tuple[int, ...]) -> Callable | None:
        """DSA with the method's strategy and draws from ``generator`` (None with ``augment = "none"``), for
        images of ``shape`` (C, H, W)."""
        if self.augment == "none":
            return None
        if len(shape) != 3:
            raise InputError(f"method.augment = 'dsa' needs images (C, H, W), not samples of shape {shape}; "
                             "set method.augment = 'none'")  # fmt: skip
        groups = strategy_groups(self.dsa_strategy)
        return lambda batch: dsa(batch, groups, generator)

    def draw_segment(self, draws: np.random.Generator, n_checkpoints: int) -> tuple[int, list[int]]:
        """A start t, uniform over the segments that fit, and the offsets m of the checkpoints averaged into w*."""
        t = int(draws.integers(0, n_checkpoints - self.segment))
        if self.target_draw == "code":  # 2..s checkpoints, with replacement, from w^{t+1..t+s}
            count = int(draws.integers(2, self.segment + 1))
            return t, [int(m) for m in draws.integers(1, self.segment + 1, count)]
        middle = draws.integers(1, self.segment, self.target_average) if self.segment > 1 else []
        return t, [self.segment, *(int(m) for m in middle)]

    def after_aggregate(self, s: ServerRound) -> torch.Tensor:
        if s.t <= self.trajectory_rounds:  # record w^t
            self.record(s)
        if s.t == self.trajectory_rounds:
            self.synthesize(s)
        if s.t > self.trajectory_rounds:
            return self.finetune(s)
        return s.x

    def synthesize(self, s: ServerRound) -> None:
        """Algorithm 1 on the recorded trajectory; keeps D_syn and α, drops the trajectory. On the batched matching
        path (``SHUFFLEFL_MATCHING=batched``) in a fleet (:mod:`fl.fleet`), the syntheses of the runs that reach
        theirs together with equal settings are computed as one (:func:`synthesize_together`)."""
        job = Synthesis(self, s)
        fleet = FLEET.get()
        if job.path.batched and fleet is not None:
            fleet.together(job.key(), job, synthesize_together)
        elif job.path.batched:
            synthesize_together([job])
        else:
            job.run()
        job.finish(s)
        job.release()
        del job
        return_memory(s.x.device)

    def finetune(self, s: ServerRound) -> torch.Tensor:
        """Algorithm 2 line 12: ``finetune_steps`` full-batch steps on CE(w; X, softmax(y)) from the aggregate."""
        inputs, probabilities = self.synthetic_set(s.state)
        flat = s.flat
        w = s.x.detach().clone().requires_grad_(True)
        optimiser_class = torch.optim.SGD if self.finetune_optimizer == "sgd" else torch.optim.Adam
        optimiser = optimiser_class([w], lr=self.finetune_lr)
        augment = self.augmenter(s.generator, tuple(inputs.shape[1:]))
        flat.model.eval()
        for _ in range(self.finetune_steps):
            optimiser.zero_grad()
            batch = inputs if augment is None else augment(inputs)
            label_loss(functional_call(flat.model, flat.named(w), (batch,)), probabilities, self.class_mean).backward()
            optimiser.step()
        return w.detach()

    def synthetic_set(self, state: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        server = state.get("server", {})
        if "x_syn" not in server:
            return None
        return server["x_syn"], F.softmax(server["y_syn"], 1)

    def report(self, info: dict, state: dict) -> dict:
        synthetic = self.synthetic_set(state)
        if synthetic is None:
            return {}
        return {"dsyn_size": len(synthetic[0]), "dsyn_alpha": float(state["server"]["alpha"])}

    def pictures(self, state: dict) -> list[Picture]:
        synthetic = self.synthetic_set(state)
        if synthetic is None:
            return []
        inputs, probabilities = (v.detach().cpu().double().numpy() for v in synthetic)
        return [Picture("dynafed_dsyn.png", inputs, probabilities, "DynaFed D_syn (soft labels)", soft=True)]
