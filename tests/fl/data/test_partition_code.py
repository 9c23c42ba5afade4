"""The partitioners of the papers' code (fl.data.partition): dirichlet-capped (NIID-Bench's loop, MOON's and
FedCOG's code), dirichlet-balanced (DynaFed's Sinkhorn-balanced split) and label-groups (FedCOG's k-label skew).
Every sample once, sorted within a client, pure functions of the generator, the documented sizes and class
structure, and guards that raise InputError; and fl.config accepts their names."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl.config import DataConfig
from fl.data.partition import PARTITIONERS, dirichlet_balanced, dirichlet_capped, label_groups, partition
from theory.errors import InputError

SETTINGS = settings(max_examples=50, deadline=None)
seeds = st.integers(0, 2**32 - 1)
label_lists = st.lists(st.integers(0, 5), min_size=1, max_size=120)
alphas = st.sampled_from([0.001, 0.01, 0.1, 0.5, 1.0, 10.0, 1000.0])
MNIST_LIKE = np.repeat(np.arange(10), 6000)  # 10 classes x 6000 (n = 60,000)


def check_partition(parts, n, n_clients):
    """n_clients integer arrays; every index 0..n-1 in exactly one client; indices sorted inside each client."""
    assert len(parts) == n_clients
    assert all(part.ndim == 1 and np.issubdtype(part.dtype, np.integer) for part in parts)
    assert all(np.all(np.diff(part) > 0) for part in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def same_partition(a, b):
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))


def sizes_of(parts):
    return np.array([len(part) for part in parts])


# ------------------------------------------------------------------------------------------ dirichlet-capped


@given(labels=label_lists, n_clients=st.integers(1, 12), alpha=alphas, min_size=st.integers(0, 6), seed=seeds)
@SETTINGS
def test_dirichlet_capped(labels, n_clients, alpha, min_size, seed):
    labels = np.array(labels)

    def run():
        return dirichlet_capped(labels, n_clients, np.random.default_rng(seed), alpha=alpha, min_size=min_size,
                                max_draws=20)  # fmt: skip

    if n_clients > labels.size:
        with pytest.raises(InputError, match="every client needs one sample"):
            run()
        return
    if min_size * n_clients > labels.size:
        with pytest.raises(InputError, match="exceeds the"):
            run()
        return
    try:
        parts = run()
    except InputError as error:  # a bounded number of redraws, then a clear error (never loops forever)
        assert "no capped Dirichlet" in str(error) and min_size > 0
        return
    check_partition(parts, labels.size, n_clients)
    assert sizes_of(parts).min() >= min_size
    assert same_partition(parts, run())
    if alpha >= 0.1:
        # The cap: a client receives a class only while it holds fewer than n/N samples, so it ends below n/N plus
        # the largest class. The last client also takes the floor-rounding remainder of every class's cuts (at
        # most one sample per class, see the xfail below). Not checked at tiny α, where a class whose mass lies
        # only on full clients keeps its draw (as documented).
        sizes, bound = sizes_of(parts), labels.size / n_clients + np.bincount(labels).max()
        assert sizes[:-1].max(initial=0) < bound
        assert sizes[-1] < bound + np.unique(labels).size


def test_dirichlet_capped_respects_min_size_on_mnist_sizes():
    for seed in range(3):
        parts = dirichlet_capped(MNIST_LIKE, 10, np.random.default_rng(seed), alpha=0.1, min_size=100)
        check_partition(parts, MNIST_LIKE.size, 10)
        assert sizes_of(parts).min() >= 100


def test_dirichlet_capped_caps_clients_at_the_average_plus_one_class():
    # Measured over seeds 0..199: largest client 11,979 < 12,000 at α = 0.1 (at α = 0.01 two seeds exceed it,
    # through the documented fallback when all of a class's mass lies on full clients).
    n, n_clients = MNIST_LIKE.size, 10
    for seed in range(5):
        parts = dirichlet_capped(MNIST_LIKE, n_clients, np.random.default_rng(seed), alpha=0.1)
        check_partition(parts, n, n_clients)
        sizes = sizes_of(parts)
        assert sizes.max() < n / n_clients + 6000
        assert sizes.std() > 1000  # still label skew at these α (not a balanced split)


@pytest.mark.xfail(
    strict=True,
    reason="the cuts floor cumsum(q)·n_c; when the capped q sums to 1 - 1e-16 the last client, though full, "
    "takes the remainder (one sample of a class), as NIID-Bench's code does",
)
def test_dirichlet_capped_gives_a_full_last_client_nothing_more():
    labels = np.repeat(np.arange(10), 3)  # n/N = 3 with 10 clients
    parts = dirichlet_capped(labels, 10, np.random.default_rng(0), alpha=1.0)
    # A client below 3 samples gets at most one class (3 samples) more: no client can end with more than 5.
    assert sizes_of(parts).max() <= 5, sizes_of(parts).tolist()  # got [2, 3, 3, 3, 3, 2, 3, 1, 3, 7]


def test_dirichlet_capped_refuses_an_impossible_min_size():
    labels = np.repeat(np.arange(3), 10)
    with pytest.raises(InputError, match="min_size 4 x 8 clients exceeds the 30 samples"):
        dirichlet_capped(labels, 8, np.random.default_rng(0), alpha=0.5, min_size=4)
    with pytest.raises(InputError, match="in 5 gave every one of 10 clients at least 3 samples"):
        dirichlet_capped(labels, 10, np.random.default_rng(0), alpha=0.001, min_size=3, max_draws=5)


# ---------------------------------------------------------------------------------------- dirichlet-balanced


@given(labels=label_lists, n_clients=st.integers(1, 12), alpha=alphas, seed=seeds)
@SETTINGS
def test_dirichlet_balanced(labels, n_clients, alpha, seed):
    labels = np.array(labels)

    def run():
        return dirichlet_balanced(labels, n_clients, np.random.default_rng(seed), alpha=alpha, iterations=200)

    if n_clients > labels.size:
        with pytest.raises(InputError, match="every client needs one sample"):
            run()
        return
    parts = run()
    check_partition(parts, labels.size, n_clients)
    assert same_partition(parts, run())


@pytest.mark.parametrize("alpha", [0.01, 0.1, 100.0])
def test_dirichlet_balanced_gives_clients_of_about_n_over_n(alpha):
    n_clients = 80
    average = MNIST_LIKE.size / n_clients  # 750
    parts = dirichlet_balanced(MNIST_LIKE, n_clients, np.random.default_rng(0), alpha=alpha)
    check_partition(parts, MNIST_LIKE.size, n_clients)
    sizes = sizes_of(parts)
    # Measured over seeds 0..199 at α = 0.01: max |size - 750| <= 8 (1.1%), and >= 98.75% of clients within 1%.
    assert abs(np.median(sizes) - average) <= 3
    assert np.abs(sizes - average).max() <= 0.02 * average
    assert np.mean(np.abs(sizes - average) <= 0.01 * average) >= 0.9


def class_fractions(parts, labels, n_classes=10):
    return np.array([np.bincount(labels[part], minlength=n_classes) / len(part) for part in parts])


def test_dirichlet_balanced_is_skewed_at_small_alpha_and_close_to_iid_at_large_alpha():
    fractions = {
        alpha: class_fractions(dirichlet_balanced(MNIST_LIKE, 80, np.random.default_rng(1), alpha=alpha), MNIST_LIKE)
        for alpha in (0.01, 100.0)
    }
    # α = 100: every client's class mix within 0.06 of uniform (measured: <= 0.04 over seeds 0..2).
    assert np.abs(fractions[100.0] - 0.1).max() < 0.06
    # α = 0.01: most clients are dominated by one class.
    assert np.median(fractions[0.01].max(1)) > 0.9


# -------------------------------------------------------------------------------------------- label-groups


@given(labels=label_lists, n_clients=st.integers(1, 12), k=st.integers(1, 4), seed=seeds)
@SETTINGS
def test_label_groups(labels, n_clients, k, seed):
    labels = np.array(labels)
    classes = np.unique(labels)

    def run():
        return label_groups(labels, n_clients, np.random.default_rng(seed), classes_per_client=k)

    if n_clients > labels.size or classes.size % k or n_clients < classes.size // k:
        with pytest.raises(InputError):
            run()
        return
    parts = run()
    check_partition(parts, labels.size, n_clients)
    assert same_partition(parts, run())
    n_groups = classes.size // k
    for i, part in enumerate(parts):  # client i: only the classes of group i mod (C/k), k consecutive ones
        group = classes[(i % n_groups) * k : (i % n_groups + 1) * k]
        assert set(labels[part].tolist()) <= set(group.tolist())
    for c, cls in enumerate(classes):  # each class in equal blocks (differing by at most one) over its holders
        holders = [i for i in range(n_clients) if i % n_groups == c // k]
        counts = [int(np.sum(labels[parts[i]] == cls)) for i in holders]
        assert sum(counts) == np.sum(labels == cls) and max(counts) - min(counts) <= 1


def test_label_groups_ten_classes_ten_clients_two_labels_each():
    labels = np.repeat(np.arange(10), 600)
    parts = label_groups(labels, 10, np.random.default_rng(0), classes_per_client=2)
    check_partition(parts, labels.size, 10)
    for i, part in enumerate(parts):
        group = 2 * (i % 5)
        counts = np.bincount(labels[part], minlength=10)
        expected = np.zeros(10, dtype=np.int64)
        expected[[group, group + 1]] = 300
        assert np.array_equal(counts, expected), i


def test_label_groups_guards():
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(InputError, match="10 classes do not form groups of 3"):
        label_groups(labels, 10, np.random.default_rng(0), classes_per_client=3)
    with pytest.raises(InputError, match="4 clients cannot hold all 5 groups of 2 classes"):
        label_groups(labels, 4, np.random.default_rng(0), classes_per_client=2)
    with pytest.raises(InputError):
        label_groups(labels, 10, np.random.default_rng(0), classes_per_client=0)


# --------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("name", "function", "expected"),
    [
        ("dirichlet-capped", dirichlet_capped, {"alpha": 0.3, "min_size": 2}),
        ("dirichlet-balanced", dirichlet_balanced, {"alpha": 0.3}),
        ("label-groups", label_groups, {"classes_per_client": 2}),
    ],
)
def test_config_accepts_the_names(name, function, expected):
    assert PARTITIONERS[name] is function
    config = DataConfig(partition=name, alpha=0.3, min_size=2, classes_per_client=2, clients=4)
    config.check()
    params = config.partition_params()
    assert params == expected
    labels = np.repeat(np.arange(4), 10)
    parts = partition(name, labels, config.clients, np.random.default_rng(0), **params)
    check_partition(parts, labels.size, config.clients)
    assert same_partition(parts, function(labels, config.clients, np.random.default_rng(0), **params))
