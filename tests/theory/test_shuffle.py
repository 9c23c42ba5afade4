"""The realised finite shuffle (Fedssyn Sec. 2.3) and its expected ζ̂² against Monte Carlo and the mixture model."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.shuffle import expected_realised_zeta2, n_exchanged, shuffle_assignment, shuffle_samples


@given(
    N=st.integers(1, 6), n=st.integers(1, 12), p=st.floats(0, 1), seed=st.integers(0, 2**32 - 1), S=st.integers(1, 3)
)
@settings(max_examples=80, deadline=None)
def test_assignment_is_a_permutation_with_equal_sizes(N, n, p, seed, S):
    assignment = shuffle_assignment(N, n, p, np.random.default_rng(seed), shuffles=S)
    assert assignment.shape == (S, N, n)
    k = n_exchanged(n, p)
    for one in assignment:
        assert sorted(one.ravel().tolist()) == list(range(N * n))  # every sample exactly once
        owner = one // n
        # Each client keeps n - k of its own samples in the first n - k slots (and may get some back).
        assert (owner[:, : n - k] == np.arange(N)[:, None]).all()
    again = shuffle_assignment(N, n, p, np.random.default_rng(seed), shuffles=S)
    assert np.array_equal(assignment, again)  # same seed, same shuffle


def test_p_zero_and_one():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(4, 5, 2))
    assert np.array_equal(shuffle_samples(G, 0.0, rng), G)
    # p = 1: everything goes through the pool; the multiset of samples is unchanged.
    shuffled = shuffle_samples(G, 1.0, rng)
    assert np.allclose(np.sort(shuffled.reshape(-1, 2), axis=0), np.sort(G.reshape(-1, 2), axis=0))


def monte_carlo_zeta2(G, p, shuffles, seed):
    """ζ̂² of many independent realised shuffles, computed without the library's estimators."""
    shuffled = shuffle_samples(G, p, np.random.default_rng(seed), shuffles=shuffles)
    means = shuffled.mean(axis=2)
    return np.sum((means - means.mean(axis=1, keepdims=True)) ** 2, axis=-1).mean(axis=-1)


@pytest.mark.parametrize(("N", "n", "d", "p"), [(3, 5, 2, 0.4), (4, 10, 1, 0.3), (2, 3, 3, 1.0), (5, 8, 2, 0.5)])
def test_expected_realised_zeta2_matches_monte_carlo(N, n, d, p):
    """The closed form against 40,000 shuffles; tolerance 5 standard errors (seeded, so deterministic)."""
    rng = np.random.default_rng(N * 100 + n)
    G = rng.normal(size=(N, n, d)) + 2 * rng.normal(size=(N, 1, d))
    samples = monte_carlo_zeta2(G, p, 40_000, seed=1)
    standard_error = samples.std() / np.sqrt(samples.size)
    assert abs(samples.mean() - expected_realised_zeta2(G, p)) <= 5 * standard_error


@given(seed=st.integers(0, 2**32 - 1), p=st.sampled_from([0.1, 0.25, 0.5, 0.75]), spread=st.floats(0.1, 3.0))
@settings(max_examples=15, deadline=None, derandomize=True)
def test_realised_zeta2_averages_to_the_mixture_value(seed, p, spread):
    """Averaged over many shuffles, ζ̂² = (1-p)²ζ² + b with a finite-sample bias 0 <= b <= 2p(3σ̄² + ζ²)/n.

    The bias bound: ĝ_i = ḡ_i + (r_i - s_i)/n has mean (1-p)ḡ_i + pḡ and trace-variance at most
    2(Var s_i + Var r_i)/n², with Var s_i <= kσ_i² and Var r_i <= k(σ̄² + ζ²) + kσ̄²/N (see theory.shuffle).
    Tolerance: that bias bound plus 5 standard errors of the Monte-Carlo mean over 4,000 shuffles.
    """
    rng = np.random.default_rng(seed)
    N, n, d = 10, 100, 3
    G = rng.normal(size=(N, 1, d)) + spread * rng.normal(size=(N, n, d))
    zeta2, sigma2 = theory.zeta2(G), theory.sigma2(G)
    mixture = float(theory.mixture_zeta2(G, p))
    assert np.isclose(mixture, (1 - p) ** 2 * zeta2)
    bias_bound = 2 * p * (3 * sigma2 + zeta2) / n
    samples = monte_carlo_zeta2(G, p, 4_000, seed=seed + 1)
    slack = 5 * samples.std() / np.sqrt(samples.size)
    assert mixture - slack <= samples.mean() <= mixture + bias_bound + slack
    assert mixture <= expected_realised_zeta2(G, p) <= mixture + bias_bound


def test_expected_realised_zeta2_tends_to_the_mixture_as_n_grows():
    """The finite-sample term shrinks like 1/n: the realised shuffle converges to the lemma's mixture."""
    rng = np.random.default_rng(3)
    gaps = []
    for n in (20, 80, 320):
        G = rng.normal(size=(6, 1, 2)) + rng.normal(size=(6, n, 2))
        gaps.append((expected_realised_zeta2(G, 0.5) - 0.25 * theory.zeta2(G)) * n)
    assert max(gaps) < 2 * min(gaps)  # bias × n roughly constant, so the bias itself falls like 1/n
