"""FedAvgM (Hsu et al. 2019): FedAvg with server momentum on the pseudo-gradient."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Algorithm, State


@dataclass(frozen=True)
class FedAvgM(Algorithm):
    """Δ = x - Σ_S w_i y_i,  v <- β v + Δ,  x <- x - η_g v.

    beta: server momentum β (Hsu et al.: 0.9). server_lr: η_g (1.0; with β = 0 this is FedAvg).
    """

    name: ClassVar[str] = "fedavgm"
    server_keys: ClassVar[tuple[str, ...]] = ("v",)
    beta: float = 0.9
    server_lr: float = 1.0

    def server_update(self, x, server, ys, weights, deltas, n_clients) -> tuple[torch.Tensor, State]:
        delta = x - weights @ ys
        v = self.beta * server["v"] + delta
        return x - self.server_lr * v, {"v": v}
