"""Optimiser formulas for stacked rows (clients, runs): each row its own model, step count and step size, in one
computation. Every client's local step (:mod:`fl.step`) and the DDPMs trained together
(:mod:`fl.synthesis.generators.ddpm_together`) step with them."""

from __future__ import annotations

import torch
from torch.optim.adam import adam as torch_adam


def adam_update(first: torch.Tensor, second: torch.Tensor, g: torch.Tensor, t: torch.Tensor, lr, active: torch.Tensor):
    """torch.optim.Adam's formulas (β = 0.9, 0.999, ε = 1e-8) for stacked rows at their step counts ``t`` (a
    tensor broadcasting over the rows; its bias corrections are computed in its dtype, e.g. float64 as torch's
    Python numbers, then taken to the moments' dtype) and step size ``lr`` (a number or one a row): the new first
    and second moments, rows not ``active`` keeping theirs, and the update to subtract."""
    first = torch.where(active, first.lerp(g, 0.1), first)
    second = torch.where(active, second.mul(0.999).addcmul(g, g, value=0.001), second)
    step_size = ((1 - 0.9**t).reciprocal() * lr).to(first.dtype)  # what lr / tensor computes for a number lr
    denom = second.sqrt() / (1 - 0.999**t).sqrt().to(first.dtype) + 1e-8
    return first, second, step_size * first / denom


def adam_update_torch(first: torch.Tensor, second: torch.Tensor, g: torch.Tensor, t: float, lr: float, w: torch.Tensor):
    """torch.optim.Adam's step (β = 0.9, 0.999, ε = 1e-8) at step count t (a number): torch's own functional form
    (``torch.optim.adam.adam``, its single-tensor or, on CUDA, its foreach kernels), so bit for bit what
    torch.optim.Adam computes on every device (the sequential executors' arithmetic, :mod:`fl.step`;
    :func:`adam_update` is the stacked rows' order, equal to the last bit). As torch's, it updates ``first``,
    ``second`` and ``w`` in place, and returns them."""
    count = torch.tensor(float(t - 1))  # torch's step count before the step (it adds the 1)
    torch_adam([w], [g], [first], [second], [], [count], amsgrad=False, beta1=0.9, beta2=0.999, lr=lr,
               weight_decay=0.0, eps=1e-8, maximize=False)  # fmt: skip
    return first, second, w
