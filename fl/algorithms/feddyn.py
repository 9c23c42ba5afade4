"""FedDyn (Acar et al. 2021), with the squared-norm regulariser of the paper.

Client k solves  min_w F_k(w) - <g_k, w> + (α/2)||w - x||²  (g_k = ∇F_k at its previous local model), i.e.
each local step adds  -g_k + α(w - x);  afterwards  g_k <- g_k - α(y_k - x).
Server:  h <- h - α (1/N) Σ_S (y_k - x),   x <- (1/|S|) Σ_S y_k - h/α.
(The Fedssyn authors' code uses the unsquared norm; we follow the paper.) FedDyn's average is uniform over S.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Algorithm, Context, State
from theory.errors import InputError


@dataclass(frozen=True)
class FedDyn(Algorithm):
    """alpha: α, the dynamic regulariser's weight (Acar et al. use 0.01-0.1)."""

    name: ClassVar[str] = "feddyn"
    client_keys: ClassVar[tuple[str, ...]] = ("g",)
    server_keys: ClassVar[tuple[str, ...]] = ("h",)
    alpha: float = 0.01

    def check(self) -> FedDyn:
        if self.alpha <= 0:  # x = mean(y) - h/α divides by α
            raise InputError("config algorithm.alpha: FedDyn needs alpha > 0")
        return self

    def correction(self, w: torch.Tensor, ctx: Context) -> torch.Tensor | None:
        return self.alpha * (w - ctx.x) - ctx.client["g"]

    def client_update(self, y: torch.Tensor, ctx: Context, steps: int, lr: float) -> State:
        return {"g": ctx.client["g"] - self.alpha * (y - ctx.x)}

    def server_update(self, x, server, ys, weights, deltas, n_clients) -> tuple[torch.Tensor, State]:
        h = server["h"] - self.alpha * (ys - x).sum(dim=0) / n_clients
        return ys.mean(dim=0) - h / self.alpha, {"h": h}
