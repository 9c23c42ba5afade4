"""FedYogi (Reddi et al. 2021, Algorithm 2): Yogi on the server over the averaged client delta Δ_t.

    m_t = β1 m_{t-1} + (1 - β1) Δ_t,   v_t = v_{t-1} - (1 - β2) Δ_t² sign(v_{t-1} - Δ_t²),
    x_{t+1} = x_t + η m_t/(√v_t + τ)

with v_{-1} = τ² and sign(0) = 0 (see :mod:`fl.algorithms.fedopt` for the shared step and the start). Unlike
Adam's, v moves towards Δ_t² by an additive (1 - β2)Δ_t², never by a fraction of v itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.fedopt import FedOptWithBeta2


@dataclass(frozen=True)
class FedYogi(FedOptWithBeta2):
    """FedYogi: server_lr (η), beta1 (β1), tau (τ) and beta2 (β2) of :class:`~fl.algorithms.fedopt.FedOpt`."""

    name: ClassVar[str] = "fedyogi"

    def second_moment(self, v: torch.Tensor, delta2: torch.Tensor) -> torch.Tensor:
        """Algorithm 2's Yogi line: v_t = v_{t-1} - (1 - β2) Δ_t² sign(v_{t-1} - Δ_t²)."""
        return v - (1 - self.beta2) * delta2 * torch.sign(v - delta2)
