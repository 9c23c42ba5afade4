"""Shuffling a fraction p of real data across clients, and mixing in a shared synthetic pool (index level).

Real-data shuffle (Fedssyn Sec. 2.3 and appendix B): client i hands k_i = round(p·n_i) of its samples, drawn
uniformly without replacement, to a pool; the server permutes the pool and deals it back, client i receiving
k_i samples, so every client keeps its size. With equal sizes this is exactly
:func:`theory.shuffle.shuffle_assignment` (same generator -> same result; a test checks it), extended to
clients of different sizes.

Synthetic mixture (Fedssyn Algorithm I): the server pools the synthetic samples every client sent, permutes
them and splits them into N parts D̃_si (sizes differ by at most one, nothing dropped); client i trains on
D_i ∪ D̃_si, so p_i = |D̃_si| / (n_i + |D̃_si|). Indices of synthetic samples are offset by ``n_real``: they index
``concatenate([x_real, x_synthetic])``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from theory import _validate
from theory.errors import InputError
from theory.shuffle import n_exchanged


def _parts(parts: Sequence[np.ndarray]) -> list[np.ndarray]:
    parts = [np.asarray(part) for part in parts]
    if not parts or any(part.ndim != 1 or not np.issubdtype(part.dtype, np.integer) for part in parts):
        raise InputError("a partition is a non-empty list of 1-d integer index arrays")
    return parts


def shuffle_partition(parts: Sequence[np.ndarray], p: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Exchange a fraction ``p`` of every client's samples through a shuffled pool; sizes are unchanged.

    Each returned array lists the client's kept samples (sorted) and then the ones it received.

    >>> parts = [np.arange(0, 4), np.arange(4, 8)]
    >>> out = shuffle_partition(parts, 0.5, np.random.default_rng(0))
    >>> [len(o) for o in out], sorted(np.concatenate(out).tolist()) == list(range(8))
    ([4, 4], True)
    """
    parts = _parts(parts)
    p = _validate.scalar_fraction("p", p)
    sizes = np.array([part.size for part in parts])
    k = np.array([n_exchanged(int(n), p) if n else 0 for n in sizes])
    # One uniform key per sample, drawn for all clients at once: the same draws as theory.shuffle for equal n.
    keys = np.split(rng.random(int(sizes.sum())), np.cumsum(sizes)[:-1])
    orders = [part[np.argsort(key)] for part, key in zip(parts, keys)]
    pool = np.concatenate([order[:k_i] for order, k_i in zip(orders, k)])
    pool = pool[np.argsort(rng.random(pool.size))]
    received = np.split(pool, np.cumsum(k)[:-1])
    return [np.concatenate([np.sort(order[k_i:]), got]) for order, k_i, got in zip(orders, k, received)]


def deal_synthetic(n_synthetic: int, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The server's split of a pooled synthetic set of size ``n_synthetic`` into ``n_clients`` shuffled parts
    D̃_si (indices 0..n_synthetic-1; sizes differ by at most one; every sample dealt once)."""
    n_synthetic = _validate.count("n_synthetic", n_synthetic, minimum=0)
    n_clients = _validate.count("n_clients", n_clients)
    return list(np.array_split(rng.permutation(n_synthetic), n_clients))


def mix_synthetic(
    parts: Sequence[np.ndarray], n_real: int, n_synthetic: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray]:
    """D_i ∪ D̃_si for every client: indices into ``concatenate([x_real, x_synthetic])``, and the p_i.

    ``n_real`` is the size of the real array the partition indexes.

    >>> parts, p = mix_synthetic([np.arange(3), np.arange(3, 6)], 6, 2, np.random.default_rng(0))
    >>> [len(c) for c in parts], p.tolist()
    ([4, 4], [0.25, 0.25])
    """
    parts = _parts(parts)
    n_real = _validate.count("n_real", n_real)
    if any(part.size and (part.min() < 0 or part.max() >= n_real) for part in parts):
        raise InputError(f"partition indices must lie in 0..{n_real - 1}")
    shares = deal_synthetic(n_synthetic, len(parts), rng)
    mixed = [np.concatenate([part, n_real + share]) for part, share in zip(parts, shares)]
    sizes = np.array([len(m) for m in mixed], dtype=np.float64)
    p = np.divide([len(s) for s in shares], sizes, out=np.zeros(len(parts)), where=sizes > 0)
    return mixed, p
