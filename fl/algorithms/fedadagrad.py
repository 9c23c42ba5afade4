"""FedAdagrad (Reddi et al. 2021, Algorithm 2): Adagrad on the server over the averaged client delta Δ_t.

    m_t = β1 m_{t-1} + (1 - β1) Δ_t,   v_t = v_{-1} + Σ_{s≤t} Δ_s² = v_{t-1} + Δ_t²,   x_{t+1} = x_t + η m_t/(√v_t + τ)

with v_{-1} = τ² (see :mod:`fl.algorithms.fedopt` for the shared step and the start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.fedopt import FedOpt


@dataclass(frozen=True)
class FedAdagrad(FedOpt):
    """FedAdagrad: server_lr (η), beta1 (β1) and tau (τ) of :class:`~fl.algorithms.fedopt.FedOpt`; no β2."""

    name: ClassVar[str] = "fedadagrad"

    def second_moment(self, v: torch.Tensor, delta2: torch.Tensor) -> torch.Tensor:
        """Algorithm 2's Adagrad line: v_t = v_{t-1} + Δ_t²."""
        return v + delta2
