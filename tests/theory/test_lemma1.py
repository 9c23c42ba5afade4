"""Lemma 1 (Fedssyn eq. 4, appendix D) on random finite problems: the estimators against hand-written identities.

The library computes the shuffled quantities from the mixture's definition (weighted sums over samples); the
tests compute the closed forms of D.5, D.10-D.11 and D-4 independently, in a few lines of numpy each.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import theory
from theory import estimators, lemma1

REL = 1e-10
settings.register_profile("theory", max_examples=60, deadline=None)
settings.load_profile("theory")

p_values = st.floats(0.0, 1.0)
finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)


@st.composite
def gradients(draw, max_clients=5, max_samples=6, max_dim=3):
    """Per-sample gradients G (N, n, d) with client offsets so that ζ² is not negligible."""
    N = draw(st.integers(2, max_clients))
    n = draw(st.integers(1, max_samples))
    d = draw(st.integers(1, max_dim))
    offsets = draw(hnp.arrays(np.float64, (N, 1, d), elements=finite))
    spread = draw(hnp.arrays(np.float64, (N, n, d), elements=finite))
    return offsets + spread


def client_means(G):
    return G.mean(axis=1)


def dissimilarity(means):
    return np.mean(np.sum((means - means.mean(axis=0)) ** 2, axis=-1))


def close(a, b):
    return np.allclose(a, b, rtol=REL, atol=REL * (1 + np.max(np.abs(b))))


@given(G=gradients(), p=p_values)
def test_mixture_zeta2_is_exactly_quadratic_in_one_minus_p(G, p):
    """D.5 with the uniform mix D̃ = ∪D_i: ζ̂²_p = (1-p)²ζ² to 1e-10."""
    zeta2 = dissimilarity(client_means(G))
    assert close(estimators.mixture_zeta2(G, p), (1 - p) ** 2 * zeta2)
    assert estimators.mixture_zeta2(G, p) <= lemma1.zeta2_hat_bound(p, zeta2) * (1 + REL) + REL


@given(G=gradients(), p=p_values, data=st.data())
def test_mixture_zeta2_with_shared_synthetic_pool(G, p, data):
    """Any D̃ shared by all clients (e.g. a synthetic pool) gives the same identity: δ does not enter ζ̂²."""
    K = data.draw(st.integers(1, 5))
    G_tilde = data.draw(hnp.arrays(np.float64, (K, G.shape[-1]), elements=finite))
    assert close(estimators.mixture_zeta2(G, p, G_tilde), (1 - p) ** 2 * dissimilarity(client_means(G)))


@given(G=gradients(), p=p_values, data=st.data())
def test_mixture_zeta2_with_per_client_pools_has_the_cross_term(G, p, data):
    """Per-client D̃_i: ζ̂²_p = (1-p)²ζ² + p²ζ̃² + 2p(1-p)C — the term D.5 drops; can exceed (1-p)²ζ²."""
    N, _, d = G.shape
    K = data.draw(st.integers(1, 4))
    G_tilde = data.draw(hnp.arrays(np.float64, (N, K, d), elements=finite))
    a = client_means(G) - client_means(G).mean(axis=0)
    b = G_tilde.mean(axis=1) - G_tilde.mean(axis=1).mean(axis=0)
    expected = (1 - p) ** 2 * np.mean(np.sum(a * a, -1)) + p**2 * np.mean(np.sum(b * b, -1))
    expected += 2 * p * (1 - p) * np.mean(np.sum(a * b, -1))
    assert close(estimators.mixture_zeta2(G, p, G_tilde), expected)


def test_own_distribution_gives_no_reduction():
    """D̃_i = D_i (a client mixing in its own synthetic data): ζ̂²_p = ζ² for every p."""
    G = np.random.default_rng(0).normal(size=(4, 6, 3)) + np.arange(4)[:, None, None]
    p = np.linspace(0, 1, 5)
    assert np.allclose(estimators.mixture_zeta2(G, p, G_tilde=G), theory.zeta2(G))


@given(G=gradients(), p=p_values, data=st.data())
def test_mixture_sigma2_identity_and_bound(G, p, data):
    """D.10-D.11 are identities: E_i σ̂²_{p,i} = (1-p)σ̄² + pσ̃² + p(1-p)(ζ² + δ²); the bound of D.6 holds."""
    K = data.draw(st.integers(1, 5))
    G_tilde = data.draw(hnp.arrays(np.float64, (K, G.shape[-1]), elements=finite))
    means = client_means(G)
    sigma2_i = np.mean(np.sum((G - means[:, None]) ** 2, -1), axis=1)
    sigma2_tilde = np.mean(np.sum((G_tilde - G_tilde.mean(0)) ** 2, -1))
    zeta2 = dissimilarity(means)
    delta2 = np.sum((means.mean(0) - G_tilde.mean(0)) ** 2)
    identity = (1 - p) * sigma2_i.mean() + p * sigma2_tilde + p * (1 - p) * (zeta2 + delta2)
    assert close(estimators.mixture_sigma2(G, p, G_tilde), identity)
    assert close(estimators.delta2(G, G_tilde), delta2)
    # Assumption 2 as a uniform bound: σ² = max_i σ_i² >= the average.
    bound = lemma1.sigma2_hat_bound(p, sigma2_i.max(), zeta2, sigma2_tilde, delta2)
    assert estimators.mixture_sigma2(G, p, G_tilde) <= bound * (1 + REL) + REL


@given(G=gradients(), p=p_values)
def test_mixture_sigma2_per_client_identity_real_shuffle(G, p):
    """Per client, D.10 with D̃ = ∪D_i: σ̂²_{p,i} = (1-p)σ_i² + pσ̃² + p(1-p)||∇f_i - ∇f||² (δ = 0)."""
    means = client_means(G)
    sigma2_i = np.mean(np.sum((G - means[:, None]) ** 2, -1), axis=1)
    pooled = G.reshape(-1, G.shape[-1])
    sigma2_tilde = np.mean(np.sum((pooled - pooled.mean(0)) ** 2, -1))
    gap = np.sum((means - pooled.mean(0)) ** 2, -1)
    expected = (1 - p) * sigma2_i + p * sigma2_tilde + p * (1 - p) * gap
    assert close(estimators.mixture_sigma2_per_client(G, p), expected)


@st.composite
def psd_hessians(draw, max_clients=4, max_samples=4, max_dim=3):
    """Per-sample PSD Hessians H_ij = B Bᵀ of random quadratics, shape (N, n, d, d)."""
    N = draw(st.integers(2, max_clients))
    n = draw(st.integers(1, max_samples))
    d = draw(st.integers(1, max_dim))
    B = draw(hnp.arrays(np.float64, (N, n, d, d), elements=st.floats(-3, 3)))
    return B @ np.swapaxes(B, -1, -2)


@given(H=psd_hessians(), p=p_values)
def test_mixture_smoothness_below_the_bound(H, p):
    """D-4: L_p = max_i ||(1-p)∇²f_i + p∇²f|| <= (1-p)L_max + pL_avg, with either definition of L_avg."""
    client = H.mean(axis=1)
    L_i = np.array([np.max(np.abs(np.linalg.eigvalsh(h))) for h in client])  # eigenvalues, not the library's norm
    L_global = np.max(np.abs(np.linalg.eigvalsh(client.mean(0))))
    L_p = estimators.mixture_L_p(H, p)
    tolerance = 1e-9 * (1 + L_i.max())
    assert L_p <= lemma1.L_p_bound(p, L_i.max(), L_global) + tolerance
    assert L_p <= lemma1.L_p_bound(p, L_i.max(), L_i.mean()) + tolerance
    s = estimators.smoothness(H)
    assert np.allclose(s.L_clients, L_i) and np.isclose(s.L_global, L_global)
    assert s.L_global <= s.L_avg + tolerance <= s.L_max + 2 * tolerance
    assert np.isclose(estimators.mixture_L_p(H, 0.0), s.L_max)
    assert np.isclose(estimators.mixture_L_p(H, 1.0), s.L_global)


@given(H=psd_hessians(), data=st.data(), p=p_values)
def test_quadratic_gradients_match_the_mixture_objective(H, data, p):
    """Random quadratics F(x; ξ) = ½xᵀH_ξx - b_ξᵀx: ∇f̂_i(x) = ((1-p)H̄_i + pH̄)x - ((1-p)b̄_i + pb̄) at any x."""
    N, n, d, _ = H.shape
    b = data.draw(hnp.arrays(np.float64, (N, n, d), elements=finite))
    x = data.draw(hnp.arrays(np.float64, (d,), elements=finite))
    G = H @ x - b  # per-sample gradients at x
    H_bar, b_bar = H.mean(axis=1), b.mean(axis=1)
    expected = ((1 - p) * H_bar + p * H_bar.mean(0)) @ x - ((1 - p) * b_bar + p * b_bar.mean(0))
    assert close(estimators.mixture_client_gradients(G, p), expected)
    assert close(estimators.mixture_zeta2(G, p), (1 - p) ** 2 * theory.zeta2(G))


def test_bounds_broadcast_over_p():
    p = np.linspace(0, 1, 7)
    assert lemma1.zeta2_hat_bound(p, 2.0).shape == (7,)
    assert lemma1.sigma2_hat_bound(p, 1.0, 2.0).shape == (7,)
    assert lemma1.L_p_bound(p, 100.0, 38.5).shape == (7,)
    assert np.allclose(lemma1.L_p_bound(p, 100.0, 38.5), 100 - 61.5 * p)
    assert estimators.mixture_zeta2(np.ones((2, 3, 1)), p[:, None]).shape == (7, 1)


def test_sigma2_hat_bound_endpoints():
    """p = 0: the clients' own noise; p = 1: the shuffled data's noise; ζ² enters only for 0 < p < 1."""
    assert lemma1.sigma2_hat_bound(0.0, 2.0, 5.0, 3.0, 7.0) == 2.0
    assert lemma1.sigma2_hat_bound(1.0, 2.0, 5.0, 3.0, 7.0) == 3.0
    assert np.isclose(lemma1.sigma2_hat_bound(0.5, 2.0, 5.0, 3.0, 7.0), 0.5 * 2 + 0.5 * 3 + 0.25 * 12)
