"""Partitioners: pure functions ``(labels, n_clients, rng, **params) -> list of index arrays``, one per client.

Every partitioner assigns every sample to exactly one client (indices sorted within a client), is a pure
function of its arguments (same ``rng`` state -> same partition) and never loops forever.

- :func:`iid`: a uniformly random split into sizes that differ by at most one.
- :func:`split_by_class`: one class per client (Fedssyn appendix B, "split by class").
- :func:`shards`: k classes per client the McMahan et al. way (sort by label, cut into N·k shards, deal k each).
- :func:`dirichlet` ("dirichlet"): label skew by splitting each class over the clients, q_c ~ Dir_N(α) per class
  c; client sizes vary (a client can be empty at small α), with an optional minimum client size enforced by a
  bounded number of redraws. This is the scheme of Yurochkin et al. 2019 ("Bayesian nonparametric federated
  learning of neural networks") and Wang et al. 2020 (FedMA), benchmarked in NIID-Bench (Li, Diao, Chen and He
  2022, "Federated learning on non-IID data silos: an experimental study"), without the cap at n/N samples that
  NIID-Bench's code (used by MOON and FedCOG's code) adds: that one is "dirichlet-capped". Fedssyn's partition
  (after FedDF, Lin et al. 2020) splits per class too, but caps a client at the average size and redraws until
  every client has half of it: that one is "dirichlet-fedssyn".
- :func:`dirichlet_capped` ("dirichlet-capped"): NIID-Bench's loop as its code runs it (FedCOG's NIID-1): as
  "dirichlet", but class by class, and a client that already holds n/N samples gets no share of later classes.
- :func:`dirichlet_balanced` ("dirichlet-balanced"): DynaFed's code: the per-class Dirichlet matrix balanced by
  Sinkhorn's iteration, so clients hold about n/N samples each.
- :func:`dirichlet_fedssyn` ("dirichlet-fedssyn"): Fedssyn's code (after FedDF): per group of 10 or 20 clients,
  per class Dirichlet shares capped at the group's average, redrawn until every client holds half of it; then equal
  client sizes n/N.
- :func:`label_groups` ("label-groups"): FedCOG's code's k-label skew (its NIID-2): fixed groups of k labels.
- :func:`dirichlet_hsu` ("dirichlet-hsu"): label skew by drawing each client's class mix, q_i ~ Dir_K(α·prior)
  with the prior the global class frequencies, for clients of equal size n/N (Hsu, Qi and Brown 2019,
  "Measuring the effects of non-identical data distribution for federated visual classification", the FedAvgM
  paper). No client is ever empty, at any α.

The same α means different skews in the two: "dirichlet" draws Dir(α, …, α) over N clients (total concentration
N·α), "dirichlet-hsu" Dir(α·p_1, …, α·p_K) over K classes (total α: α/10 per class for 10 balanced classes, so
more skewed). Compare runs within one scheme.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from fl.plugins import is_plugin, resolve
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


def _dirichlet_args(labels, n_clients, alpha, min_size, max_draws) -> tuple[np.ndarray, int, float, int, int]:
    """The checked arguments of the Dirichlet splits that redraw for a minimum size."""
    labels, n_clients = _labels(labels, n_clients)
    alpha = float(_validate.positive("alpha", alpha))
    min_size = _validate.count("min_size", min_size, minimum=0)
    max_draws = _validate.count("max_draws", max_draws)
    if min_size * n_clients > labels.size:
        raise InputError(f"min_size {min_size} x {n_clients} clients exceeds the {labels.size} samples")
    return labels, n_clients, alpha, min_size, max_draws


def dirichlet(
    labels: ArrayLike,
    n_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int = 0,
    max_draws: int = 1000,
) -> Partition:
    """Label skew: for every class c draw q_c ~ Dirichlet(α·1_N) and give client i a fraction q_{c,i} of class c
    (the NIID-Bench scheme of Yurochkin et al. 2019 and Li et al. 2022; see the module docstring).

    Small α gives each client few classes (α = 0.01 is nearly one class per client); large α tends to iid.
    ``min_size``: redraw the whole partition until every client has at least this many samples. The number of
    draws is bounded by ``max_draws``: when no draw succeeds, InputError says so (it never loops forever).
    Raises InputError at once when ``min_size · N`` exceeds the number of samples. With ``min_size = 0`` a
    client may be empty (a valid partition).

    >>> parts = dirichlet(np.repeat(np.arange(3), 10), 3, np.random.default_rng(0), alpha=0.1, min_size=1)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(30))
    True
    """
    labels, n_clients, alpha, min_size, max_draws = _dirichlet_args(labels, n_clients, alpha, min_size, max_draws)
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == cls) for cls in classes]
    for _ in range(max_draws):
        q = rng.dirichlet(np.full(n_clients, alpha), size=classes.size)
        q = np.nan_to_num(q)  # numpy's sampler can return NaN rows for tiny α: fall back to one owner
        bad = q.sum(axis=1) <= 0
        q[bad, rng.integers(n_clients, size=int(bad.sum()))] = 1.0
        shuffled, cuts, sizes = [], [], np.zeros(n_clients, dtype=np.int64)
        for idx, q_c in zip(members, q):
            shuffled.append(rng.permutation(idx))
            cuts.append(np.rint(np.cumsum(q_c / q_c.sum()) * idx.size).astype(np.int64)[:-1])
            sizes += _piece_sizes(cuts[-1], idx.size)
        if sizes.min() >= min_size:  # only a draw that is kept is cut into pieces (a failed one costs its draws)
            return _assemble(shuffled, cuts, n_clients)
    raise InputError(
        f"no Dirichlet(alpha={alpha:g}) draw in {max_draws} gave every one of {n_clients} clients at least "
        f"{min_size} samples; lower min_size or raise alpha"
    )


def _piece_sizes(cuts: np.ndarray, size: int) -> np.ndarray:
    """The lengths of ``np.split(array of size, cuts)``'s pieces, without splitting."""
    bounds = np.clip(np.concatenate(([0], cuts, [size])), 0, size)
    return np.maximum(np.diff(bounds), 0)


def _assemble(shuffled: list[np.ndarray], cuts: list[np.ndarray], n_clients: int) -> Partition:
    """Client i's sorted indices: the i-th piece of every class's shuffled members cut at that class's cuts."""
    pieces = [np.split(members, at) for members, at in zip(shuffled, cuts)]
    return [np.sort(np.concatenate([split[i] for split in pieces])) for i in range(n_clients)]


def dirichlet_hsu(labels: ArrayLike, n_clients: int, rng: np.random.Generator, alpha: float = 0.5) -> Partition:
    """Label skew (Hsu et al. 2019): client i's class mix q_i ~ Dirichlet(α·prior), prior = the global class
    frequencies; every client gets n/N samples (sizes differ by at most one, the first clients larger).

    Client i's samples are drawn from the class pools without replacement, in class proportions q_i: its count
    per class ~ Multinomial(n_i, q_i). The pools are finite and together hold exactly n samples, so a class runs
    out before the last clients: the samples a client cannot get from an exhausted class are redrawn over the
    classes that still have samples with q_i renormalised on them, or, when q_i has no mass left there (small α
    puts all of it on one class), in proportion to what is left (uniformly over the remaining samples). The last
    clients thus take the leftovers and can be far from their q_i, at any α (the draws' noise accumulates in
    what is left); clients are filled in index order, which is a random order as the q_i are i.i.d.
    Small α gives each client essentially one class (α = 0.01 with 10 classes: most clients hold one); large α
    tends to iid. Never loops forever: each redraw of a client exhausts a class.

    >>> parts = dirichlet_hsu(np.repeat(np.arange(3), 10), 4, np.random.default_rng(0), alpha=0.1)
    >>> [len(part) for part in parts], sorted(np.concatenate(parts).tolist()) == list(range(30))
    ([8, 8, 7, 7], True)
    """
    labels, n_clients = _labels(labels, n_clients)
    alpha = float(_validate.positive("alpha", alpha))
    classes, class_of = np.unique(labels, return_inverse=True)
    # Each class's pool in random order; a client takes the next samples of a pool.
    pools = [rng.permutation(np.flatnonzero(class_of == c)) for c in range(classes.size)]
    remaining = np.array([pool.size for pool in pools], dtype=np.int64)
    taken = np.zeros(classes.size, dtype=np.int64)
    prior = remaining / labels.size
    q = np.nan_to_num(rng.dirichlet(alpha * prior, size=n_clients))  # numpy can give NaN rows at tiny α
    sizes = np.full(n_clients, labels.size // n_clients) + (np.arange(n_clients) < labels.size % n_clients)
    parts: Partition = []
    for q_i, size in zip(q, sizes):
        counts = np.zeros(classes.size, dtype=np.int64)
        need = int(size)
        while need:
            left = remaining - counts
            weights = np.where(left > 0, q_i, 0.0)
            if weights.sum() <= 0:  # no mass of q_i on a class with samples left: the remaining samples' mix
                weights = left.astype(float)
            draw = np.minimum(rng.multinomial(need, weights / weights.sum()), left)
            counts += draw
            need -= int(draw.sum())
        parts.append(np.sort(np.concatenate([pool[t : t + k] for pool, t, k in zip(pools, taken, counts)])))
        taken += counts
        remaining -= counts
    return parts


def dirichlet_capped(
    labels: ArrayLike, n_clients: int, rng: np.random.Generator, alpha: float = 0.5, min_size: int = 0,
    max_draws: int = 1000,
) -> Partition:  # fmt: skip
    """NIID-Bench's own loop (Li et al. 2022; MOON's and FedCOG's code): class by class, q_c ~ Dirichlet(α·1_N),
    but a client that already holds n/N samples or more gets no share of the classes that follow (q_{c,i} := 0,
    renormalised; the cap :func:`dirichlet` omits); each class is cut at floor(cumsum(q_c)·n_c). Redraws the whole
    partition until every client has ``min_size`` samples (at most ``max_draws`` times; InputError after).

    >>> parts = dirichlet_capped(np.repeat(np.arange(3), 10), 3, np.random.default_rng(0), alpha=0.1)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(30))
    True
    """
    labels, n_clients, alpha, min_size, max_draws = _dirichlet_args(labels, n_clients, alpha, min_size, max_draws)
    members = [np.flatnonzero(labels == cls) for cls in np.unique(labels)]
    for _ in range(max_draws):
        shuffled, cuts, sizes = [], [], np.zeros(n_clients, dtype=np.int64)
        for idx in members:
            shuffled.append(rng.permutation(idx))
            q = np.nan_to_num(rng.dirichlet(np.full(n_clients, alpha)))
            capped = q * (sizes < labels.size / n_clients)
            q = capped if capped.sum() > 0 else q  # every client with mass is full: keep the draw as it is
            if q.sum() <= 0:  # numpy's sampler can return a NaN row for tiny α: one owner
                q = np.eye(n_clients)[rng.integers(n_clients)]
            cuts.append((np.cumsum(q / q.sum()) * idx.size).astype(np.int64)[:-1])
            sizes += _piece_sizes(cuts[-1], idx.size)
        if sizes.min() >= min_size:
            return _assemble(shuffled, cuts, n_clients)
    raise InputError(
        f"no capped Dirichlet(alpha={alpha:g}) draw in {max_draws} gave every one of {n_clients} clients at least "
        f"{min_size} samples; lower min_size or raise alpha"
    )


def fedssyn_group(n_clients: int, n_classes: int, alpha: float) -> int:
    """The clients of one Dirichlet group in Fedssyn's code (``build_non_iid_by_dirichlet``, its
    ``n_auxi_worker``): 20 for N = 40 at α = 0.1, 10 for N = 40 at α = 0.01 and for N = 100 with 10 classes, 20 for
    N = 100 with 100 classes at α = 0.01, otherwise all N (one group).

    >>> fedssyn_group(40, 10, 0.1), fedssyn_group(100, 10, 0.01), fedssyn_group(10, 10, 0.1)
    (20, 10, 10)
    """
    if n_clients == 40 and alpha in (0.1, 0.01):
        return 20 if alpha == 0.1 else 10
    if n_clients == 100 and n_classes == 10:
        return 10
    if n_clients == 100 and n_classes == 100 and alpha == 0.01:
        return 20
    return n_clients


def dirichlet_fedssyn(
    labels: ArrayLike, n_clients: int, rng: np.random.Generator, alpha: float = 0.5, max_draws: int = 1000
) -> Partition:
    """Fedssyn's partition (its code's ``build_non_iid_by_dirichlet`` and ``DataPartitioner``, after FedDF, Lin et
    al. 2020, the paper's [25]; shared/notes/fedssyn_code.md):

    1. the samples in a random order are cut into groups, one per :func:`fedssyn_group` clients (groups of 10 or 20
       when N = 40 or 100; one group otherwise);
    2. within a group of g clients and s samples, class by class, q_c ~ Dirichlet(α·1_g), with no share for a
       client that already holds s/g samples or more; the group is redrawn until every client holds at least
       int(s / (2g)) samples (at most ``max_draws`` times; InputError after: the authors' loop has no bound);
    3. the groups' clients' samples, concatenated in client order, are cut into N consecutive pieces of equal size:
       client i gets the i-th piece, so every client holds n/N samples and its classes are mostly those of its
       Dirichlet share, with a neighbour's at the edges.

    Three deviations: so that every sample has one client, the last group takes the samples that the authors'
    int() rounding of the group sizes leaves out, and the final pieces differ in size by at most one
    (``np.array_split``) where theirs drop the n mod N samples left over; a class is cut at
    floor(cumsum(q_c)·n_c + 1e-9), so that a cumulative share of 1 that floats round to 0.999… is not cut one
    sample short (their int() does that).

    >>> parts = dirichlet_fedssyn(np.repeat(np.arange(4), 20), 4, np.random.default_rng(0), alpha=0.1)
    >>> [len(c) for c in parts], sorted(np.concatenate(parts).tolist()) == list(range(80))
    ([20, 20, 20, 20], True)
    """
    labels, n_clients, alpha, _, max_draws = _dirichlet_args(labels, n_clients, alpha, 0, max_draws)
    classes = np.unique(labels)
    group = fedssyn_group(n_clients, classes.size, alpha)
    counts = [group] * (-(-n_clients // group))
    counts[-1] = n_clients - group * (len(counts) - 1)
    order = rng.permutation(labels.size)
    ends = np.cumsum([int(c / n_clients * labels.size) for c in counts])
    ends[-1] = labels.size
    shares: list[np.ndarray] = []
    for members, g in zip(np.split(order, ends[:-1]), counts):
        shares += _capped_group(members, labels[members], classes, g, alpha, rng, max_draws)
    return [np.sort(piece) for piece in np.array_split(np.concatenate(shares), n_clients)]


def _capped_group(members, member_labels, classes, g, alpha, rng, max_draws) -> list[np.ndarray]:
    """Step 2 of :func:`dirichlet_fedssyn` for one group: each client's samples (as indices into the data set)."""
    size = members.size
    for _ in range(max_draws):
        held: list[list[np.ndarray]] = [[] for _ in range(g)]
        sizes = np.zeros(g, dtype=np.int64)
        for cls in classes:
            idx = members[member_labels == cls]
            q = np.nan_to_num(rng.dirichlet(np.full(g, alpha)))
            capped = q * (sizes < size / g)
            q = capped if capped.sum() > 0 else q
            if q.sum() <= 0:  # numpy's sampler can return a NaN row for tiny α: one owner
                q = np.eye(g)[rng.integers(g)]
            cuts = np.floor(np.cumsum(q / q.sum()) * idx.size + 1e-9).astype(np.int64)[:-1]  # int(), less float fuzz
            for i, piece in enumerate(np.split(idx, cuts)):
                held[i].append(piece)
                sizes[i] += piece.size
        if sizes.min() >= int(0.5 * size / g):
            return [np.concatenate(h) for h in held]
    raise InputError(
        f"no Fedssyn Dirichlet(alpha={alpha:g}) draw in {max_draws} gave every one of a group's {g} clients at least "
        f"half of its {size} samples' average; raise alpha"
    )


def dirichlet_balanced(
    labels: ArrayLike, n_clients: int, rng: np.random.Generator, alpha: float = 0.5, iterations: int = 1000
) -> Partition:
    """DynaFed's code (``split_dirichlet`` with ``make_double_stochstic``): the C × N matrix of q_c ~
    Dirichlet(α·1_N) is balanced by Sinkhorn's iteration (columns, then rows, normalised to sum 1, up to
    ``iterations`` times or until both are exactly 1), so every class is split whole and every client holds
    about n/N samples; class c is cut at floor(cumsum(q_c)·n_c). A client whose column is all zero (possible at
    tiny α) stays empty, which a run refuses.

    >>> parts = dirichlet_balanced(np.repeat(np.arange(4), 20), 4, np.random.default_rng(0), alpha=0.1)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(80))
    True
    """
    labels, n_clients = _labels(labels, n_clients)
    alpha = float(_validate.positive("alpha", alpha))
    iterations = _validate.count("iterations", iterations)
    members = [np.flatnonzero(labels == cls) for cls in np.unique(labels)]
    q = np.nan_to_num(rng.dirichlet(np.full(n_clients, alpha), size=len(members)))
    with np.errstate(invalid="ignore", divide="ignore"):
        for _ in range(iterations):
            q = np.nan_to_num(q / q.sum(0))
            q = np.nan_to_num(q / q.sum(1)[:, None])
            if np.all(q.sum(1) == 1) and np.all(q.sum(0) == 1):
                break
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for idx, q_c in zip(members, q):
        if q_c.sum() <= 0:  # a class with no mass anywhere: one owner
            q_c = np.eye(n_clients)[rng.integers(n_clients)]
        cuts = (np.cumsum(q_c / q_c.sum()) * idx.size).astype(np.int64)[:-1]
        for i, piece in enumerate(np.split(rng.permutation(idx), cuts)):
            parts[i].append(piece)
    return [np.sort(np.concatenate(p)) for p in parts]


def label_groups(labels: ArrayLike, n_clients: int, rng: np.random.Generator, classes_per_client: int = 2) -> Partition:
    """FedCOG's code ``noniid-skew-k`` (its NIID-2 with k = 2): the C classes form C/k groups of k consecutive
    labels; client i holds group i mod (C/k), and each class is cut into equal blocks, one per client that holds
    it (so with 10 clients and k = 2, clients i and i + 5 share the same two classes, 3,000 images of each on
    FMNIST). Deterministic apart from the order inside a class (``rng``). Needs C divisible by k and N ≥ C/k.

    >>> [len(c) for c in label_groups(np.repeat(np.arange(4), 4), 4, np.random.default_rng(0))]
    [4, 4, 4, 4]
    """
    labels, n_clients = _labels(labels, n_clients)
    k = _validate.count("classes_per_client", classes_per_client)
    classes = np.unique(labels)
    if classes.size % k:
        raise InputError(f"label-groups: {classes.size} classes do not form groups of {k}")
    n_groups = classes.size // k
    if n_clients < n_groups:
        raise InputError(f"label-groups: {n_clients} clients cannot hold all {n_groups} groups of {k} classes")
    group = np.arange(n_clients) % n_groups
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c, cls in enumerate(classes):
        holders = np.flatnonzero(group == c // k)
        for i, piece in zip(holders, np.array_split(rng.permutation(np.flatnonzero(labels == cls)), holders.size)):
            parts[i].append(piece)
    return [np.sort(np.concatenate(p)) for p in parts]


PARTITIONERS: dict[str, Callable[..., Partition]] = {
    "iid": iid,
    "split-by-class": split_by_class,
    "shards": shards,
    "dirichlet": dirichlet,
    "dirichlet-hsu": dirichlet_hsu,
    "dirichlet-capped": dirichlet_capped,
    "dirichlet-balanced": dirichlet_balanced,
    "dirichlet-fedssyn": dirichlet_fedssyn,
    "label-groups": label_groups,
}


NATURAL = "natural"  # the clients a dataset names itself (an npz's client_ids): :func:`natural`
PLUGIN_PARAMS = ("alpha", "min_size", "classes_per_client")  # the config keys a plug-in partitioner may take


def natural(client_ids: ArrayLike, n_clients: int) -> Partition:
    """The clients a dataset names (``client_ids``, one per sample): client k holds the samples of the k-th
    smallest id. ``n_clients`` must be the number of distinct ids.

    >>> [c.tolist() for c in natural([7, 3, 7, 3, 9], 3)]
    [[1, 3], [0, 2], [4]]
    """
    ids = np.asarray(client_ids)
    distinct, inverse = np.unique(ids, return_inverse=True)
    if distinct.size != n_clients:
        raise InputError(f"config data.clients: the data's client_ids name {distinct.size} clients, not {n_clients}")
    order = np.argsort(inverse, kind="stable")
    return [np.sort(part) for part in np.split(order, np.cumsum(np.bincount(inverse, minlength=n_clients))[:-1])]


def partitioner_params(function: Callable, key: str = "data.partition") -> tuple[str, ...]:
    """The config keys (of :data:`PLUGIN_PARAMS`) a plug-in partitioner takes; InputError when it cannot be called
    as ``function(labels, n_clients, rng, **those keys)``."""
    try:
        signature = inspect.signature(function)
        named = tuple(k for k in PLUGIN_PARAMS if k in signature.parameters)
        signature.bind(np.zeros(1, np.int64), 1, np.random.default_rng(0), **dict.fromkeys(named))
    except (TypeError, ValueError):
        raise InputError(f"config {key}: a partitioner is called as f(labels, n_clients, rng, **keys)") from None
    return named


def check_partition(parts, n_samples: int, n_clients: int, name: str) -> Partition:
    """A plug-in partitioner's result, checked: ``n_clients`` integer index arrays into ``n_samples``, no index
    twice (a sample may be left out)."""
    if not isinstance(parts, list | tuple) or len(parts) != n_clients:
        raise InputError(f"partition {name}: must return a list of {n_clients} index arrays")
    out = [np.asarray(part) for part in parts]
    if any(part.ndim != 1 or (part.size and not np.issubdtype(part.dtype, np.integer)) for part in out):
        raise InputError(f"partition {name}: every client's indices must be a 1-d integer array")
    every = np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)
    if every.size and (every.min() < 0 or every.max() >= n_samples):
        raise InputError(f"partition {name}: indices outside 0..{n_samples - 1}")
    if np.unique(every).size != every.size:
        raise InputError(f"partition {name}: a sample is given to two clients (or twice to one)")
    return [np.sort(part.astype(np.int64)) for part in out]


def partition(name: str, labels: ArrayLike, n_clients: int, rng: np.random.Generator, **params) -> Partition:
    """Dispatch by name (a key of :data:`PARTITIONERS`, or a plug-in "package.module:function", see
    :mod:`fl.plugins`) with keyword parameters."""
    if is_plugin(name):
        function = resolve(name, "data.partition", what="a partitioner")
        return check_partition(function(np.asarray(labels), n_clients, rng, **params), len(labels), n_clients, name)
    if name not in PARTITIONERS:
        raise InputError(f"unknown partition {name!r}; known: {', '.join(PARTITIONERS)}")
    try:
        return PARTITIONERS[name](labels, n_clients, rng, **params)
    except TypeError as error:
        raise InputError(f"partition {name!r}: {error}") from None
