"""Partitioners (fl.data.partition): every sample exactly once, the documented sizes and class structure, pure
functions of the generator, and guards that raise InputError (never loop forever)."""

import time

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fl.data.partition import PARTITIONERS, dirichlet, iid, partition, shards, split_by_class
from theory.errors import InputError

SETTINGS = settings(max_examples=50, deadline=None)
seeds = st.integers(0, 2**32 - 1)
label_lists = st.lists(st.integers(0, 5), min_size=1, max_size=120)


def check_partition(parts, n):
    """Every index 0..n-1 in exactly one client; integer indices sorted inside each client."""
    assert all(part.ndim == 1 and np.issubdtype(part.dtype, np.integer) for part in parts)
    assert all(np.all(np.diff(part) > 0) for part in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def classes_of(labels, parts):
    return [np.unique(labels[part]).tolist() for part in parts]


# ------------------------------------------------------------------------------------------------ iid


@given(labels=label_lists, n_clients=st.integers(1, 30), seed=seeds)
@SETTINGS
def test_iid(labels, n_clients, seed):
    labels = np.array(labels)
    if n_clients > labels.size:
        with pytest.raises(InputError, match="every client needs one sample"):
            iid(labels, n_clients, np.random.default_rng(seed))
        return
    parts = iid(labels, n_clients, np.random.default_rng(seed))
    assert len(parts) == n_clients
    check_partition(parts, labels.size)
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1


# ------------------------------------------------------------------------------------- split by class


@given(labels=label_lists, n_clients=st.integers(1, 20), seed=seeds)
@SETTINGS
def test_split_by_class(labels, n_clients, seed):
    labels = np.array(labels)
    classes = np.unique(labels)
    owners = [len(range(c, n_clients, classes.size)) for c in range(classes.size)]
    counts = [int(np.sum(labels == cls)) for cls in classes]
    rng = np.random.default_rng(seed)
    if n_clients > labels.size or n_clients < classes.size or any(m < o for m, o in zip(counts, owners)):
        with pytest.raises(InputError):
            split_by_class(labels, n_clients, rng)
        return
    parts = split_by_class(labels, n_clients, rng)
    check_partition(parts, labels.size)
    # Client i holds exactly class i mod C (of the classes present), and nothing else.
    assert classes_of(labels, parts) == [[int(classes[i % classes.size])] for i in range(n_clients)]
    for c in range(classes.size):  # clients sharing a class differ by at most one sample
        sizes = [len(parts[i]) for i in range(c, n_clients, classes.size)]
        assert max(sizes) - min(sizes) <= 1


def test_split_by_class_needs_a_client_per_class():
    labels = np.repeat(np.arange(10), 5)
    with pytest.raises(InputError, match=r"at least one client per class \(10\), got 9"):
        split_by_class(labels, 9, np.random.default_rng(0))


def test_split_by_class_with_a_class_too_small_to_share():
    with pytest.raises(InputError, match="class 1 has 1 samples for 2 clients"):
        split_by_class([0, 0, 0, 1], 4, np.random.default_rng(0))


# --------------------------------------------------------------------------------------------- shards


@given(labels=label_lists, n_clients=st.integers(1, 20), k=st.integers(1, 4), seed=seeds)
@SETTINGS
def test_shards(labels, n_clients, k, seed):
    labels = np.array(labels)
    rng = np.random.default_rng(seed)
    if n_clients * k > labels.size:
        with pytest.raises(InputError):
            shards(labels, n_clients, rng, classes_per_client=k)
        return
    parts = shards(labels, n_clients, rng, classes_per_client=k)
    assert len(parts) == n_clients
    check_partition(parts, labels.size)
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= k


@given(
    n_classes=st.integers(1, 6),
    shard_size=st.integers(1, 5),
    n_clients=st.integers(1, 8),
    k=st.integers(1, 3),
    seed=seeds,
)
@SETTINGS
def test_shards_hold_at_most_k_classes_when_shards_align_with_classes(n_classes, shard_size, n_clients, k, seed):
    """When every class is a whole number of shards (as Fashion-MNIST's 6,000 per class in 200 shards of 300),
    no shard straddles two classes and a client holds at most k classes."""
    assume((n_clients * k) % n_classes == 0)
    per_class = shard_size * (n_clients * k // n_classes)
    labels = np.repeat(np.arange(n_classes), per_class)
    parts = shards(labels, n_clients, np.random.default_rng(seed), classes_per_client=k)
    check_partition(parts, labels.size)
    assert all(len(part) == k * shard_size for part in parts)
    assert all(1 <= len(c) <= k for c in classes_of(labels, parts))


def test_shards_straddling_a_class_boundary():
    """Documented behaviour (McMahan et al.'s split): shards cut from the label-sorted order straddle class
    boundaries whenever a class is not a whole number of shards (e.g. real MNIST, 5,421 to 6,742 per class in
    shards of 300). Minimal case: classes of sizes (3, 3, 4) in 5 shards of 2; the second shard is
    [class 0, class 1], so with one shard per client (k = 1) its client holds two classes."""
    labels = np.repeat(np.arange(3), [3, 3, 4])
    parts = shards(labels, 5, np.random.default_rng(0), classes_per_client=1)
    assert max(len(c) for c in classes_of(labels, parts)) == 2, classes_of(labels, parts)


def test_shards_too_many():
    with pytest.raises(InputError, match="10 clients x 3 shards exceeds the 29 samples"):
        shards(np.zeros(29, dtype=int), 10, np.random.default_rng(0), classes_per_client=3)


# ------------------------------------------------------------------------------------------ dirichlet


@given(
    labels=label_lists,
    n_clients=st.integers(1, 12),
    alpha=st.sampled_from([0.01, 0.1, 0.5, 2.0, 50.0]),
    min_size=st.integers(0, 3),
    seed=seeds,
)
@SETTINGS
def test_dirichlet(labels, n_clients, alpha, min_size, seed):
    labels = np.array(labels)
    rng = np.random.default_rng(seed)
    if n_clients > labels.size or min_size * n_clients > labels.size:
        with pytest.raises(InputError):
            dirichlet(labels, n_clients, rng, alpha=alpha, min_size=min_size)
        return
    try:
        parts = dirichlet(labels, n_clients, rng, alpha=alpha, min_size=min_size, max_draws=200)
    except InputError as error:  # possible only when a minimum size is asked for
        assert min_size > 0 and "no Dirichlet" in str(error)
        return
    assert len(parts) == n_clients
    check_partition(parts, labels.size)
    assert min(len(part) for part in parts) >= min_size


def test_dirichlet_tiny_alpha_is_valid_and_fast():
    """numpy's Dirichlet sampler can return NaN rows for tiny alpha; each such class goes to one client."""
    labels = np.repeat(np.arange(10), 100)
    start = time.perf_counter()
    for seed in range(20):
        parts = dirichlet(labels, 50, np.random.default_rng(seed), alpha=1e-4, min_size=0)
        check_partition(parts, labels.size)
        assert len(parts) == 50
    assert time.perf_counter() - start < 5


def test_dirichlet_impossible_min_size_gives_up():
    """2 classes and alpha = 1e-4: each class lands on ~one client, so 10 clients never all get 5 samples."""
    labels = np.repeat(np.arange(2), 50)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"no Dirichlet.* in 20 .* at least 5 samples"):
        dirichlet(labels, 10, np.random.default_rng(0), alpha=1e-4, min_size=5, max_draws=20)
    assert time.perf_counter() - start < 2


def test_dirichlet_min_size_beyond_the_samples():
    with pytest.raises(InputError, match="min_size 11 x 10 clients exceeds the 100 samples"):
        dirichlet(np.zeros(100, dtype=int), 10, np.random.default_rng(0), min_size=11)


@pytest.mark.parametrize(
    "kwargs", [{"alpha": 0}, {"alpha": -1}, {"alpha": float("nan")}, {"min_size": -1}, {"max_draws": 0}]
)
def test_dirichlet_bad_parameters(kwargs):
    with pytest.raises(InputError):
        dirichlet(np.repeat(np.arange(2), 10), 4, np.random.default_rng(0), **kwargs)


def test_dirichlet_large_alpha_is_nearly_uniform():
    """alpha = 100, 10 classes x 1,000 samples, 10 clients, seed 0: every client's class proportions within 0.06 of
    1/10 (each is ~ Beta(100, 900), sd 0.0095; the largest of the 100 deviations stayed below 0.04 over 300 seeds)."""
    labels = np.repeat(np.arange(10), 1000)
    parts = dirichlet(labels, 10, np.random.default_rng(0), alpha=100)
    proportions = np.array([np.bincount(labels[part], minlength=10) / len(part) for part in parts])
    assert np.abs(proportions - 0.1).max() < 0.06


def test_dirichlet_small_alpha_gives_about_one_class_per_client():
    """alpha = 0.01, 10 classes x 1,000 samples, 50 clients (so class collisions are rare), seed 0: each class
    lands almost entirely on one client, so most non-empty clients hold essentially one class. Checked: more than
    half of them have >= 90% of one class (min over 300 seeds 0.59), and the mean effective number of classes
    1/sum(pi_c^2) is below 1.5 (max over 300 seeds 1.37; alpha = 100 gives ~10)."""
    labels = np.repeat(np.arange(10), 1000)
    parts = dirichlet(labels, 50, np.random.default_rng(0), alpha=0.01)
    counts = np.array([np.bincount(labels[part], minlength=10) for part in parts if len(part)])
    proportions = counts / counts.sum(axis=1, keepdims=True)
    assert np.mean(proportions.max(axis=1) >= 0.9) > 0.5
    assert np.mean(1 / np.sum(proportions**2, axis=1)) < 1.5


# ------------------------------------------------------------------------------ determinism and guards


CASES = [("iid", {}), ("split-by-class", {}), ("shards", {"classes_per_client": 2}), ("dirichlet", {"alpha": 0.5})]


@pytest.mark.parametrize(("name", "params"), CASES)
def test_same_seed_same_partition_different_seed_different(name, params):
    labels = np.repeat(np.arange(5), 40)
    first = partition(name, labels, 10, np.random.default_rng(7), **params)
    again = partition(name, labels, 10, np.random.default_rng(7), **params)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    # Seeds 7 and 8 happen to differ here (a fixed pair, so deterministic); for 200 samples a collision of two
    # random partitions is astronomically unlikely anyway.
    other = partition(name, labels, 10, np.random.default_rng(8), **params)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize(("name", "params"), CASES)
def test_dispatch_equals_the_direct_call(name, params):
    labels = np.repeat(np.arange(5), 12)
    via_name = partition(name, labels, 5, np.random.default_rng(3), **params)
    direct = PARTITIONERS[name](labels, 5, np.random.default_rng(3), **params)
    assert all(np.array_equal(a, b) for a, b in zip(via_name, direct))


@pytest.mark.parametrize(("name", "params"), CASES)
def test_more_clients_than_samples(name, params):
    with pytest.raises(InputError, match="11 clients but only 10 samples"):
        partition(name, np.arange(10) % 2, 11, np.random.default_rng(0), **params)


@pytest.mark.parametrize("name", PARTITIONERS)
@pytest.mark.parametrize(
    "labels", [[0.0, 1.0, 2.0], [[0, 1], [1, 0]], [-1, 0, 1], ["a", "b", "c"]], ids=["float", "2-d", "neg", "str"]
)
def test_bad_labels(name, labels):
    with pytest.raises(InputError, match="labels must be"):
        partition(name, labels, 1, np.random.default_rng(0))


@pytest.mark.parametrize("n_clients", [0, -1, 1.5, "two"])
def test_bad_client_count(n_clients):
    with pytest.raises(InputError, match="n_clients"):
        iid(np.zeros(5, dtype=int), n_clients, np.random.default_rng(0))


def test_unknown_partition():
    with pytest.raises(InputError, match="unknown partition 'nope'; known: iid, split-by-class, shards, dirichlet"):
        partition("nope", [0, 1], 2, np.random.default_rng(0))


@pytest.mark.parametrize(("name", "params"), [("iid", {"alpha": 1.0}), ("dirichlet", {"classes_per_client": 2})])
def test_unknown_parameter(name, params):
    with pytest.raises(InputError, match=f"partition '{name}': .*unexpected keyword"):
        partition(name, np.arange(10) % 2, 2, np.random.default_rng(0), **params)
