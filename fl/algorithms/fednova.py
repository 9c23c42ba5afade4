"""FedNova (Wang et al. 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
Optimization"): normalised averaging, for clients that take different numbers of local steps.

FedAvg's x <- Σ_S p_i y_i lets a client with more local steps pull harder, and the model converges towards a
mismatched objective (weights ∝ p_i τ_i). FedNova's update rule,

    x_{t+1} = x_t - τ_eff Σ_S p_i η d_i,   d_i = G_i a_i / ‖a_i‖₁,   τ_eff = Σ_S p_i ‖a_i‖₁,

divides each client's accumulated change by the size of its own step pattern a_i before averaging, then takes
τ_eff steps along the average. For plain local SGD (every step weighted alike: a_i = [1, …, 1], ‖a_i‖₁ = τ_i) and
η G_i a_i = x_t - y_i this is

    x_{t+1} = x_t - (Σ_S p_i τ_i) · Σ_S p_i (x_t - y_i)/τ_i,

which is what :class:`FedNova` computes, p_i the aggregation weights over S (``train.weighting``: n_i/Σ n_j as in
Wang et al., or uniform) and τ_i = K_i the client's local steps this round (E·⌈n_i/B⌉, or ``train.local_steps``).
With equal τ_i it is FedAvg; a client with τ_i = 0 (no data) contributes nothing.

Plain SGD only (``train.weight_decay`` is part of the gradient and keeps a_i). With client momentum ρ
(``train.momentum``) a_i changes, ‖a_i‖₁ = Σ_{k=1}^{τ_i} (1 - ρ^k)/(1 - ρ) (the FedNova authors' code), and with
``train.optimizer = "adam"`` (and so with ``train.optimizer_state = "keep"``) no a_i of this form exists:
dividing by τ_i there would not be FedNova, so the config refuses them (``plain_sgd_only``).

The server needs each τ_i. The interface hands the step count to :meth:`~fl.algorithms.Algorithm.client_update`
only, so a client keeps the count of all its local steps as client state ``steps`` (P copies of one number, in
the (N, P) client-state array: memory and checkpoint space as SCAFFOLD's c_i) and the server reads this round's
τ_i as the state's change, new - old. The communication count is 2P + 1 a client (x down, y_i and τ_i up). The
Flower app carries up only the client state whose key is also a server key (SCAFFOLD's c), so ``python -m
fl.flower`` refuses FedNova in one line before it starts (``not_distributed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.algorithms.base import Algorithm, Context, State
from theory.errors import InputError


@dataclass(frozen=True)
class FedNova(Algorithm):
    """FedNova for plain local SGD: x <- x - (Σ_S p_i τ_i) Σ_S p_i (x - y_i)/τ_i. No hyper-parameters."""

    name: ClassVar[str] = "fednova"
    client_keys: ClassVar[tuple[str, ...]] = ("steps",)
    plain_sgd_only: ClassVar[bool] = True
    not_distributed: ClassVar[str] = (
        "its server reads each client's local step count τ_i, which the Flower app does not carry up"
    )

    def client_update(self, y: torch.Tensor, ctx: Context, steps: int, lr: float) -> State:
        """The client's local steps so far, this round's τ_i = K_i = ``steps`` added (the server reads it as the
        state's change, new - old). Refused once the count passes 1/eps of its dtype, where counts may round."""
        total = ctx.client["steps"] + steps
        if float(total[0]) > 1 / torch.finfo(total.dtype).eps:  # past 2^23 (float32) counts may round
            raise InputError(
                f"algorithm fednova: a client's step count passed {1 / torch.finfo(total.dtype).eps:.0f}, where "
                f"{total.dtype} counts may round; use train.dtype = 'float64'"
            )
        return {"steps": total}

    def server_update(
        self,
        x: torch.Tensor,
        server: State,
        ys: torch.Tensor,
        weights: torch.Tensor,
        deltas: State,
        n_clients: int,
    ) -> tuple[torch.Tensor, State]:
        """Wang et al.'s update rule for plain SGD: x - τ_eff Σ_S p_i (x - y_i)/τ_i, τ_eff = Σ_S p_i τ_i."""
        tau = deltas["steps"][:, 0]  # τ_i of this round, one per participant
        if bool(((tau <= 0) & (ys != x).any(dim=1)).any()):  # moved without a step: the count never arrived
            raise InputError(
                "algorithm fednova: a client's local model moved but no local step count reached the server "
                "(python -m fl.flower carries up only client state the server broadcasts); run FedNova with "
                "python -m fl.run"
            )
        normalised = (x - ys) / tau.clamp_min(1).unsqueeze(1)  # d_i; a client without steps has y_i = x: 0
        return x - (weights @ tau) * (weights @ normalised), server

    def communication(self, n_params: int, n_head: int) -> int:
        return 2 * n_params + 1  # x down; y_i and τ_i up
