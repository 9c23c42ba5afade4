"""What the engine, the batched backend, the methods and the federation builder share: the client set, the
local-training settings and the mini-batch order. It imports nothing of ours, so each of them can stand on it
without importing the others."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ClientSet:
    """Every client's training, validation and original (unshuffled) samples as index tensors into one pool of
    preprocessed float features ``x`` and labels ``y``; ``received`` is the shuffled-in or synthetic part of each
    training set (empty without shuffling)."""

    x: torch.Tensor
    y: torch.Tensor
    train: list[torch.Tensor]
    val: list[torch.Tensor]
    original: list[torch.Tensor]
    received: list[torch.Tensor]
    test_x: torch.Tensor
    test_y: torch.Tensor
    n_classes: int

    @property
    def n_clients(self) -> int:
        return len(self.train)

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(t) for t in self.train])


@dataclass(frozen=True)
class LocalConfig:
    """epochs: local epochs E; batch_size: B; K = E·⌈n_i/B⌉ local steps, or K = τ = ``steps`` when steps > 0
    (FedCOG counts iterations: τ = 400; the batches then run through fresh permutations until τ are taken).
    participation: C, the fraction of the N clients sampled each round (⌈C·N⌉ of them, without replacement).
    weighting: "size" (n_i/Σn_j) or "uniform". momentum: heavy-ball momentum β of the client's SGD
    (v <- βv + g, w <- w - ηv, v = 0 at the start of every round unless kept; 0: plain SGD). optimizer: "sgd",
    or "adam" (``torch.optim.Adam`` at step size η on the corrected gradient: DynaFed's clients). weight_decay: λ
    of the coupled L2 term added to every gradient (g <- g + λw, after the algorithm's correction; torch.optim's
    ``weight_decay``). backend: "sequential" (one client after another), "batched" (all
    participants at once through ``torch.func``, :mod:`fl.batched`), or "auto" (batched on CUDA); chunk: clients
    per batched call (0: all). client_state: where the (N, P) per-client states live, "device" or "host"
    (:func:`init_state`). augment: "none", or "crop-flip" (every training batch randomly translated by up to 4
    pixels with black shifted in and flipped horizontally with probability 1/2: FedCOG's code,
    :func:`fl.augment.crop_flip`). optimizer_state: "reset" (a fresh optimiser every round) or "keep" (each client
    keeps its Adam moments and step count, or its SGD momentum buffer, from its last round to its next, as
    DynaFed's code does; :func:`carried_rows`). graphs: the batched steps replayed as a graph or not (``train.graphs``:
    auto, on, off; :func:`fl.graphs.graph_kind`), speed only."""

    epochs: int = 1
    batch_size: int = 64
    participation: float = 1.0
    weighting: str = "size"
    steps: int = 0
    momentum: float = 0.0
    optimizer: str = "sgd"
    weight_decay: float = 0.0
    backend: str = "sequential"
    chunk: int = 0
    client_state: str = "device"
    augment: str = "none"
    optimizer_state: str = "reset"
    budget: str = "epochs"
    graphs: str = "auto"

    @classmethod
    def of(cls, train) -> LocalConfig:
        """The local-training settings of a run's ``[train]`` table (:class:`fl.config.TrainConfig`), by name."""
        return cls(**{field: getattr(train, key) for field, key in TRAIN_KEYS.items()})


TRAIN_KEYS = {  # LocalConfig's field -> the [train] key it comes from
    "epochs": "local_epochs", "batch_size": "batch_size", "participation": "participation", "weighting": "weighting",
    "steps": "local_steps", "momentum": "momentum", "optimizer": "optimizer", "weight_decay": "weight_decay",
    "backend": "backend", "chunk": "client_chunk", "client_state": "client_state", "augment": "augment",
    "optimizer_state": "optimizer_state", "budget": "local_budget", "graphs": "graphs",
}  # fmt: skip


BUDGETS = ("epochs", "real-steps")


def client_budget(local: LocalConfig, n_own: int) -> tuple[int, int]:
    """(epochs, steps) of :func:`batches` for a client with ``n_own`` samples of its own (D_i, before anything is
    added): ``local``'s E and τ, except under ``budget = "real-steps"`` (and no fixed τ), where the client takes
    K_i = E·⌈n_i/B⌉ steps, those of its D_i-only run, whatever synthetic or shuffled-in data it trains on beside
    D_i (no step when D_i is empty). Fedssyn's authors' code cuts the local epochs to int(n_i·E/(n_i + ñ)) when
    synthetic data are added, so that the iterations stay about the same; this keeps them exactly."""
    if local.steps or local.budget == "epochs":
        return local.epochs, local.steps
    k = local.epochs * -(-n_own // local.batch_size)
    return (local.epochs, k) if k else (0, 0)


STEP_KEY = "adam_step"  # one number per client; every other carried row has the model's P numbers


def carried_rows(local: LocalConfig) -> tuple[str, ...]:
    """The client-state rows that carry a client's optimiser from round to round under ``optimizer_state =
    "keep"``: Adam's first and second moments and its step count, or SGD's momentum buffer; () otherwise."""
    if local.optimizer_state != "keep":
        return ()
    if local.optimizer == "adam":
        return ("adam_m", "adam_v", STEP_KEY)
    return ("momentum",) if local.momentum else ()


def batches(
    index: torch.Tensor, batch_size: int, generator: torch.Generator, epochs: int, steps: int = 0
) -> Iterator[torch.Tensor]:
    """Mini-batches of ``index``: each pass a fresh permutation cut into batches of B (the last one smaller);
    ``epochs`` passes, or exactly ``steps`` batches when steps > 0."""
    if not len(index):
        return
    taken = 0
    for _ in itertools.count() if steps else range(epochs):
        order = index[torch.randperm(len(index), generator=generator).to(index.device)]
        for start in range(0, len(order), batch_size):
            yield order[start : start + batch_size]
            taken += 1
            if taken == steps:
                return
