"""Build the clients of a run from a dataset: partition, 10% local validation split, real-data shuffle at p,
optional synthetic pool; preprocess once into float tensors on the run's device."""

from __future__ import annotations

import numpy as np
import torch

from fl.clients import ClientSet
from fl.data import Dataset, mix_synthetic, partition, shuffle_partition
from fl.data.partition import NATURAL, natural
from theory.errors import InputError
from theory.shuffle import n_exchanged


def normalise(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    """uint8 (n, C, H, W) -> float32 standardised per channel."""
    out = torch.from_numpy(x).float().div_(255)
    return out.sub_(torch.from_numpy(mean)[:, None, None]).div_(torch.from_numpy(std)[:, None, None])


def split_clients(
    data: Dataset,
    scheme: str,
    n_clients: int,
    rng: np.random.Generator,
    p: float = 0.0,
    val_fraction: float = 0.1,
    partition_params: dict | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """(train, val, original) index arrays into ``data.x_train``: partition over ``n_clients`` (``scheme`` and
    ``partition_params`` as in :func:`fl.data.partition`), hold out ``val_fraction`` of every client as its local
    validation set (D_i is the rest: ``original``), then shuffle a fraction ``p`` of D_i across clients (``train``;
    kept samples first, then the k_i = round(p·n_i) received ones)."""
    if not 0 <= val_fraction < 1:
        raise InputError(f"val_fraction must lie in [0, 1), got {val_fraction}")
    if n_clients > len(data.y_train):
        raise InputError(f"{n_clients} clients but only {len(data.y_train)} training samples")
    if scheme == NATURAL:  # the clients the data name (an npz's client_ids)
        if data.client_ids is None:
            raise InputError(f"config data.partition: natural needs data that name their clients ({data.name} has "
                             "no client_ids; see fl.data.custom)")  # fmt: skip
        parts = natural(data.client_ids, n_clients)
    else:
        parts = partition(scheme, data.y_train, n_clients, rng, **(partition_params or {}))
    val, original = [], []
    for part in parts:
        order = rng.permutation(part)
        k = round(val_fraction * len(part))
        val.append(np.sort(order[:k]))
        original.append(np.sort(order[k:]))
    return shuffle_partition(original, p, rng), val, original


def assemble(
    data: Dataset,
    train: list[np.ndarray],
    val: list[np.ndarray],
    original: list[np.ndarray],
    rng: np.random.Generator,
    p: float = 0.0,
    synthetic: list[tuple[np.ndarray, np.ndarray]] | None = None,
    synthetic_mode: str = "shuffle",
    device: str | torch.device = "cpu",
) -> ClientSet:
    """The ClientSet of index arrays from :func:`split_clients` (``p``: the real-data fraction shuffled there),
    preprocessed once on ``device``.

    ``synthetic``: per-client (x uint8, y) sets. "shuffle" (Fedssyn Algorithm I): the server pools them, permutes
    and deals N parts D̃_si, client i trains on D_i ∪ D̃_si; "own": client i trains on D_i ∪ D̃_i (its own)."""
    # split_clients lists the kept samples first, then the k_i = round(p·n_i) received ones.
    received = [t[len(t) - (n_exchanged(len(o), p) if len(o) else 0) :] for t, o in zip(train, original)]
    x, y = data.x_train, data.y_train
    if synthetic is not None:
        if len(synthetic) != len(train):
            raise InputError(f"{len(synthetic)} synthetic sets for {len(train)} clients")
        if synthetic_mode not in ("shuffle", "own"):
            raise InputError(f"synthetic mode must be 'shuffle' or 'own', got {synthetic_mode!r}")
        x_syn = np.concatenate([s[0] for s in synthetic])
        y_syn = np.concatenate([s[1] for s in synthetic])
        if synthetic_mode == "shuffle":
            train, _ = mix_synthetic(train, len(y), len(y_syn), rng)
        else:
            offsets = np.cumsum([0] + [len(s[1]) for s in synthetic])
            train = [np.concatenate([t, len(y) + np.arange(a, b)]) for t, a, b in zip(train, offsets, offsets[1:])]
        received = [t[t >= len(y)] for t in train]
        x, y = np.concatenate([x, x_syn]), np.concatenate([y, y_syn])
    mean = (data.x_train / 255.0).mean(axis=(0, 2, 3)).astype(np.float32)
    std = (data.x_train / 255.0).std(axis=(0, 2, 3)).astype(np.float32)

    def index(parts: list[np.ndarray]) -> list[torch.Tensor]:
        return [torch.as_tensor(np.asarray(q, dtype=np.int64), device=device) for q in parts]

    return ClientSet(
        x=normalise(x, mean, std).to(device),
        y=torch.as_tensor(y, device=device),
        train=index(train),
        val=index(val),
        original=index(original),
        received=index(received),
        test_x=normalise(data.x_test, mean, std).to(device),
        test_y=torch.as_tensor(data.y_test, device=device),
        n_classes=data.n_classes,
    )


def build_clients(
    data: Dataset,
    scheme: str,
    n_clients: int,
    rng: np.random.Generator,
    p: float = 0.0,
    val_fraction: float = 0.1,
    partition_params: dict | None = None,
    device: str | torch.device = "cpu",
) -> ClientSet:
    """:func:`split_clients` then :func:`assemble` without synthetic data."""
    train, val, original = split_clients(data, scheme, n_clients, rng, p, val_fraction, partition_params)
    return assemble(data, train, val, original, rng, p, device=device)
