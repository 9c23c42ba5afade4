"""The arithmetic of matrix products and convolutions: float32, TF32 or bfloat16, on any device.

- ``fp32``: float32 inputs, float32 accumulation. On CUDA this turns TF32 *off* for cuBLAS and cuDNN: torch's own
  default runs cuDNN's float32 convolutions in TF32 on Ampere and later.
- ``tf32``: each float32 input of a product rounded to TF32 (8 exponent bits, 10 mantissa bits: float32's range,
  ~3 decimal digits), accumulated in float32: what an NVIDIA tensor core does with float32 operands. On CUDA the
  library switches (``allow_tf32``); elsewhere :class:`EmulatedTF32` rounds the operands itself, so that the CPU
  measures what TF32 does to a computation's numbers (not its speed).
- ``bf16``: ``torch.autocast`` to bfloat16 (8 mantissa bits) for the operations autocast lowers, on any device.

:func:`arithmetic` is the one switch; what is inside runs in the named precision, what was set before is restored
after. Element-wise work (norms, activations, optimiser steps) stays in float32 in all three.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from theory.errors import InputError

PRECISIONS = ("fp32", "tf32", "bf16")
TF32_DROPPED_BITS = 13  # float32 keeps 23 mantissa bits, TF32 10


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 ``x`` rounded to the nearest TF32 value, ties away from zero (PTX ``cvt.rna.tf32.f32``, the
    conversion cuBLAS and cuDNN apply to float32 operands); infinities and NaNs are left as they are. The result is
    float32 with its 13 lowest mantissa bits zero; |round(x) − x| ≤ 2⁻¹¹ |x|."""
    if x.dtype != torch.float32:
        raise TypeError(f"round_tf32 takes float32, not {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    half, mask = 1 << (TF32_DROPPED_BITS - 1), ~((1 << TF32_DROPPED_BITS) - 1)
    rounded = ((bits + half) & mask).view(torch.float32)  # a carry into the exponent is the correct rounding up
    return torch.where(torch.isfinite(x), rounded, x)


_aten = torch.ops.aten
# the products a tensor core computes, and which of their arguments are its operands (the rest, e.g. addmm's
# added term or a bias, is added in float32)
_OPERANDS = {
    _aten.mm.default: (0, 1),
    _aten.bmm.default: (0, 1),
    _aten.addmm.default: (1, 2),
    _aten.baddbmm.default: (1, 2),
    _aten.convolution.default: (0, 1),
    _aten.convolution_backward.default: (0, 1, 2),  # grad_output, input, weight
}


def _round_operand(value: object) -> object:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return round_tf32(value)
    return value


class EmulatedTF32(TorchDispatchMode):
    """Inside, every float32 matrix product and convolution (forward and backward, at any order of derivatives)
    takes its operands rounded by :func:`round_tf32` and accumulates in float32, as CUDA does with TF32 enabled.
    It sees the operations below autograd, so gradients are rounded exactly where cuDNN's TF32 kernels round them."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        operands = _OPERANDS.get(func)
        if operands is not None:
            args = tuple(_round_operand(a) if i in operands else a for i, a in enumerate(args))
        return func(*args, **(kwargs or {}))


def check_precision(name: str, key: str = "precision") -> str:
    """``name`` when it is one of :data:`PRECISIONS`; an :class:`InputError` naming ``key`` otherwise."""
    if name not in PRECISIONS:
        raise InputError(f"{key} = {name!r}: must be one of {', '.join(PRECISIONS)}")
    return name


@contextlib.contextmanager
def cuda_tf32(enabled: bool) -> Iterator[None]:
    """CUDA's float32 matrix products and cuDNN convolutions in TF32 (``enabled``) or in float32 while inside;
    restored after (torch >= 2.9's ``fp32_precision`` settings where present, else ``allow_tf32``)."""
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(matmul, "fp32_precision") and hasattr(conv, "conv"):
        saved = matmul.fp32_precision, conv.conv.fp32_precision
        matmul.fp32_precision = conv.conv.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision, conv.conv.fp32_precision = saved
        return
    saved = matmul.allow_tf32, conv.allow_tf32
    matmul.allow_tf32, conv.allow_tf32 = enabled, enabled
    try:
        yield
    finally:
        matmul.allow_tf32, conv.allow_tf32 = saved


@contextlib.contextmanager
def arithmetic(name: str, device: torch.device | str) -> Iterator[None]:
    """Run what is inside in precision ``name`` (:data:`PRECISIONS`) on ``device``; restored after."""
    check_precision(name)
    cuda = torch.device(device).type == "cuda"
    with contextlib.ExitStack() as stack:
        if cuda and name != "bf16":
            stack.enter_context(cuda_tf32(name == "tf32"))
        elif name == "tf32":
            stack.enter_context(EmulatedTF32())
        if name == "bf16":
            stack.enter_context(torch.autocast(torch.device(device).type, dtype=torch.bfloat16))
        yield
