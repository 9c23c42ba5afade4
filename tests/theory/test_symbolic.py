"""The sympy re-derivation of Lemma 1 (appendix D): every step checks, the checker can fail, and the symbolic
quantities are the mixture model's (evaluated numerically against a by-hand numpy computation).

The derivations are cached (functools.cache), so the whole module costs about two seconds of sympy.
"""

import numpy as np
import pytest
import sympy as sp

from theory.symbolic import Derivation, Step, derivations, derive_D4, derive_D5, derive_D7_D11, lemma_latex

P = sp.Symbol("p", real=True)  # the same symbol theory.symbolic uses: sympy symbols are equal by name and assumptions


def test_every_derivation_verifies():
    found = derivations()
    assert [d.name for d in found] == ["D-5", "D-7..D-11", "D-4"]
    for derivation in found:
        assert derivation.verified, derivation.name
        assert all(step.verified for step in derivation.steps), derivation.name


@pytest.mark.parametrize(
    ("derive", "n_steps"),
    [
        (derive_D5, 3),  # default K = 2 != N·m: no uniform-mix step; K % m == 0: the own-data step
        (derive_D7_D11, 6),  # D.7-D.10 for client 1, D.11 and the one inequality
        (derive_D4, 2),
    ],
)
def test_each_step_has_zero_residual(derive, n_steps):
    derivation = derive()
    assert len(derivation.steps) == n_steps
    for step in derivation.steps:
        assert step.residual == 0, step.equation
        assert step.verified


def test_d5_in_two_dimensions():
    derivation = derive_D5(2, 2, 4, 2)
    assert derivation.verified
    assert len(derivation.steps) == 4  # K = N·m = 4: the uniform-mix step is included
    # every coordinate of every sample is a free symbol: N·m·d + N·K·d + p
    assert len(derivation.steps[0].lhs.free_symbols) == 2 * 2 * 2 + 2 * 4 * 2 + 1


def substitute(expr, values, p):
    """expr with every sample symbol replaced by values[name] and p by p, as a float."""
    return float(expr.xreplace({s: (p if s.name == "p" else values[s.name]) for s in expr.free_symbols}))


def test_d5_lhs_is_the_mixture_dissimilarity():
    """ζ̂²_p in derive_D5 equals (1/N)Σ_i ||∇f̂_i - ∇f̂||² with ∇f̂_i = (1-p)∇f_i + p∇f̃_i, computed in numpy."""
    N, m, K, d, p = 3, 2, 2, 1, 0.3
    rng = np.random.default_rng(5)
    g, h = rng.normal(size=(N, m, d)), rng.normal(size=(N, K, d))
    values = {f"g_{i}_{j}_{c}": g[i, j, c] for i in range(N) for j in range(m) for c in range(d)}
    values |= {f"h_{i}_{k}_{c}": h[i, k, c] for i in range(N) for k in range(K) for c in range(d)}
    grads = (1 - p) * g.mean(axis=1) + p * h.mean(axis=1)
    by_hand = np.mean(np.sum((grads - grads.mean(axis=0)) ** 2, axis=-1))
    assert substitute(derive_D5(N, m, K, d).steps[0].lhs, values, p) == pytest.approx(by_hand, rel=1e-12)


def test_d11_lhs_is_the_mixture_noise():
    """E_i σ̂²_{p,i} in derive_D7_D11 equals the client-averaged variance of D̂_i = (1-p)D_i + pD̃, in numpy."""
    N, m, K, p = 3, 2, 2, 0.4
    rng = np.random.default_rng(6)
    g, h = rng.normal(size=(N, m)), rng.normal(size=K)
    values = {f"g_{i}_{j}_0": g[i, j] for i in range(N) for j in range(m)} | {f"h_{k}_0": h[k] for k in range(K)}
    variances = []
    for i in range(N):
        support = np.concatenate([g[i], h])
        weights = np.concatenate([np.full(m, (1 - p) / m), np.full(K, p / K)])
        mean = weights @ support
        variances.append(weights @ (support - mean) ** 2)
    d11 = derive_D7_D11(N, m, K).steps[-2]
    assert "D.11" in d11.justification
    assert substitute(d11.lhs, values, p) == pytest.approx(np.mean(variances), rel=1e-12)


def test_a_wrong_claim_is_not_verified():
    """Claim ζ̂²_p = (1-p)ζ² (instead of (1-p)²ζ²) with derive_D5's own expressions: the checker rejects it."""
    derivation = derive_D5()
    shared, own = derivation.steps[1], derivation.steps[2]  # ζ̂²_p for a shared D̃; own.rhs is ζ² itself
    zeta2 = own.rhs
    right = Step("right", "(1-p)^2", shared.lhs, shared.rhs)
    wrong = Step(r"\hat\zeta_p^2 = (1-p)\zeta^2", "wrong power", shared.lhs, (1 - P) * zeta2)
    assert right.verified and not wrong.verified
    # the residual is exactly what the wrong claim misses: (1-p)²ζ² - (1-p)ζ² = -p(1-p)ζ²
    assert sp.expand(wrong.residual + P * (1 - P) * zeta2) == 0
    broken = Derivation("D-5 (broken)", "wrong", (right, wrong), "test")
    assert not broken.verified
    assert broken.latex().count("NOT verified") == 1


def test_a_wrong_claim_on_a_hand_built_problem_is_not_verified():
    """Two clients with one scalar sample each and one shared D̃ sample, built here from scratch."""
    g0, g1, h = sp.symbols("u0 u1 v", real=True)
    grad_f = [g0, g1]
    mean = (g0 + g1) / 2
    zeta2 = sum((a - mean) ** 2 for a in grad_f) / 2
    grad_hat = [(1 - P) * a + P * h for a in grad_f]
    mean_hat = sum(grad_hat) / 2
    zeta2_hat = sum((a - mean_hat) ** 2 for a in grad_hat) / 2
    assert Step("", "", zeta2_hat, (1 - P) ** 2 * zeta2).verified
    assert not Step("", "", zeta2_hat, (1 - P) * zeta2).verified
    assert not Step("", "", zeta2_hat, (1 - P) ** 2 * zeta2 + P**2 * (h - mean) ** 2).verified


def test_a_wrong_inequality_gap_is_not_verified():
    """The D-11 inequality with its gap (1-p)s dropped: rhs - lhs != gap."""
    step = derive_D7_D11().steps[-1]
    assert step.relation == "<=" and step.verified
    assert not Step(step.equation, "no gap", step.lhs, step.rhs, relation="<=").verified


def test_inequality_gaps_are_non_negative():
    """Step.verified only checks rhs - lhs == gap; that each gap is >= 0 is checked here, for p in [0, 1].

    D-11: gap (1-p)s with s = σ² - σ̄² >= 0 (Assumption 2). D-4: gap (1-p)(L_max - L_1), >= 0 because L_max is the
    largest client curvature; write L_max = L_1 + t with t >= 0 and p = 1 - q with q >= 0.
    """
    q, t = sp.symbols("q t", nonnegative=True)
    d11 = derive_D7_D11().steps[-1]
    assert d11.gap.xreplace({P: 1 - q}).is_nonnegative

    d4 = derive_D4().steps[1]
    L_max = sp.Symbol("L_max", nonnegative=True)
    a00, a01 = (sp.Symbol(f"a_0_{j}", nonnegative=True) for j in range(2))
    L_1 = (a00 + a01) / 2  # client 1's curvature, m = 2 samples
    assert d4.gap.free_symbols == {P, L_max, a00, a01}
    assert sp.expand(d4.gap.xreplace({P: 1 - q, L_max: L_1 + t}) - q * t) == 0


def test_lemma_latex():
    text = lemma_latex()
    found = derivations()
    assert text.count(r"\begin{align*}") == len(found) == 3
    assert text.count(r"\end{align*}") == len(found)
    assert "NOT verified" not in text
    assert text.count("; verified}") == sum(len(d.steps) for d in found)
    for derivation in found:
        assert f"% {derivation.name}:" in text
