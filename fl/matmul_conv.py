"""Convolutions as matrix products (im2col): a model whose ``nn.Conv2d`` layers compute ``W @ unfold(x)``.

A fleet's batched step (:mod:`fl.batched`) evaluates one model per run and client under ``torch.func.vmap``; vmap
turns a convolution with per-model weights into one grouped convolution (a group per model), which on an H100 ran
at a small fraction of the TF32 peak (results/ledger/bench/2026-11-27-h100). Written as ``unfold`` and a matrix
product, the same step becomes a batched matrix product (``bmm``) over the models, a different kernel family.
Which is faster is for the device to say (gpu-bench's fleet rows ``conv`` "matmul"); the arithmetic is the same
(float64: equal to ~1e-15, the summation order differs), so a run's numbers change at rounding level only. A run
chooses with ``model.conv = "matmul"`` (:class:`fl.config.ModelConfig`; part of its identity).

>>> import torch
>>> from fl.models import build_model
>>> model = build_model("hfmds-cnn", (1, 28, 28), 10).double()
>>> x = torch.randn(2, 1, 28, 28, dtype=torch.float64)
>>> bool(torch.allclose(as_matmul(model)(x), model(x), rtol=0, atol=1e-12))
True
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class MatmulConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters, names and settings) computed as ``weight.flatten(1) @ unfold(x)``; groups 1
    and a numeric padding only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups != 1 or isinstance(self.padding, str) or self.padding_mode != "zeros":
            raise ValueError("MatmulConv2d computes zero-padded convolutions of one group with a numeric padding")
        cols = F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)  # (n, c_in·kh·kw, L)
        out = self.weight.flatten(1) @ cols  # (n, c_out, L)
        settings = zip(x.shape[-2:], self.padding, self.dilation, self.kernel_size, self.stride)
        height, width = ((size + 2 * pad - dil * (k - 1) - 1) // step + 1 for size, pad, dil, k, step in settings)
        out = out.unflatten(-1, (height, width))
        return out if self.bias is None else out + self.bias.view(-1, 1, 1)


def use_matmul(model: nn.Module) -> nn.Module:
    """``model`` itself, its ``nn.Conv2d`` layers now :class:`MatmulConv2d` (their parameters, buffers and state-dict
    keys unchanged; only how they compute); a run's model with ``model.conv = "matmul"``."""
    for module in model.modules():
        if type(module) is nn.Conv2d:
            module.__class__ = MatmulConv2d
    return model


def as_matmul(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose ``nn.Conv2d`` layers are :class:`MatmulConv2d` with the same parameters (so a
    ``functional_call`` with the original's parameter dict evaluates it); ``model`` is left as it is."""
    return use_matmul(copy.deepcopy(model))
