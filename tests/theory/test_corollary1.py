"""Corollary I against the formulas written out by hand, and the properties the paper states."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory import Constants, is_superlinear, iteration_bound, min_p_for_speedup, speedup


def by_hand(p, eps, zeta2, sigma2, L_max, L_avg, tau, N, mu, convexity):
    s2 = (1 - p) * sigma2 + p * sigma2 + p * (1 - p) * zeta2
    L = (1 - p) * L_max + p * L_avg
    inner = tau * (1 - p) * math.sqrt(zeta2) + math.sqrt(tau * s2)
    if convexity == "strongly-convex":
        return (
            s2 / (mu * N * eps)
            + math.sqrt(L) * inner / (mu * math.sqrt(eps))
            + L * tau / mu * max(1.0, math.log(1 / eps))
        )
    return L * s2 / (N * eps**2) + L * inner / eps**1.5 + L * tau / eps


@pytest.mark.parametrize("convexity", ["strongly-convex", "non-convex"])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_terms_match_the_formula(convexity, p):
    c = Constants(zeta2=2.0, sigma2=0.5, L_max=100.0, L_avg=38.5, tau=10, N=10, mu=0.5)
    T = float(iteration_bound(p, 1e-4, c, convexity).total)
    assert math.isclose(T, by_hand(p, 1e-4, 2.0, 0.5, 100.0, 38.5, 10, 10, 0.5, convexity), rel_tol=1e-12)


def test_p_zero_is_koloskova():
    """p = 0: σ²/(Nμε) + √L(τζ + √τσ)/(μ√ε) + (Lτ/μ)log(1/ε), and L σ²/(Nε²) + L(τζ + √τσ)/ε^1.5 + Lτ/ε."""
    z2, s2, L, tau, N, mu, eps = 3.0, 2.0, 50.0, 5, 7, 0.3, 1e-5
    c = Constants(zeta2=z2, sigma2=s2, L_max=L, L_avg=10.0, tau=tau, N=N, mu=mu)
    sc = s2 / (N * mu * eps) + math.sqrt(L) * (tau * math.sqrt(z2) + math.sqrt(tau * s2)) / (mu * math.sqrt(eps))
    sc += L * tau / mu * math.log(1 / eps)
    nc = L * s2 / (N * eps**2) + L * (tau * math.sqrt(z2) + math.sqrt(tau * s2)) / eps**1.5 + L * tau / eps
    assert math.isclose(float(iteration_bound(0.0, eps, c).total), sc, rel_tol=1e-12)
    assert math.isclose(float(iteration_bound(0.0, eps, c, "non-convex").total), nc, rel_tol=1e-12)


@given(
    zeta2=st.floats(1e-3, 1e3),
    L_max=st.floats(1.0, 1e3),
    frac=st.floats(0.0, 1.0),
    tau=st.integers(1, 100),
    eps=st.floats(1e-9, 1e-1),
)
@settings(max_examples=100, deadline=None)
def test_rounds_non_increasing_in_p_when_heterogeneity_dominates(zeta2, L_max, frac, tau, eps):
    """σ = σ̃ = 0 and full-batch local steps (σ̂² = 0): only τ(1-p)ζ√L_p and the L_p term remain, both falling in p."""
    c = Constants(zeta2=zeta2, sigma2=0.0, L_max=L_max, L_avg=frac * L_max, tau=tau, sigma2_hat=0.0)
    p = np.linspace(0, 1, 101)
    for convexity in ("strongly-convex", "non-convex"):
        T = iteration_bound(p, eps, c, convexity).total
        assert (np.diff(T) <= 1e-9 * T[:-1]).all()


def test_superlinear_when_sigma_zero_and_drift_dominates():
    """Drift ratio (1-p)√(1-p+p L_avg/L_max) < 1-p; with ε small the drift dominates and T(p)/T(0) < 1-p."""
    c = Constants(zeta2=1.0, sigma2=0.0, L_max=100.0, L_avg=38.5, tau=10, sigma2_hat=0.0)
    p = np.linspace(0.05, 0.95, 19)
    assert is_superlinear(p, 1e-10, c).all()
    drift_ratio = (1 - p) * np.sqrt(1 - p + p * 0.385)
    assert (drift_ratio < 1 - p).all()
    assert np.allclose(1 / speedup(p, 1e-14, c), drift_ratio, rtol=1e-3)  # drift term alone as ε -> 0


def test_literal_noise_term_slows_small_p():
    """With Lemma 1's σ̂² = p(1-p)ζ² (σ = 0) and tiny ε, the noise term makes T(p) > T(0) for small p."""
    c = Constants(zeta2=1.0, sigma2=0.0, L_max=100.0, L_avg=38.5, tau=10, N=10)
    assert speedup(0.1, 1e-8, c) < 1
    assert not is_superlinear(0.1, 1e-8, c)


def test_broadcast_and_dominant():
    c = Constants(zeta2=1.0, sigma2=1.0, L_max=100.0, L_avg=38.5, tau=10, N=10)
    p = np.linspace(0, 1, 5)
    terms = iteration_bound(p, 1e-6, c)
    assert terms.total.shape == terms.dominant.shape == (5,)
    stacked = np.stack([terms.noise, terms.drift, terms.deterministic])
    assert (terms.dominant == np.array(["noise", "drift", "deterministic"])[stacked.argmax(0)]).all()
    assert np.allclose(terms.total, stacked.sum(0))


def test_min_p_for_speedup():
    c = Constants(zeta2=1.0, sigma2=0.0, L_max=100.0, L_avg=38.5, tau=10, sigma2_hat=0.0)
    assert min_p_for_speedup(1.0, 1e-6, c) == 0.0
    p = min_p_for_speedup(2.0, 1e-6, c)
    assert p is not None and math.isclose(float(speedup(p, 1e-6, c)), 2.0, rel_tol=1e-8)
    assert speedup(p - 1e-4, 1e-6, c) < 2.0
    assert min_p_for_speedup(1e9, 1e-6, c) is None
