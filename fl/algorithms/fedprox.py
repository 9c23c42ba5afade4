"""FedProx (Li et al. 2020): local objective F_i(w) + (μ/2)||w - x||², so every step adds μ(w - x)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Algorithm, Context


@dataclass(frozen=True)
class FedProx(Algorithm):
    """mu: proximal weight μ (the squared norm of Li et al.; μ = 0 is FedAvg)."""

    name: ClassVar[str] = "fedprox"
    mu: float = 0.01

    def correction(self, w: torch.Tensor, ctx: Context) -> torch.Tensor | None:
        return self.mu * (w - ctx.x) if self.mu else None
