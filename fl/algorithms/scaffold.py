"""SCAFFOLD (Karimireddy et al. 2020), option II control variates.

Local step: w <- w - η (∇F(w; batch) - c_i + c).
Client, after K local steps ending at y_i:  c_i⁺ = c_i - c + (x - y_i)/(K η)                   (option II)
Server:  x <- x + η_g Σ_S w_i (y_i - x),   c <- c + (|S|/N) · mean_S (c_i⁺ - c_i).
With c = c_i = 0 the first round is exactly FedAvg's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Algorithm, Context, State


@dataclass(frozen=True)
class Scaffold(Algorithm):
    """server_lr: global step size η_g (1.0 in Karimireddy et al.'s experiments)."""

    name: ClassVar[str] = "scaffold"
    client_keys: ClassVar[tuple[str, ...]] = ("c",)
    server_keys: ClassVar[tuple[str, ...]] = ("c",)
    server_lr: float = 1.0

    def mask(self, ctx: Context) -> torch.Tensor | None:
        """Which parameters carry control variates (None: all of them)."""
        return None

    def correction(self, w: torch.Tensor, ctx: Context) -> torch.Tensor | None:
        return ctx.server["c"] - ctx.client["c"]

    def client_update(self, y: torch.Tensor, ctx: Context, steps: int, lr: float) -> State:
        if steps == 0:  # a client without data: (x - y)/(Kη) is undefined, keep its control variate
            return {"c": ctx.client["c"]}
        c_new = ctx.client["c"] - ctx.server["c"] + (ctx.x - y) / (steps * lr)
        mask = self.mask(ctx)
        return {"c": c_new if mask is None else c_new * mask}

    def server_update(self, x, server, ys, weights, deltas, n_clients) -> tuple[torch.Tensor, State]:
        x_new = x + self.server_lr * (weights @ ys - x)
        c = server["c"] + (len(ys) / n_clients) * deltas["c"].mean(dim=0)
        return x_new, {"c": c}

    def communication(self, n_params: int, n_head: int) -> int:
        return 4 * n_params  # x and c down, y_i and Δc_i up
