"""The server-optimiser family of Reddi et al. 2021 ("Adaptive Federated Optimization", Algorithm 2): FedAvg's
clients, and an adaptive optimiser on the server that treats the averaged client change as a pseudo-gradient.

One round t, x_t the server model, y_i the participants' local models, w_i the aggregation weights over S:

    Δ_t = Σ_S w_i (y_i - x_t)                          (the averaged client delta; Δ_t = -pseudo-gradient)
    m_t = β1 m_{t-1} + (1 - β1) Δ_t
    v_t = the variant's second moment of Δ_t             (:class:`~fl.algorithms.fedadagrad.FedAdagrad`,
                                                          :class:`~fl.algorithms.fedyogi.FedYogi`,
                                                          :class:`~fl.algorithms.fedadam.FedAdam`)
    x_{t+1} = x_t + η m_t / (√v_t + τ)                   (element-wise)

with m_{-1} = 0 and v_{-1} = τ² (Algorithm 2 asks for v_{-1} ≥ τ²; we take the bound). No bias correction, as in
Algorithm 2. Reddi et al. average uniformly (w_i = 1/|S|: ``train.weighting = "uniform"``); the default
``"size"`` weighting gives the n_i-weighted Δ_t, as for every algorithm here.

The engine starts every server state at zero; a v that is zero in every coordinate is read as v_{-1} = τ² (after
round 1 every coordinate of v is positive: Adagrad's v only grows from τ², Yogi's keeps v_t ≥ β2 v_{t-1} > 0, and
Adam's v_t = β2 v_{t-1} + (1 - β2)Δ_t² ignores v_{-1} exactly when β2 = 0, the one case it can return to zero).
Server state only: nothing is sent but x down and y_i up (2P numbers a client), so the Flower app runs them as
``fl.run`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Algorithm, State
from theory.errors import InputError


@dataclass(frozen=True)
class FedOpt(Algorithm):
    """The family's shared server step; a variant supplies :meth:`second_moment`.

    server_lr: η, the server step size of x <- x + η m/(√v + τ) (Reddi et al. tune it per task; 0.01 is a
    starting point). beta1: β1, the decay of the server momentum m (0.9 in Reddi et al.). tau: τ, the adaptivity
    of the denominator √v + τ; v starts at τ² (1e-3 in Reddi et al.).
    """

    name: ClassVar[str] = "fedopt"
    server_keys: ClassVar[tuple[str, ...]] = ("m", "v")
    server_lr: float = 0.01
    beta1: float = 0.9
    tau: float = 1e-3

    def check(self) -> FedOpt:
        if not self.server_lr > 0:
            raise InputError(f"config algorithm.server_lr: {self.name} needs server_lr > 0 (η in x + η m/(√v + τ))")
        if not 0 <= self.beta1 < 1:
            raise InputError(f"config algorithm.beta1: {self.name} needs beta1 in [0, 1), got {self.beta1:g}")
        if not self.tau > 0:  # v starts at τ² and divides m: τ = 0 would make a zero Δ 0/0
            raise InputError(f"config algorithm.tau: {self.name} needs tau > 0 (√v + τ divides m; v starts at τ²)")
        return self

    def second_moment(self, v: torch.Tensor, delta2: torch.Tensor) -> torch.Tensor:
        """v_t from v_{t-1} and Δ_t² (element-wise); each variant's own line of Algorithm 2."""
        raise NotImplementedError(f"{type(self).__name__} names no second moment: use fedadam, fedyogi or fedadagrad")

    def server_update(
        self,
        x: torch.Tensor,
        server: State,
        ys: torch.Tensor,
        weights: torch.Tensor,
        deltas: State,
        n_clients: int,
    ) -> tuple[torch.Tensor, State]:
        """Algorithm 2 of Reddi et al.: Δ_t, m_t, the variant's v_t, then x_{t+1} = x_t + η m_t/(√v_t + τ)."""
        delta = weights @ ys - x
        m = self.beta1 * server["m"] + (1 - self.beta1) * delta
        v_before = torch.where(server["v"].any(), server["v"], torch.full_like(x, self.tau**2))  # v_{-1} = τ²
        v = self.second_moment(v_before, delta * delta)
        return x + self.server_lr * m / (v.sqrt() + self.tau), {"m": m, "v": v}


@dataclass(frozen=True)
class FedOptWithBeta2(FedOpt):
    """A variant whose second moment decays with β2 (Yogi, Adam).

    beta2: β2, the decay of the second moment v (0.99 in Reddi et al.).
    """

    beta2: float = 0.99

    def check(self) -> FedOptWithBeta2:
        super().check()
        if not 0 <= self.beta2 < 1:
            raise InputError(f"config algorithm.beta2: {self.name} needs beta2 in [0, 1), got {self.beta2:g}")
        return self
