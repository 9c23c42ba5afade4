"""A template algorithm: FedProx's proximal pull with a server step size. Use it as
``algorithm.name = "examples.damped_prox:DampedProx"``.

Local step:  w <- w - η (∇F(w; batch) + μ (w - x))            (:meth:`correction`)
Server:      x <- x + η_g (Σ_S w_i y_i - x)                   (:meth:`server_update`)

What it shows: a frozen dataclass whose fields, its hyper-parameters, are finite numbers with defaults (the
``[algorithm]`` keys); :meth:`check` for their ranges (one line naming ``algorithm.KEY``); a correction made of
tensor arithmetic only (no ``.item()``, no Python branch on a tensor's value, no in-place change), so that the
batched backend can ``vmap`` it over the clients; a server update that returns new tensors. An algorithm that
keeps per-client state names it in ``client_keys`` and returns it from ``client_update`` (see
fl/algorithms/scaffold.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms import Algorithm, Context, State
from theory.errors import InputError


@dataclass(frozen=True)
class DampedProx(Algorithm):
    """mu: proximal weight μ (Li et al.'s FedProx; 0: FedAvg's local steps); server_lr: server step size η_g
    (1: FedAvg's averaging)."""

    name: ClassVar[str] = "damped-prox"
    mu: float = 0.01
    server_lr: float = 1.0

    def check(self) -> None:
        if not 0 < self.server_lr <= 2:
            raise InputError("config algorithm.server_lr: must lie in (0, 2]")

    def correction(self, w: torch.Tensor, ctx: Context) -> torch.Tensor | None:
        return self.mu * (w - ctx.x) if self.mu else None

    def server_update(self, x, server, ys, weights, deltas, n_clients) -> tuple[torch.Tensor, State]:
        return x + self.server_lr * (weights @ ys - x), server
