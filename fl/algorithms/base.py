"""What every FL algorithm provides to the engine, on flat parameter vectors.

The engine keeps the model's parameters as one flat vector w ∈ R^P (see :mod:`fl.flat`). One round, for each
participating client i (S the participating set, x the server model, η the client step size):

1. local training starts from w = x and takes K = E·⌈n_i/B⌉ steps (E local epochs of mini-batches of B: "local
   steps" mean the same for every algorithm) of  w <- w - η (∇F(w; batch) + correction(w)),
   where :meth:`Algorithm.correction` is the algorithm's change to plain SGD (None for FedAvg);
2. :meth:`Algorithm.client_update` returns the client's new state (control variates, FedDyn gradients);
3. :meth:`Algorithm.server_update` turns the local models y_i and the changes of the participants' states
   (new - old: what a client sends up beside y_i) into the new x and server state.

Per-client state lives in stacked arrays (N, P) owned by the engine, indexed by client id; server state is a dict
of vectors. Aggregation weights ``weights`` (summing to 1 over S) are n_i/Σ_S n_j ("size", McMahan et al.) or
1/|S| ("uniform"), chosen in the config.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import ClassVar

import torch

from theory.errors import InputError

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Context:
    """What a client sees during one round: the server model x, server state, its own state, the head mask."""

    x: torch.Tensor
    server: State
    client: State
    head_mask: torch.Tensor  # bool (P,): parameters of the model's classifier head


@dataclass(frozen=True)
class Algorithm:
    """FedAvg (McMahan et al. 2017): plain local SGD, then x <- Σ_S w_i y_i. Subclasses change one piece each."""

    name: ClassVar[str] = "fedavg"
    client_keys: ClassVar[tuple[str, ...]] = ()  # per-client state vectors, each stored as (N, P)
    server_keys: ClassVar[tuple[str, ...]] = ()
    plain_sgd_only: ClassVar[bool] = False  # its update assumes plain local SGD steps (FedNova's τ_i normalisation)
    # Why it cannot run with its clients on other machines (fl.flower), or "" when it can (as a method's).
    not_distributed: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs) -> None:
        """A plug-in written for the older ``server_update(x, server, ys, weights, old, new, n_clients)`` is refused
        in one line (its states' change is now handed over as ``deltas``: it would be called with the wrong
        arguments)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("server_update")
        if own is not None and {"old", "new"} <= set(inspect.signature(own).parameters):
            raise InputError(
                f"{cls.__module__}.{cls.__qualname__}.server_update takes (old, new): the interface now hands "
                "over their change, server_update(self, x, server, ys, weights, deltas, n_clients), deltas = new - old"
            )

    def check(self) -> Algorithm:
        """Raise :class:`~theory.errors.InputError` (naming the ``algorithm.KEY``) for an out-of-range value."""
        return self

    def correction(self, w: torch.Tensor, ctx: Context) -> torch.Tensor | None:
        """Added to the mini-batch gradient at every local step (None: plain SGD)."""
        return None

    def client_update(self, y: torch.Tensor, ctx: Context, steps: int, lr: float) -> State:
        """The client's new state after K = ``steps`` local steps that ended at y."""
        return {}

    def server_update(
        self,
        x: torch.Tensor,
        server: State,
        ys: torch.Tensor,
        weights: torch.Tensor,
        deltas: State,
        n_clients: int,
    ) -> tuple[torch.Tensor, State]:
        """New server model and state from the local models ``ys`` (|S|, P) and the changes of the participants'
        states, ``deltas[k]`` = new - old of each ``client_keys`` entry k (each (|S|, P))."""
        return weights @ ys, server

    def communication(self, n_params: int, n_head: int) -> int:
        """Numbers sent per participating client per round (down + up): model down, model up."""
        return 2 * n_params
