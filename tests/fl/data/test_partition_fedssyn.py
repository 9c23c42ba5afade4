"""dirichlet-fedssyn (fl.data.partition.dirichlet_fedssyn): Fedssyn's code's partition after FedDF. Every sample
once, equal client sizes, the group rule of the authors' code, a hand-computed case (α so large that every share is
equal), one class a client at tiny α, the half-average minimum refused in bounded draws, and fl.config passes it α
alone."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl.config import load_config
from fl.data.partition import _capped_group, dirichlet_fedssyn, fedssyn_group, partition
from theory.errors import InputError

from .test_partition_code import check_partition, same_partition, sizes_of


@settings(max_examples=40, deadline=None)
@given(
    n_clients=st.integers(1, 12),
    per_client=st.integers(4, 20),
    n_classes=st.integers(1, 6),
    alpha=st.sampled_from([0.05, 0.1, 0.5, 10.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_sample_once_and_sizes_equal_within_one(n_clients, per_client, n_classes, alpha, seed):
    labels = np.random.default_rng(seed).integers(0, n_classes, n_clients * per_client + seed % n_clients)
    try:
        parts = dirichlet_fedssyn(labels, n_clients, np.random.default_rng(seed), alpha=alpha, max_draws=200)
    except InputError as error:  # a skewed draw of labels can make the half-average minimum unreachable
        assert "raise alpha" in str(error)
        return
    check_partition(parts, labels.size, n_clients)
    assert sizes_of(parts).max() - sizes_of(parts).min() <= 1


@pytest.mark.parametrize(
    ("n_clients", "n_classes", "alpha", "group"),
    [(40, 10, 0.1, 20), (40, 10, 0.01, 10), (40, 10, 0.5, 40), (100, 10, 0.1, 10), (100, 10, 0.01, 10),
     (100, 100, 0.01, 20), (100, 100, 0.1, 100), (10, 10, 0.1, 10), (10, 100, 0.01, 10)],
)  # fmt: skip
def test_the_group_rule_is_the_authors_code(n_clients, n_classes, alpha, group):
    assert fedssyn_group(n_clients, n_classes, alpha) == group


def test_a_capped_split_by_hand():
    """Classes of 4, 4 and 3 samples, 3 clients (one group), α = 1e12 (every q_c equal up to ~1e-6): classes 0 and 1
    are cut at 4/3 and 8/3 (pieces 1, 1, 2); client 2 then holds 4 ≥ 11/3, the group's average, so class 2 goes
    half and half to clients 0 and 1 (pieces 1, 2, 0). The shares, in class order, are 0: [c0 c1 c2],
    1: [c0 c1 c2 c2], 2: [c0 c0 c1 c1]; concatenated and cut into 4, 4, 3 they give the counts below."""
    labels = np.array([0] * 4 + [1] * 4 + [2] * 3)
    parts = dirichlet_fedssyn(labels, 3, np.random.default_rng(0), alpha=1e12)
    assert [np.bincount(labels[p], minlength=3).tolist() for p in parts] == [[2, 1, 1], [1, 1, 2], [1, 2, 0]]


def test_tiny_alpha_gives_each_client_about_one_class():
    labels = np.repeat(np.arange(10), 30)
    parts = dirichlet_fedssyn(labels, 10, np.random.default_rng(1), alpha=1e-3)
    majority = [np.bincount(labels[p], minlength=10).max() / p.size for p in parts]
    assert min(majority) >= 0.9
    assert sizes_of(parts).tolist() == [30] * 10


def test_groups_of_ten_at_n100_split_3000_images_that_plain_dirichlet_cannot():
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 300))
    parts = dirichlet_fedssyn(labels, 100, np.random.default_rng(2), alpha=0.01)
    check_partition(parts, 3000, 100)
    assert set(sizes_of(parts).tolist()) == {30}
    with pytest.raises(InputError, match="no Dirichlet"):
        partition("dirichlet", labels, 100, np.random.default_rng(2), alpha=0.01, min_size=10, max_draws=50)


def test_a_group_keeps_half_its_average_and_stops_a_full_client():
    labels = np.random.default_rng(3).integers(0, 5, 200)
    members = np.arange(200)
    shares = _capped_group(members, labels, np.unique(labels), 8, 0.1, np.random.default_rng(4), 1000)
    sizes = np.array([s.size for s in shares])
    assert sizes.min() >= int(0.5 * 200 / 8)
    largest_class = np.bincount(labels).max()
    assert sizes.max() < 200 / 8 + largest_class  # a client at the average gets no share of later classes
    assert np.array_equal(np.sort(np.concatenate(shares)), members)


def test_an_unreachable_minimum_is_refused_in_bounded_draws():
    """20 clients in one group, 10 classes, α = 1e-4: about 10 clients get anything, never half the average."""
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(InputError, match="in 20 gave every one of a group's 20 clients"):
        dirichlet_fedssyn(labels, 20, np.random.default_rng(0), alpha=1e-4, max_draws=20)


def test_same_seed_same_partition_and_the_config_passes_alpha_alone():
    labels = np.repeat(np.arange(5), 40)
    first = partition("dirichlet-fedssyn", labels, 10, np.random.default_rng(7), alpha=0.5)
    assert same_partition(first, dirichlet_fedssyn(labels, 10, np.random.default_rng(7), alpha=0.5))
    assert not same_partition(first, dirichlet_fedssyn(labels, 10, np.random.default_rng(8), alpha=0.5))
    config = load_config(None, ["data.partition=dirichlet-fedssyn", "data.alpha=0.01"], notes=[])
    assert config.data.partition_params() == {"alpha": 0.01}
