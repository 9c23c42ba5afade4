"""Corollary I (Fedssyn Sec. 2.2) against its formulas written out by hand, and the properties the paper draws.

Every reference value here is computed independently in plain-float ``math`` from the corollary as printed:
σ̂² = (1-p)σ² + pσ̃² + p(1-p)(ζ² + δ²), L_p = (1-p)L_max + pL_avg and

    strongly convex  T = σ̂²/(μNε) + √L_p(τ(1-p)ζ + √τ σ̂)/(μ√ε) + (L_p τ/μ)·max(1, ln(1/ε))
    non-convex       T = L_p σ̂²/(Nε²) + L_p(τ(1-p)ζ + √τ σ̂)/ε^{3/2} + L_p τ/ε
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory import Constants, RateTerms, is_superlinear, iteration_bound, min_p_for_speedup, speedup

CONVEXITIES = ("strongly-convex", "non-convex")
TERMS = ("noise", "drift_zeta", "drift_sigma", "deterministic")

# The paper's least-squares setting (Sec. 2.3): ζ² = 1, L_max = 100, L_avg = 38.5, τ = 10, N = 10.
PAPER = {"zeta2": 1.0, "sigma2": 0.0, "L_max": 100.0, "L_avg": 38.5, "tau": 10, "N": 10}


def hand_terms(p, eps, convexity, zeta2, sigma2, L_max, L_avg, tau=1, N=1, mu=1, **extra):
    """(noise, drift_zeta, drift_sigma, deterministic) of Corollary I for scalar inputs, in plain floats."""
    sigma2_tilde = sigma2 if extra.get("sigma2_tilde") is None else extra["sigma2_tilde"]
    delta2 = extra.get("delta2", 0.0)
    if extra.get("sigma2_hat") is None:
        sigma2_hat = (1 - p) * sigma2 + p * sigma2_tilde + p * (1 - p) * (zeta2 + delta2)
    else:
        sigma2_hat = extra["sigma2_hat"]
    L_p = (1 - p) * L_max + p * L_avg
    heterogeneity = tau * (1 - p) * math.sqrt(zeta2)
    local_noise = math.sqrt(tau) * math.sqrt(sigma2_hat)
    if convexity == "strongly-convex":
        return (
            sigma2_hat / (mu * N * eps),
            math.sqrt(L_p) * heterogeneity / (mu * math.sqrt(eps)),
            math.sqrt(L_p) * local_noise / (mu * math.sqrt(eps)),
            L_p * tau / mu * max(1.0, math.log(1 / eps)),
        )
    return (
        L_p * sigma2_hat / (N * eps**2),
        L_p * heterogeneity / eps**1.5,
        L_p * local_noise / eps**1.5,
        L_p * tau / eps,
    )


def hand_T(p, eps, convexity, **constants):
    return math.fsum(hand_terms(p, eps, convexity, **constants))


# (constants, eps): mixed regimes; the last has ε > 1/e, where ln(1/ε) < 1 is floored at 1.
POINTS = [
    ({"zeta2": 2.0, "sigma2": 0.5, "L_max": 100.0, "L_avg": 38.5, "tau": 10, "N": 10, "mu": 0.5}, 1e-4),
    (
        {"zeta2": 3.0, "sigma2": 0.2, "L_max": 5.0, "L_avg": 5.0, "tau": 3, "N": 7, "mu": 2.0}
        | {"sigma2_tilde": 4.0, "delta2": 0.7},
        1e-2,
    ),
    ({"zeta2": 0.4, "sigma2": 4.0, "L_max": 7.0, "L_avg": 0.5, "tau": 25, "N": 2, "mu": 0.1, "sigma2_hat": 0.25}, 1e-6),
    ({"zeta2": 1.0, "sigma2": 0.0, "L_max": 10.0, "L_avg": 1.0, "tau": 1, "N": 1, "mu": 1.0}, 0.5),
]


@pytest.mark.parametrize("convexity", CONVEXITIES)
@pytest.mark.parametrize(("constants", "eps"), POINTS)
@pytest.mark.parametrize("p", [0.0, 0.1, 0.37, 0.9, 1.0])
def test_terms_match_the_formulas_written_out(p, constants, eps, convexity):
    terms = iteration_bound(p, eps, Constants(**constants), convexity)
    expected = hand_terms(p, eps, convexity, **constants)
    for name, value in zip(TERMS, expected):
        assert math.isclose(float(getattr(terms, name)), value, rel_tol=1e-12), name
    assert math.isclose(float(terms.drift), expected[1] + expected[2], rel_tol=1e-12)
    assert math.isclose(float(terms.total), math.fsum(expected), rel_tol=1e-12)


def test_log_is_floored_at_one_for_large_eps():
    """ε = 0.5 > 1/e: ln 2 ≈ 0.69 would shrink the deterministic term; the floor keeps L_p τ/μ."""
    c = Constants(zeta2=0.0, sigma2=0.0, L_max=10.0, L_avg=10.0, tau=3, mu=2.0)
    assert float(iteration_bound(0.3, 0.5, c).deterministic) == pytest.approx(10.0 * 3 / 2.0, rel=1e-15)
    assert float(iteration_bound(0.3, 0.01, c).deterministic) == pytest.approx(15.0 * math.log(100), rel=1e-12)


@given(
    p=st.floats(0.0, 1.0),
    eps=st.floats(1e-9, 10.0),
    zeta2=st.floats(0.0, 1e3),
    sigma2=st.floats(0.0, 1e3),
    sigma2_tilde=st.floats(0.0, 1e3),
    delta2=st.floats(0.0, 1e3),
    L_max=st.floats(1e-3, 1e3),
    L_ratio=st.floats(1e-3, 1.0),  # L_avg > 0 is required (L_avg = 0 gives T(1) = 0)
    tau=st.integers(1, 200),
    N=st.integers(1, 1000),
    mu=st.floats(1e-3, 1e3),
    convexity=st.sampled_from(CONVEXITIES),
)
@settings(max_examples=150, deadline=None)
def test_total_matches_the_formula_anywhere(
    p, eps, zeta2, sigma2, sigma2_tilde, delta2, L_max, L_ratio, tau, N, mu, convexity
):
    constants = {
        "zeta2": zeta2,
        "sigma2": sigma2,
        "sigma2_tilde": sigma2_tilde,
        "delta2": delta2,
        "L_max": L_max,
        "L_avg": L_ratio * L_max,
        "tau": tau,
        "N": N,
        "mu": mu,
    }
    T = float(iteration_bound(p, eps, Constants(**constants), convexity).total)
    assert math.isclose(T, hand_T(p, eps, convexity, **constants), rel_tol=1e-10)


# --- p = 0 is Koloskova et al. 2020 -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zeta2", "sigma2", "L1", "tau", "N", "mu", "eps"),
    [(3.0, 2.0, 50.0, 5, 7, 0.3, 1e-5), (1.0, 0.0, 100.0, 10, 10, 1.0, 1e-6), (0.0, 9.0, 2.0, 1, 1, 4.0, 0.3)],
)
def test_p_zero_is_koloskova(zeta2, sigma2, L1, tau, N, mu, eps):
    """p = 0: σ²/(Nμε) + √L₁(τζ + √τσ)/(μ√ε) + (L₁τ/μ)log(1/ε), and L₁σ²/(Nε²) + L₁(τζ + √τσ)/ε^{3/2} + L₁τ/ε.

    ε < 1/e, so the log floor is inactive. L_avg, σ̃² and δ² only enter through p and must not matter at p = 0.
    """
    assert eps < 1 / math.e
    zeta, sigma = math.sqrt(zeta2), math.sqrt(sigma2)
    strongly_convex = (
        sigma2 / (N * mu * eps)
        + math.sqrt(L1) * (tau * zeta + math.sqrt(tau) * sigma) / (mu * math.sqrt(eps))
        + L1 * tau / mu * math.log(1 / eps)
    )
    non_convex = L1 * sigma2 / (N * eps**2) + L1 * (tau * zeta + math.sqrt(tau) * sigma) / eps**1.5 + L1 * tau / eps
    for L_avg, sigma2_tilde, delta2 in [(L1, None, 0.0), (0.1 * L1, 17.0, 5.0), (1e-6 * L1, 0.0, 1e3)]:
        c = Constants(
            zeta2=zeta2,
            sigma2=sigma2,
            L_max=L1,
            L_avg=L_avg,
            tau=tau,
            N=N,
            mu=mu,
            sigma2_tilde=sigma2_tilde,
            delta2=delta2,
        )
        assert math.isclose(float(iteration_bound(0.0, eps, c).total), strongly_convex, rel_tol=1e-12)
        assert math.isclose(float(iteration_bound(0.0, eps, c, "non-convex").total), non_convex, rel_tol=1e-12)


# --- how T depends on p ------------------------------------------------------------------------------------


@given(
    zeta2=st.floats(0.0, 1e4),
    L_max=st.floats(1e-3, 1e4),
    L_ratio=st.floats(1e-3, 1.0),  # L_avg > 0 is required (L_avg = 0 gives T(1) = 0)
    tau=st.floats(1.0, 1e3),
    N=st.integers(1, 100),
    mu=st.floats(1e-3, 1e3),
    eps=st.floats(1e-12, 10.0),
    convexity=st.sampled_from(CONVEXITIES),
)
@settings(max_examples=200, deadline=None)
def test_T_non_increasing_in_p_without_noise(zeta2, L_max, L_ratio, tau, N, mu, eps, convexity):
    """σ² = σ̃² = 0 and full-batch local gradients (σ̂² = 0 override): T = drift_zeta + deterministic.

    drift_zeta ∝ (1-p)·√L_p (or (1-p)·L_p) and deterministic ∝ L_p; L_p = L_max - p(L_max - L_avg) is
    non-increasing because L_avg <= L_max, so T(p) is non-increasing on a sorted grid of p.
    """
    c = Constants(
        zeta2=zeta2,
        sigma2=0.0,
        sigma2_tilde=0.0,
        L_max=L_max,
        L_avg=L_ratio * L_max,
        tau=tau,
        N=N,
        mu=mu,
        sigma2_hat=0.0,
    )
    p = np.linspace(0.0, 1.0, 201)
    terms = iteration_bound(p, eps, c, convexity)
    assert not terms.noise.any() and not terms.drift_sigma.any()
    T = terms.total
    assert (np.diff(T) <= 1e-12 * T[:-1]).all()


def superlinear_margin(p, eps, convexity, zeta2, L_max, L_avg, tau, mu=1.0):
    """(1-p)·T(0) - T(p) for σ̂² = 0, derived by hand; > 0 exactly when the saving is super-linear.

    With r = L_p/L_max = 1 - p(1 - L_avg/L_max), T(p) = a(1-p)√r + b·r (strongly convex, a = τζ√L_max/(μ√ε),
    b = L_max τ max(1, ln 1/ε)/μ) or T(p) = r·(a(1-p) + b) (non-convex, a = L_max τζ/ε^{3/2}, b = L_max τ/ε),
    so T(p) < (1-p)T(0) ⟺ a(1-p)(1 - √r) > b·p·L_avg/L_max (resp. a(1-p)(1 - r) > b·p·L_avg/L_max): the drift's
    faster-than-linear fall must outweigh the deterministic term, which only falls to L_avg/L_max of its value.
    """
    r = 1 - p * (1 - L_avg / L_max)
    if convexity == "strongly-convex":
        a = tau * math.sqrt(zeta2) * math.sqrt(L_max) / (mu * math.sqrt(eps))
        b = L_max * tau * max(1.0, math.log(1 / eps)) / mu
        return a * (1 - p) * (1 - math.sqrt(r)) - b * p * L_avg / L_max
    a = L_max * tau * math.sqrt(zeta2) / eps**1.5
    b = L_max * tau / eps
    return a * (1 - p) * (1 - r) - b * p * L_avg / L_max


@pytest.mark.parametrize("convexity", CONVEXITIES)
def test_superlinear_when_sigma_zero_and_drift_dominates(convexity):
    """Regime: σ̂² = 0 (full-batch local steps), L_avg < L_max and ε = 1e-10, so drift ≫ deterministic at p = 0.

    The drift alone falls as (1-p)·√((1-p) + p L_avg/L_max) < 1-p (strongly convex); the deterministic term is
    kept in the check (through ``superlinear_margin``), and it wins close to p = 1, where 1-p -> 0 but L_p stays
    >= L_avg: there the saving is not super-linear, and at p = 1 it never is.
    """
    c = Constants(**PAPER | {"sigma2_hat": 0.0})
    eps = 1e-10
    p = np.linspace(0.05, 0.95, 19)
    drift_ratio = (1 - p) * np.sqrt((1 - p) + p * 38.5 / 100)
    assert (drift_ratio < 1 - p).all()
    margins = [superlinear_margin(q, eps, convexity, 1.0, 100.0, 38.5, 10) for q in p]
    assert min(margins) > 0
    assert is_superlinear(p, eps, c, convexity).all()
    near_one = 1 - 1e-7  # (1-p) small enough that the drift's edge no longer beats b·p·L_avg/L_max
    assert superlinear_margin(near_one, eps, convexity, 1.0, 100.0, 38.5, 10) < 0
    assert not is_superlinear(near_one, eps, c, convexity)
    assert not is_superlinear(1.0, eps, c, convexity)
    assert not is_superlinear(0.0, eps, c, convexity)  # T(0)/T(0) = 1 is not < 1


def test_drift_ratio_is_the_limit_for_small_eps():
    """As ε -> 0 (σ̂² = 0, strongly convex) T(p)/T(0) tends to the drift ratio (1-p)√(L_p/L_max)."""
    c = Constants(**PAPER | {"sigma2_hat": 0.0})
    p = np.linspace(0.0, 0.95, 20)
    drift_ratio = (1 - p) * np.sqrt((1 - p) + p * 38.5 / 100)
    np.testing.assert_allclose(1 / speedup(p, 1e-16, c), drift_ratio, rtol=1e-4)


@given(
    zeta2=st.floats(1e-4, 1e4),
    L_max=st.floats(1e-2, 1e3),
    L_ratio=st.floats(1e-3, 1.0),  # L_avg = 0: T(1) = 0 and an infinite speed-up
    tau=st.integers(1, 100),
    eps=st.floats(1e-12, 1.0),
    convexity=st.sampled_from(CONVEXITIES),
)
@settings(max_examples=150, deadline=None)
def test_is_superlinear_matches_the_derived_condition(zeta2, L_max, L_ratio, tau, eps, convexity):
    """is_superlinear agrees with the hand-derived margin wherever the margin is not a floating-point tie."""
    L_avg = L_ratio * L_max
    c = Constants(zeta2=zeta2, sigma2=0.0, L_max=L_max, L_avg=L_avg, tau=tau, sigma2_hat=0.0)
    grid = np.linspace(0.0, 1.0, 41)
    flags = is_superlinear(grid, eps, c, convexity)
    for q, flag in zip(grid, flags):
        margin = superlinear_margin(float(q), eps, convexity, zeta2, L_max, L_avg, tau)
        if abs(margin) > 1e-9 * hand_T(0.0, eps, convexity, zeta2=zeta2, sigma2=0.0, L_max=L_max, L_avg=L_avg, tau=tau):
            assert bool(flag) == (margin > 0), q


@pytest.mark.parametrize("convexity", CONVEXITIES)
@pytest.mark.parametrize(
    ("regime", "overrides", "eps"),
    [
        # deterministic term dominant (ε > 1/e, tiny ζ): T/T(0) ≈ L_p/L_max = 1 - p(1 - L_avg/L_max) > 1 - p
        ("deterministic dominates", {"zeta2": 1e-8}, 0.5),
        # L_avg = L_max: the drift falls exactly as 1-p and the deterministic term not at all
        ("no smoothness gain", {"L_avg": 100.0}, 1e-10),
    ],
)
def test_not_superlinear_without_a_falling_L_p_or_a_dominant_drift(convexity, regime, overrides, eps):
    c = Constants(**PAPER | {"sigma2_hat": 0.0} | overrides)
    p = np.linspace(0.0, 1.0, 101)
    assert not is_superlinear(p, eps, c, convexity).any(), regime
    k = PAPER | overrides
    assert all(superlinear_margin(q, eps, convexity, k["zeta2"], k["L_max"], k["L_avg"], k["tau"]) <= 0 for q in p)


@pytest.mark.parametrize("p", [0.01, 0.05, 0.1])
def test_literal_lemma1_noise_slows_small_p(p):
    """A real property of Corollary I as stated, not a bug: with σ̂² = p(1-p)ζ² (σ = σ̃ = 0, no override) and
    tiny ε, the noise term p(1-p)ζ²/(μNε) ~ 1/ε outgrows the drift saving ~ 1/√ε, so T(p) > T(0) for small p."""
    c = Constants(**PAPER)
    eps = 1e-8
    assert hand_T(p, eps, "strongly-convex", **PAPER) > hand_T(0.0, eps, "strongly-convex", **PAPER)
    terms, T0 = iteration_bound(p, eps, c), float(iteration_bound(0.0, eps, c).total)
    assert float(terms.total) > T0
    assert float(speedup(p, eps, c)) < 1
    assert not is_superlinear(p, eps, c)
    # It is the shuffling noise that does it: without the σ̂ terms T(p) would be below T(0) ...
    assert float(terms.total - terms.noise - terms.drift_sigma) < T0
    # ... and with full-batch local steps (σ̂² = 0) the same p is super-linear.
    assert is_superlinear(p, eps, Constants(**PAPER | {"sigma2_hat": 0.0}))


# --- consistency of speedup, is_superlinear, RateTerms ---------------------------------------------------


DOMINANT_CASES = [  # (constants, eps, convexity): each of the three terms dominates in one of them at p = 0.3
    ({"zeta2": 1.0, "sigma2": 1e3, "L_max": 10.0, "L_avg": 5.0, "tau": 2, "N": 1}, 1e-8, "strongly-convex"),
    ({"zeta2": 1.0, "sigma2": 0.0, "L_max": 100.0, "L_avg": 38.5, "tau": 10, "N": 10}, 1e-4, "strongly-convex"),
    ({"zeta2": 1e-6, "sigma2": 1e-6, "L_max": 10.0, "L_avg": 5.0, "tau": 100, "N": 100}, 0.5, "non-convex"),
]


def test_dominant_names_the_largest_term():
    names = []
    for constants, eps, convexity in DOMINANT_CASES:
        noise, drift_zeta, drift_sigma, deterministic = hand_terms(0.3, eps, convexity, **constants)
        hand = {"noise": noise, "drift": drift_zeta + drift_sigma, "deterministic": deterministic}
        dominant = str(iteration_bound(0.3, eps, Constants(**constants), convexity).dominant)
        assert dominant == max(hand, key=hand.get)
        names.append(dominant)
    assert sorted(names) == ["deterministic", "drift", "noise"]  # every branch was exercised


@pytest.mark.parametrize("convexity", CONVEXITIES)
def test_speedup_superlinear_total_dominant_agree_and_broadcast(convexity):
    c = Constants(zeta2=2.0, sigma2=0.3, L_max=100.0, L_avg=20.0, tau=5, N=4, mu=0.7, sigma2_tilde=0.1, delta2=0.2)
    eps = 1e-5
    p = np.array([[0.0, 0.2, 0.4, 0.6], [0.8, 0.9, 0.99, 1.0], [0.05, 0.15, 0.5, 0.7]])
    terms = iteration_bound(p, eps, c, convexity)
    assert isinstance(terms, RateTerms)
    for name in (*TERMS, "drift", "total", "dominant"):
        assert np.shape(getattr(terms, name)) == p.shape, name
    s, flags = speedup(p, eps, c, convexity), is_superlinear(p, eps, c, convexity)
    assert s.shape == flags.shape == p.shape and flags.dtype == bool
    stacked = np.stack([terms.noise, terms.drift, terms.deterministic])
    np.testing.assert_allclose(
        terms.total, terms.noise + terms.drift_zeta + terms.drift_sigma + terms.deterministic, rtol=1e-15
    )
    np.testing.assert_array_equal(terms.dominant, np.array(["noise", "drift", "deterministic"])[stacked.argmax(0)])
    np.testing.assert_allclose(s, float(iteration_bound(0.0, eps, c, convexity).total) / terms.total, rtol=1e-14)
    np.testing.assert_array_equal(flags, 1 / s < 1 - p)
    for index in np.ndindex(p.shape):
        T0, Tp = (hand_T(q, eps, convexity, **vars(c)) for q in (0.0, float(p[index])))
        assert math.isclose(float(s[index]), T0 / Tp, rel_tol=1e-11)
        assert bool(flags[index]) == (Tp / T0 < 1 - p[index])


def test_scalar_p_gives_0d_arrays_and_constants_broadcast_against_p():
    c = Constants(**PAPER)
    terms = iteration_bound(0.3, 1e-6, c)
    assert terms.total.shape == terms.dominant.shape == speedup(0.3, 1e-6, c).shape == ()
    # p of shape (4, 1) against a ζ² of shape (3,): T has shape (4, 3), element by element the scalar formula.
    zeta2 = np.array([0.5, 1.0, 4.0])
    p = np.array([[0.0], [0.25], [0.5], [1.0]])
    total = iteration_bound(p, 1e-6, Constants(**PAPER | {"zeta2": zeta2})).total
    assert total.shape == (4, 3)
    for i, j in np.ndindex(total.shape):
        expected = hand_T(float(p[i, 0]), 1e-6, "strongly-convex", **PAPER | {"zeta2": float(zeta2[j])})
        assert math.isclose(float(total[i, j]), expected, rel_tol=1e-12)


def test_sigma2_hat_override_broadcasts_like_the_other_constants():
    """Constants documents numpy-broadcastable arrays; an array σ̂² override should broadcast against p as ζ² does."""
    sigma2_hat = np.array([0.0, 1.0])
    p = np.array([[0.0], [0.5], [1.0]])
    total = iteration_bound(p, 1e-6, Constants(**PAPER | {"sigma2_hat": sigma2_hat})).total
    assert total.shape == (3, 2)
    for i, j in np.ndindex(total.shape):
        expected = hand_T(float(p[i, 0]), 1e-6, "strongly-convex", **PAPER | {"sigma2_hat": float(sigma2_hat[j])})
        assert math.isclose(float(total[i, j]), expected, rel_tol=1e-12)


# --- min_p_for_speedup ----------------------------------------------------------------------------------------


def hand_min_p(target, eps, convexity, **constants):
    """Smallest p with T(0)/T(p) >= target by bisection on the hand formula; T must be non-increasing in p."""
    T0 = hand_T(0.0, eps, convexity, **constants)
    low, high = 0.0, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (low, middle) if T0 / hand_T(middle, eps, convexity, **constants) >= target else (middle, high)
    return high


@pytest.mark.parametrize("target", [1.0, 0.5, 1e-3])
def test_min_p_is_zero_for_target_at_most_one(target):
    assert min_p_for_speedup(target, 1e-6, Constants(**PAPER)) == 0.0


@pytest.mark.parametrize(
    ("overrides", "eps", "convexity", "target", "monotone"),
    [
        ({"sigma2_hat": 0.0}, 1e-6, "strongly-convex", 2.0, True),
        ({"sigma2_hat": 0.0}, 1e-6, "non-convex", 5.0, True),
        ({"sigma2_hat": 0.0, "mu": 0.2}, 1e-3, "strongly-convex", 1.5, True),
        ({}, 1e-6, "strongly-convex", 2.0, False),  # literal Lemma 1 noise: T(p) rises before it falls
    ],
)
def test_min_p_for_reachable_target(overrides, eps, convexity, target, monotone):
    constants = PAPER | overrides
    c = Constants(**constants)
    p_min = min_p_for_speedup(target, eps, c, convexity)
    assert p_min is not None and 0.0 < p_min <= 1.0
    assert math.isclose(float(speedup(p_min, eps, c, convexity)), target, rel_tol=1e-8)
    assert math.isclose(hand_T(0.0, eps, convexity, **constants) / hand_T(p_min, eps, convexity, **constants), target)
    assert float(speedup(p_min - 1e-6, eps, c, convexity)) < target
    below = np.linspace(0.0, p_min, 4001)[:-1]  # the smallest such p: nothing before it reaches the target
    assert (speedup(below, eps, c, convexity) < target).all()
    if monotone:
        assert abs(p_min - hand_min_p(target, eps, convexity, **constants)) < 1e-9


@pytest.mark.parametrize("convexity", CONVEXITIES)
def test_min_p_none_when_unreachable(convexity):
    c = Constants(**PAPER | {"sigma2_hat": 0.0})
    assert min_p_for_speedup(1e9, 1e-6, c, convexity) is None
    # σ̂² = 0 makes T non-increasing, so the largest speed-up is T(0)/T(1): just above it is out of reach.
    best = hand_T(0.0, 1e-6, convexity, **PAPER | {"sigma2_hat": 0.0}) / hand_T(
        1.0, 1e-6, convexity, **PAPER | {"sigma2_hat": 0.0}
    )
    assert min_p_for_speedup(best * (1 + 1e-6), 1e-6, c, convexity) is None
    p_min = min_p_for_speedup(best * (1 - 1e-6), 1e-6, c, convexity)
    assert p_min is not None and 0.99 < p_min <= 1.0


@pytest.mark.parametrize("grid_size", [0, 1])
def test_min_p_rejects_a_grid_too_small_to_bracket(grid_size):
    c = Constants(**PAPER | {"sigma2_hat": 0.0})
    assert min_p_for_speedup(2.0, 1e-6, c) is not None
    with pytest.raises(ValueError, match="grid_size"):
        min_p_for_speedup(2.0, 1e-6, c, grid_size=grid_size)
