"""DynaFed's fast matching path: the switches that choose how the matching unroll runs (:class:`MatchingPath`,
``method.matching``) and :class:`FastUnroll`, A(X, y, w^t, s') with the reference unroll's numbers
(:func:`fl.methods.dynafed_matching.unroll`) from the model's layers as functions, an instance norm with its first
and second derivatives written out, a cheaper CPU average pool and, on CUDA, TF32, channels-last and one CUDA graph
per inner step."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fl.methods.dynafed_matching import label_loss
from fl.precision import cuda_tf32
from theory.errors import InputError

# -- The fast matching path --------------------------------------------------------------------------------------
# Profiled on the CPU (ConvNet-3 of width 32, 150 images, s' = 20, float32), the reference path spends ~37% of an outer
# iteration in the instance norm's first and second derivatives, which autograd composes from ~85 elementwise operations
# per norm and inner step, ~15% in torch's CPU average pool (4x slower on NCHW than two sums of neighbours), and issues
# ~17,900 operations per outer iteration. On a GPU each is a kernel launch, and the H200's 3-4 TFLOP/s
# (results/ledger/bench) point to launches and memory traffic, not arithmetic, as the limit: with the instance norm of
# :func:`instance_norm` (derivatives written out, ~8 passes over the activations each) the fast path issues ~10,000 and
# writes ~30% fewer bytes, and on CUDA one graph per inner step replays them without Python. On the CPU, where the
# convolutions dominate, the whole gains 6-10% (benchmarks/synthesis_bench.py at width 32).

MATCHING_ENV = "SHUFFLEFL_MATCHING"  # the environment variable that once chose the path: now refused, if set
SWITCHES = ("instance_norm", "tf32", "channels_last", "graphs")
CUDA_SWITCHES = SWITCHES[1:]


@dataclass(frozen=True)
class MatchingPath:
    """How the matching unroll A(X, y, w^t, s') and its backward run. ``fast`` False: the reference path
    (:func:`fl.methods.dynafed_matching.unroll`). ``fast``: :class:`FastUnroll` (on the CPU with the pool of
    :func:`average_pool`), and

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

    ``batched``: the reference unroll vmapped over runs (:func:`fl.methods.dynafed_matching.unroll_many`), so that
    in a fleet the syntheses of several runs (seeds) are one computation
    (:func:`fl.methods.dynafed.synthesize_together`; alone, one run in it).

    The method's key ``matching`` picks it: "auto" (the default: the fast path with every switch that :meth:`on`
    keeps for the device), "reference", "batched", or "fast" followed by the switches wanted, joined by "+" ("fast",
    "fast+instance_norm+graphs"); a CUDA switch does nothing off CUDA."""

    fast: bool = True
    instance_norm: bool = True
    tf32: bool = True
    channels_last: bool = True
    graphs: bool = True
    batched: bool = False

    @classmethod
    def parse(cls, text: str) -> MatchingPath:
        """The path a ``method.matching`` value names (see the class docstring); another value is an InputError
        naming the key (one line)."""
        text = text.strip()
        if text in ("", "auto"):
            return cls()
        if text in ("reference", "batched"):
            return cls(False, False, False, False, False, text == "batched")
        head, *switches = text.split("+")
        unknown = [s for s in switches if s not in SWITCHES]
        if head != "fast" or unknown or len(set(switches)) != len(switches):
            raise InputError(
                f"config method.matching: {text!r} must be auto, reference, batched, or fast followed by +switches "
                f"from {', '.join(SWITCHES)} (e.g. fast+instance_norm+graphs)"
            )
        return cls(True, *(s in switches for s in SWITCHES))

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
    """A(X, y, w^t, s') of :func:`fl.methods.dynafed_matching.unroll` with the same numbers, faster
    (:class:`MatchingPath`): the model as functions of views of w (``w.split``: one node in the graph, not one slice
    per parameter), the instance norm of :func:`instance_norm`, softmax(y) once per unroll,
    ``torch.autograd.grad(create_graph=True)`` instead of ``torch.func.grad``; on CUDA the switches of ``path``.
    ``notes``: what was switched off on the way, and why."""

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
        """A(X, y, w^t, s') from ``start`` (see :func:`fl.methods.dynafed_matching.unroll`)."""
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
