"""Partitioners: pure functions ``(labels, n_clients, rng, **params) -> list of index arrays``, one per client.

Every partitioner assigns every sample to exactly one client (indices sorted within a client), is a pure
function of its arguments (same ``rng`` state -> same partition) and never loops forever.

- :func:`iid`: a uniformly random split into sizes that differ by at most one.
- :func:`split_by_class`: one class per client (Fedssyn appendix B, "split by class").
- :func:`shards`: k classes per client the McMahan et al. way (sort by label, cut into N·k shards, deal k each).
- :func:`dirichlet`: label skew, client proportions of each class ~ Dirichlet(α) (Hsu et al. 2019), with an
  optional minimum client size enforced by a bounded number of redraws.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from theory import _validate
from theory.errors import InputError

Partition = list[np.ndarray]


def _labels(labels: ArrayLike, n_clients: int) -> tuple[np.ndarray, int]:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or (labels.size and labels.min() < 0):
        raise InputError("labels must be a 1-d array of non-negative integers")
    n_clients = _validate.count("n_clients", n_clients)
    if n_clients > labels.size:
        raise InputError(f"{n_clients} clients but only {labels.size} samples: every client needs one sample")
    return labels, n_clients


def iid(labels: ArrayLike, n_clients: int, rng: np.random.Generator) -> Partition:
    """Uniformly random equal split; sizes differ by at most one.

    >>> [len(c) for c in iid(np.arange(10) % 2, 3, np.random.default_rng(0))]
    [4, 3, 3]
    """
    labels, n_clients = _labels(labels, n_clients)
    return [np.sort(part) for part in np.array_split(rng.permutation(labels.size), n_clients)]


def split_by_class(labels: ArrayLike, n_clients: int, rng: np.random.Generator) -> Partition:
    """Each client sees a single class. Classes are dealt to clients round-robin (client i gets class i mod C);
    with more clients than classes a class's samples are split at random among the clients that share it.

    Raises InputError when there are fewer clients than classes (samples of some class would be dropped: use
    :func:`shards` instead).

    >>> [np.unique(np.array([0, 0, 1, 1, 2, 2])[c]).tolist() for c in split_by_class([0, 0, 1, 1, 2, 2], 3,
    ...                                                                              np.random.default_rng(0))]
    [[0], [1], [2]]
    """
    labels, n_clients = _labels(labels, n_clients)
    classes = np.unique(labels)
    if n_clients < classes.size:
        raise InputError(f"split-by-class needs at least one client per class ({classes.size}), got {n_clients}")
    parts: Partition = [np.empty(0, dtype=np.int64)] * n_clients
    for c, cls in enumerate(classes):
        owners = np.arange(c, n_clients, classes.size)
        members = rng.permutation(np.flatnonzero(labels == cls))
        if members.size < owners.size:
            raise InputError(f"class {cls} has {members.size} samples for {owners.size} clients")
        for owner, share in zip(owners, np.array_split(members, owners.size)):
            parts[owner] = np.sort(share)
    return parts


def shards(labels: ArrayLike, n_clients: int, rng: np.random.Generator, classes_per_client: int = 2) -> Partition:
    """McMahan et al.'s pathological non-IID split: sort by label, cut into N·k equal shards, give each client k
    random shards. As in McMahan et al., a shard may straddle a class boundary, so a client can hold more than k
    classes; it holds at most k when every class is a whole number of shards (e.g. 6,000 per class, N·k = 100).
    Sizes differ by at most k. Raises InputError when N·k exceeds the number of samples.

    >>> [len(c) for c in shards(np.repeat(np.arange(4), 4), 4, np.random.default_rng(0), classes_per_client=2)]
    [4, 4, 4, 4]
    """
    labels, n_clients = _labels(labels, n_clients)
    k = _validate.count("classes_per_client", classes_per_client)
    if n_clients * k > labels.size:
        raise InputError(f"{n_clients} clients x {k} shards exceeds the {labels.size} samples")
    # Stable sort by label with a random order inside each class, so which samples form a shard is random too.
    order = np.lexsort((rng.random(labels.size), labels))
    pieces = np.array_split(order, n_clients * k)
    dealt = rng.permutation(n_clients * k).reshape(n_clients, k)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in dealt]


def dirichlet(
    labels: ArrayLike,
    n_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int = 0,
    max_draws: int = 1000,
) -> Partition:
    """Label skew: for every class c draw q_c ~ Dirichlet(α·1_N) and give client i a fraction q_{c,i} of class c.

    Small α gives each client few classes (α = 0.01 is nearly one class per client); large α tends to iid.
    ``min_size``: redraw the whole partition until every client has at least this many samples. The number of
    draws is bounded by ``max_draws``: when no draw succeeds, InputError says so (it never loops forever).
    Raises InputError at once when ``min_size · N`` exceeds the number of samples. With ``min_size = 0`` a
    client may be empty (a valid partition).

    >>> parts = dirichlet(np.repeat(np.arange(3), 10), 3, np.random.default_rng(0), alpha=0.1, min_size=1)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(30))
    True
    """
    labels, n_clients = _labels(labels, n_clients)
    alpha = float(_validate.positive("alpha", alpha))
    min_size = _validate.count("min_size", min_size, minimum=0)
    max_draws = _validate.count("max_draws", max_draws)
    if min_size * n_clients > labels.size:
        raise InputError(f"min_size {min_size} x {n_clients} clients exceeds the {labels.size} samples")
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == cls) for cls in classes]
    for _ in range(max_draws):
        q = rng.dirichlet(np.full(n_clients, alpha), size=classes.size)
        q = np.nan_to_num(q)  # numpy's sampler can return NaN rows for tiny α: fall back to one owner
        bad = q.sum(axis=1) <= 0
        q[bad, rng.integers(n_clients, size=int(bad.sum()))] = 1.0
        parts_per_class = []
        for idx, q_c in zip(members, q):
            shuffled = rng.permutation(idx)
            cuts = np.rint(np.cumsum(q_c / q_c.sum()) * idx.size).astype(np.int64)[:-1]
            parts_per_class.append(np.split(shuffled, cuts))
        sizes = np.sum([[len(part) for part in split] for split in parts_per_class], axis=0)
        if sizes.min() >= min_size:
            return [np.sort(np.concatenate([split[i] for split in parts_per_class])) for i in range(n_clients)]
    raise InputError(
        f"no Dirichlet(alpha={alpha:g}) draw in {max_draws} gave every one of {n_clients} clients at least "
        f"{min_size} samples; lower min_size or raise alpha"
    )


PARTITIONERS: dict[str, Callable[..., Partition]] = {
    "iid": iid,
    "split-by-class": split_by_class,
    "shards": shards,
    "dirichlet": dirichlet,
}


def partition(name: str, labels: ArrayLike, n_clients: int, rng: np.random.Generator, **params) -> Partition:
    """Dispatch by name (``iid``, ``split-by-class``, ``shards``, ``dirichlet``) with keyword parameters."""
    if name not in PARTITIONERS:
        raise InputError(f"unknown partition {name!r}; known: {', '.join(PARTITIONERS)}")
    try:
        return PARTITIONERS[name](labels, n_clients, rng, **params)
    except TypeError as error:
        raise InputError(f"partition {name!r}: {error}") from None
