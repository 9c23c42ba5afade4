"""Index-level shuffling of real data and mixing of synthetic data (fl.data.shuffle), against theory.shuffle."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl.data import load, split_by_class
from fl.data.shuffle import deal_synthetic, mix_synthetic, shuffle_partition
from theory.errors import InputError
from theory.shuffle import shuffle_assignment

SETTINGS = settings(max_examples=50, deadline=None)
seeds = st.integers(0, 2**32 - 1)
fractions = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1))
REAL_FMNIST = Path("/usr/share/datasets/fashion-mnist")


def random_partition(sizes, seed):
    """Clients of the given sizes holding a random split of 0..sum-1 (sorted inside each client)."""
    order = np.random.default_rng(seed).permutation(sum(sizes))
    return [np.sort(part) for part in np.split(order, np.cumsum(sizes)[:-1])]


# ---------------------------------------------------------------------------------- shuffle_partition


@given(sizes=st.lists(st.integers(0, 15), min_size=1, max_size=7), p=fractions, seed=seeds)
@SETTINGS
def test_shuffle_partition_keeps_sizes_and_samples(sizes, p, seed):
    parts = random_partition(sizes, seed)
    out = shuffle_partition(parts, p, np.random.default_rng(seed + 1))
    assert [len(o) for o in out] == sizes  # every client keeps its size
    assert np.array_equal(np.sort(np.concatenate(out)), np.arange(sum(sizes)))  # every sample exactly once
    given_away, received = [], []
    for part, got, n in zip(parts, out, sizes):
        k = round(p * n)  # n_exchanged: round half to even
        kept = got[: n - k]
        assert np.isin(kept, part).all() and np.all(np.diff(kept) > 0)  # its own samples first, sorted
        assert np.isin(got, part).sum() >= n - k  # it may also receive some of its own back
        given_away.append(np.setdiff1d(part, kept))
        received.append(got[n - k :])
    # What came back through the pool is exactly what was handed in.
    assert np.array_equal(np.sort(np.concatenate(given_away)), np.sort(np.concatenate(received)))


@given(sizes=st.lists(st.integers(0, 15), min_size=1, max_size=7), seed=seeds)
@SETTINGS
def test_shuffle_partition_p_zero_is_the_identity(sizes, seed):
    parts = random_partition(sizes, seed)
    out = shuffle_partition(parts, 0.0, np.random.default_rng(seed))
    assert all(np.array_equal(o, part) for o, part in zip(out, parts))
    unsorted = [np.random.default_rng(seed).permutation(part) for part in parts]
    out = shuffle_partition(unsorted, 0, np.random.default_rng(seed))  # kept samples come back sorted
    assert all(np.array_equal(o, part) for o, part in zip(out, parts))


def test_shuffle_partition_p_one_sends_everything_through_the_pool():
    parts = random_partition([5, 8, 0, 3], seed=0)
    out = shuffle_partition(parts, 1.0, np.random.default_rng(0))
    assert [len(o) for o in out] == [5, 8, 0, 3]
    assert np.array_equal(np.sort(np.concatenate(out)), np.arange(16))


@given(n_clients=st.integers(1, 6), n=st.integers(1, 12), p=fractions, seed=seeds)
@SETTINGS
def test_shuffle_partition_equals_theory_with_equal_sizes(n_clients, n, p, seed):
    """Clients holding the client-major blocks [i*n, (i+1)*n): the same generator gives the same shuffle as
    theory.shuffle.shuffle_assignment, whose indices are exactly those flat positions."""
    parts = [np.arange(i * n, (i + 1) * n) for i in range(n_clients)]
    out = shuffle_partition(parts, p, np.random.default_rng(seed))
    expected = shuffle_assignment(n_clients, n, p, np.random.default_rng(seed))
    assert np.array_equal(np.stack(out), expected)


def test_shuffle_partition_maps_arbitrary_indices():
    """The result does not depend on what the indices are: relabelled parts give the relabelled result."""
    parts = [np.arange(0, 4), np.arange(4, 8), np.arange(8, 12)]
    labels = np.random.default_rng(1).permutation(1000)[:12]  # any distinct dataset indices
    plain = shuffle_partition(parts, 0.5, np.random.default_rng(5))
    mapped = shuffle_partition([labels[part] for part in parts], 0.5, np.random.default_rng(5))
    for a, b in zip(plain, mapped):
        assert np.array_equal(np.sort(labels[a]), np.sort(b))


def test_shuffle_partition_is_deterministic():
    parts = random_partition([7, 3, 9], seed=2)
    a = shuffle_partition(parts, 0.4, np.random.default_rng(11))
    b = shuffle_partition(parts, 0.4, np.random.default_rng(11))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("p", [-0.1, 1.01, float("nan"), [0.5, 0.5], "half"])
def test_shuffle_partition_bad_fraction(p):
    with pytest.raises(InputError, match="p must"):
        shuffle_partition([np.arange(4), np.arange(4, 8)], p, np.random.default_rng(0))


@pytest.mark.parametrize(
    "parts", [[], [np.array([0.0, 1.0])], [np.arange(4).reshape(2, 2)], [np.arange(3), np.array([[4]])]]
)
def test_shuffle_partition_bad_partition(parts):
    with pytest.raises(InputError, match="a partition is"):
        shuffle_partition(parts, 0.5, np.random.default_rng(0))


# ------------------------------------------------------------------------------------- deal_synthetic


@given(n_synthetic=st.integers(0, 100), n_clients=st.integers(1, 12), seed=seeds)
@SETTINGS
def test_deal_synthetic(n_synthetic, n_clients, seed):
    parts = deal_synthetic(n_synthetic, n_clients, np.random.default_rng(seed))
    assert len(parts) == n_clients
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n_synthetic))
    again = deal_synthetic(n_synthetic, n_clients, np.random.default_rng(seed))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_deal_synthetic_is_shuffled():
    parts = deal_synthetic(100, 4, np.random.default_rng(0))
    assert not np.array_equal(np.concatenate(parts), np.arange(100))


@pytest.mark.parametrize(("n_synthetic", "n_clients"), [(-1, 2), (1.5, 2), (10, 0)])
def test_deal_synthetic_bad_counts(n_synthetic, n_clients):
    with pytest.raises(InputError):
        deal_synthetic(n_synthetic, n_clients, np.random.default_rng(0))


# ------------------------------------------------------------------------------------- mix_synthetic


@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6), n_synthetic=st.integers(0, 40), seed=seeds)
@SETTINGS
def test_mix_synthetic(sizes, n_synthetic, seed):
    n_real = max(sum(sizes), 1)
    parts = random_partition(sizes, seed)
    mixed, p = mix_synthetic(parts, n_real, n_synthetic, np.random.default_rng(seed))
    shares = deal_synthetic(n_synthetic, len(sizes), np.random.default_rng(seed))  # the same draws
    assert len(mixed) == len(sizes) and p.shape == (len(sizes),)
    for got, part, share, p_i in zip(mixed, parts, shares, p):
        assert np.array_equal(got[: len(part)], part)  # D_i first, unchanged
        assert np.array_equal(got[len(part) :], n_real + share)  # then D~_si, offset by n_real
        expected = len(share) / (len(part) + len(share)) if len(part) + len(share) else 0.0
        assert p_i == pytest.approx(expected)
    synthetic = np.concatenate([got[len(part) :] for got, part in zip(mixed, parts)])
    assert np.array_equal(np.sort(synthetic), np.arange(n_real, n_real + n_synthetic))


def test_mix_synthetic_indexes_the_concatenated_arrays():
    x_real, x_synthetic = np.arange(6) * 10, -np.arange(1, 5)
    parts = [np.array([0, 2, 4]), np.array([1, 3, 5])]
    mixed, p = mix_synthetic(parts, 6, 4, np.random.default_rng(0))
    x = np.concatenate([x_real, x_synthetic])
    assert sorted(np.concatenate([x[m] for m in mixed]).tolist()) == sorted([*x_real.tolist(), -1, -2, -3, -4])
    assert p.tolist() == [0.4, 0.4]


@pytest.mark.parametrize("bad", [6, 100, -1])
def test_mix_synthetic_out_of_range_index(bad):
    with pytest.raises(InputError, match=r"partition indices must lie in 0\.\.5"):
        mix_synthetic([np.array([0, 1]), np.array([2, bad])], 6, 3, np.random.default_rng(0))


def test_mix_synthetic_bad_n_real():
    with pytest.raises(InputError, match="n_real"):
        mix_synthetic([np.array([0])], 0, 3, np.random.default_rng(0))


# ------------------------------------------------------------------------------------ real statistics


def test_shuffle_on_real_fashion_mnist_mixes_classes():
    """Split by class over 10 clients, 600 Fashion-MNIST training samples each, shuffled at p = 0.5 (seed 0).

    Each client keeps 300 of its own class and receives 300 from a pool of 3,000 holding 300 per class, so its
    fraction of its own class is 1 - p + p/10 = 0.55 in expectation; the received count of its own class is
    hypergeometric (sd 4.9 samples, 0.008 of 600). Tolerance 0.05 per client (six standard deviations)."""
    if not REAL_FMNIST.is_dir():
        pytest.skip(f"no Fashion-MNIST in {REAL_FMNIST} (apt-get install dataset-fashion-mnist)")
    labels = load("fmnist", data_root=REAL_FMNIST).y_train
    subset = np.concatenate([np.flatnonzero(labels == c)[:600] for c in range(10)])
    parts = split_by_class(labels[subset], 10, np.random.default_rng(0))
    parts = [subset[part] for part in parts]  # indices into the full training set
    assert [np.unique(labels[part]).tolist() for part in parts] == [[c] for c in range(10)]
    p = 0.5
    shuffled = shuffle_partition(parts, p, np.random.default_rng(0))
    own = np.array([np.mean(labels[got] == c) for c, got in enumerate(shuffled)])
    assert [len(got) for got in shuffled] == [600] * 10
    assert np.abs(own - (1 - p + p / 10)).max() < 0.05
    assert np.all(own >= 1 - p)  # the kept half alone is own class
