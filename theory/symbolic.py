"""Lemma 1's proof (Fedssyn appendix D: D-5, D-7 to D-11, D-4) re-derived with sympy from the mixture model.

Each derivation is a list of steps. An "=" step is an exact identity whose residual (left minus right side,
expanded) sympy reduces to 0; a "<=" step states the inequality the paper applies and names the non-negative
gap, which sympy checks equals right minus left side. The identities are checked on a generic finite problem:
N clients with m samples each and K samples of the shuffled-in distribution D̃, every per-sample gradient a
free symbol of dimension d. Every quantity is a sum over coordinates of the same polynomial, so d = 1 already
covers all dimensions; ``d`` is a parameter to check it.

Findings, stated where they matter:

- D-5: with a different D̃_i per client the exact identity is
  ζ̂²_p = (1-p)²ζ² + p²ζ̃² + 2p(1-p)·C, where ζ̃² is the dissimilarity of the D̃_i and C = E_i<∇f_i - ∇f,
  ∇f̃_i - ∇f̃>. The paper's third line drops the cross term C. When all clients share one D̃ (the mixture of
  Sec. 2.1, and any server-side pooled shuffle in expectation), ζ̃² = C = 0 and ζ̂²_p = (1-p)²ζ² exactly; with
  D̃_i = D_i (a client's own synthetic data) ζ̂²_p = ζ², no reduction.
- D-10: the paper writes "<=" but (1-p)p² + p(1-p)² = p(1-p) makes it an identity, and D-11 is an identity too
  when σ² is the client-averaged noise; the only inequality left is σ_i² <= σ² (Assumption 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import sympy as sp

from theory import _validate


@dataclass(frozen=True)
class Step:
    """One step: ``equation`` (LaTeX), checked as lhs = rhs, or as rhs - lhs = gap for an inequality."""

    equation: str
    justification: str
    lhs: sp.Expr
    rhs: sp.Expr
    relation: str = "="
    gap: sp.Expr = field(default_factory=lambda: sp.Integer(0))

    @property
    def residual(self) -> sp.Expr:
        """0 when the step is verified."""
        if self.relation == "=":
            return sp.expand(self.lhs - self.rhs)
        return sp.expand(self.rhs - self.lhs - self.gap)

    @property
    def verified(self) -> bool:
        return self.residual == 0


@dataclass(frozen=True)
class Derivation:
    """A lemma's derivation: its name (the paper's equation label), statement and steps."""

    name: str
    statement: str
    steps: tuple[Step, ...]
    model: str

    @property
    def verified(self) -> bool:
        return all(step.verified for step in self.steps)

    def latex(self) -> str:
        """The derivation as a LaTeX ``align*`` block with one line per step and its justification."""
        lines = [f"% {self.name}: {self.statement}", f"% checked on {self.model}", r"\begin{align*}"]
        for step in self.steps:
            mark = "verified" if step.verified else "NOT verified"
            lines.append(rf"  & {step.equation} && \text{{{step.justification}; {mark}}} \\")
        lines.append(r"\end{align*}")
        return "\n".join(lines)


def _sq(v: sp.Matrix) -> sp.Expr:
    return v.dot(v)


def _mean(items):
    items = list(items)
    return sum(items, sp.zeros(*items[0].shape) if isinstance(items[0], sp.MatrixBase) else 0) / len(items)


def _vectors(prefix: str, *shape: int, d: int) -> list:
    """Nested lists of d-dimensional symbolic vectors, e.g. g[i][j] for client i, sample j."""
    if len(shape) == 1:
        return [sp.Matrix(sp.symbols(f"{prefix}_{a}_0:{d}", real=True)) for a in range(shape[0])]
    return [_vectors(f"{prefix}_{a}", *shape[1:], d=d) for a in range(shape[0])]


def _sizes(N: int, m: int, K: int, d: int) -> None:
    for name, value in (("N", N), ("m", m), ("K", K), ("d", d)):
        _validate.count(name, value)


@cache
def derive_D5(N: int = 3, m: int = 2, K: int = 2, d: int = 1) -> Derivation:
    """Lemma D-2 / eq. D.5: shuffled gradient dissimilarity under D̂_i = (1-p)D_i + pD̃_i."""
    _sizes(N, m, K, d)
    p = sp.Symbol("p", real=True)
    g = _vectors("g", N, m, d=d)  # client i's samples of D_i
    h = _vectors("h", N, K, d=d)  # client i's samples of its shuffled-in D̃_i
    grad_f = [_mean(gi) for gi in g]  # ∇f_i
    grad_ft = [_mean(hi) for hi in h]  # ∇f̃_i
    grad_hat = [(1 - p) * a + p * b for a, b in zip(grad_f, grad_ft)]  # ∇f̂_i, eq. D.2b
    zeta2 = _mean(_sq(a - _mean(grad_f)) for a in grad_f)
    zeta2_tilde = _mean(_sq(b - _mean(grad_ft)) for b in grad_ft)
    cross = _mean((a - _mean(grad_f)).dot(b - _mean(grad_ft)) for a, b in zip(grad_f, grad_ft))
    zeta2_hat = _mean(_sq(c - _mean(grad_hat)) for c in grad_hat)

    shared = {sym: h[0][k][c] for i in range(1, N) for k in range(K) for c, sym in enumerate(h[i][k])}
    pooled = [x for gi in g for x in gi]
    uniform = {sym: pooled[k % len(pooled)][c] for i in range(N) for k in range(K) for c, sym in enumerate(h[i][k])}
    # The uniform mix needs D̃ to be all N·m samples; with K = N·m each D̃_i is exactly that pool.
    steps = [
        Step(
            r"\hat\zeta_p^2 = (1-p)^2\zeta^2 + p^2\tilde\zeta^2 + 2p(1-p)\,"
            r"\mathbb{E}_i\langle\nabla f_i-\nabla f,\nabla\tilde f_i-\nabla\tilde f\rangle",
            r"expand $\nabla\hat f_i = (1-p)\nabla f_i + p\nabla\tilde f_i$ (D.2b)",
            zeta2_hat,
            (1 - p) ** 2 * zeta2 + p**2 * zeta2_tilde + 2 * p * (1 - p) * cross,
        ),
        Step(
            r"\hat\zeta_p^2 - (1-p)^2\zeta^2 = 0 \quad(\tilde{\mathcal D}_i = \tilde{\mathcal D}\ \forall i)",
            r"one shared $\tilde{\mathcal D}$: its dissimilarity and the cross term vanish",
            zeta2_hat.xreplace(shared),
            ((1 - p) ** 2 * zeta2).xreplace(shared),
        ),
    ]
    if K == N * m:
        steps.append(
            Step(
                r"\hat\zeta_p^2 = (1-p)^2\zeta^2 \quad(\tilde{\mathcal D} = \textstyle\bigcup_i \mathcal D_i)",
                "uniform mix of the real data (Sec. 2.1)",
                zeta2_hat.xreplace(uniform),
                (1 - p) ** 2 * zeta2,
            )
        )
    if K % m == 0:  # D̃_i = D_i: each of client i's samples repeated K/m times
        own = {sym: g[i][k % m][c] for i in range(N) for k in range(K) for c, sym in enumerate(h[i][k])}
        steps.append(
            Step(
                r"\hat\zeta_p^2 = \zeta^2 \quad(\tilde{\mathcal D}_i = \mathcal D_i)",
                "a client mixing in its own distribution (own synthetic data) gains nothing",
                zeta2_hat.xreplace(own),
                zeta2,
            )
        )
    return Derivation(
        "D-5",
        r"\hat\zeta_p^2 \le (1-p)^2\zeta^2 (equality for a shared \tilde{\mathcal D})",
        tuple(steps),
        f"N={N} clients, m={m} samples, K={K} samples of each shuffled-in distribution, d={d}",
    )


@cache
def derive_D7_D11(N: int = 3, m: int = 2, K: int = 2, d: int = 1) -> Derivation:
    """Lemma D-3 / eqs. D.7–D.11: shuffled stochastic noise with a shared (possibly synthetic) D̃."""
    _sizes(N, m, K, d)
    p = sp.Symbol("p", real=True)
    excess = sp.Symbol(r"s", nonnegative=True)  # σ² - σ̄² >= 0: Assumption 2 bounds the average noise
    g = _vectors("g", N, m, d=d)
    h = _vectors("h", K, d=d)  # samples of D̃, shared by all clients
    grad_f = [_mean(gi) for gi in g]
    grad_global = _mean(grad_f)
    grad_ft = _mean(h)
    sigma2_i = [_mean(_sq(x - a) for x in gi) for gi, a in zip(g, grad_f)]
    sigma2_tilde = _mean(_sq(y - grad_ft) for y in h)
    zeta2 = _mean(_sq(a - grad_global) for a in grad_f)
    delta2 = _sq(grad_global - grad_ft)

    steps = []
    sigma2_hat_i = []
    for i in range(N):
        centre = (1 - p) * grad_f[i] + p * grad_ft  # ∇f̂_i (D.2b)
        # Definition (D.1): a draw of D̂_i is one of client i's m samples w.p. (1-p)/m each, or one of D̃'s K
        # samples w.p. p/K each; its variance via E||X||² - ||E X||² (Lemma D-1).
        second = (1 - p) * _mean(_sq(x) for x in g[i]) + p * _mean(_sq(y) for y in h)
        mean = (1 - p) * grad_f[i] + p * grad_ft
        variance = second - _sq(mean)
        A1 = _mean(_sq(x - centre) for x in g[i])
        A2 = _mean(_sq(y - centre) for y in h)
        gap_i = _sq(grad_f[i] - grad_ft)
        sigma2_hat_i.append(variance)
        if i == 0:  # the per-client steps are the same for every client; show them for client 1
            steps += [
                Step(
                    r"\hat\sigma_{p,i}^2 = (1-p)\mathcal A_1 + p\mathcal A_2",
                    "D.7: variance of the two-component mixture (Lemma D-1)",
                    variance,
                    (1 - p) * A1 + p * A2,
                ),
                Step(
                    r"\mathcal A_1 = \sigma_i^2 + p^2\|\nabla f_i - \nabla\tilde f\|^2",
                    r"D.8: $\mathbb E_{\mathcal D_i}\nabla F_i = \nabla f_i$ removes the cross term",
                    A1,
                    sigma2_i[i] + p**2 * gap_i,
                ),
                Step(
                    r"\mathcal A_2 = \tilde\sigma^2 + (1-p)^2\|\nabla f_i - \nabla\tilde f\|^2",
                    r"D.9: $\mathbb E_{\tilde{\mathcal D}}\nabla\tilde F = \nabla\tilde f$ removes the cross term",
                    A2,
                    sigma2_tilde + (1 - p) ** 2 * gap_i,
                ),
                Step(
                    r"\hat\sigma_{p,i}^2 = (1-p)\sigma_i^2 + p\tilde\sigma^2 + p(1-p)\|\nabla f_i - \nabla\tilde f\|^2",
                    r"D.10 holds with equality: $(1-p)p^2 + p(1-p)^2 = p(1-p)$",
                    variance,
                    (1 - p) * sigma2_i[i] + p * sigma2_tilde + p * (1 - p) * gap_i,
                ),
            ]
    sigma2_bar = _mean(sigma2_i)
    sigma2_hat = _mean(sigma2_hat_i)
    steps += [
        Step(
            r"\mathbb E_i\hat\sigma_{p,i}^2 = (1-p)\bar\sigma^2 + p\tilde\sigma^2 + p(1-p)(\zeta^2 + \delta^2)",
            r"D.11 holds with equality: $\mathbb E_i\nabla f_i = \nabla f$ removes the cross term",
            sigma2_hat,
            (1 - p) * sigma2_bar + p * sigma2_tilde + p * (1 - p) * (zeta2 + delta2),
        ),
        Step(
            r"\mathbb E_i\hat\sigma_{p,i}^2 \le (1-p)\sigma^2 + p\tilde\sigma^2 + p(1-p)(\zeta^2 + \delta^2)",
            r"the only inequality: Assumption 2 bounds the average noise, $\sigma^2 = \bar\sigma^2 + s$, $s \ge 0$",
            sigma2_hat,
            (1 - p) * (sigma2_bar + excess) + p * sigma2_tilde + p * (1 - p) * (zeta2 + delta2),
            relation="<=",
            gap=(1 - p) * excess,
        ),
    ]
    return Derivation(
        "D-7..D-11",
        r"\mathbb E\hat\sigma_p^2 \le (1-p)\sigma^2 + p\tilde\sigma^2 + p(1-p)\zeta^2 + p(1-p)\delta^2",
        tuple(steps),
        f"N={N} clients, m={m} samples, K={K} samples of a shared shuffled-in distribution, d={d}",
    )


@cache
def derive_D4(N: int = 3, m: int = 2) -> Derivation:
    """Lemma D-4: smoothness of f̂_i for quadratic samples F(x; ξ) = a_ξ x²/2 - b_ξ x with curvature a_ξ >= 0.

    The Hessian identity ∇²f̂_i = (1-p)∇²f_i + p∇²f is derived by differentiating the mixture objective; the
    inequality's gap (1-p)(L_max - L_i) is non-negative because L_max is the largest client curvature.
    """
    _validate.count("N", N)
    _validate.count("m", m)
    p, x = sp.symbols("p x", real=True)
    a = [[sp.Symbol(f"a_{i}_{j}", nonnegative=True) for j in range(m)] for i in range(N)]
    b = [[sp.Symbol(f"b_{i}_{j}", real=True) for j in range(m)] for i in range(N)]
    f_i = [_mean(a[i][j] * x**2 / 2 - b[i][j] * x for j in range(m)) for i in range(N)]
    f = _mean(f_i)
    f_hat = [(1 - p) * fi + p * f for fi in f_i]  # D.2b with D̃ the uniform mix
    L_i = [sp.diff(fi, x, 2) for fi in f_i]
    L_avg = sp.diff(f, x, 2)
    L_max = sp.Symbol("L_max", nonnegative=True)
    i = 0
    return Derivation(
        "D-4",
        r"L_p \le (1-p)L_{\max} + pL_{\mathrm{avg}}",
        (
            Step(
                r"\nabla^2\hat f_i = (1-p)\nabla^2 f_i + p\nabla^2 f",
                "differentiate the mixture objective twice",
                sp.diff(f_hat[i], x, 2),
                (1 - p) * L_i[i] + p * L_avg,
            ),
            Step(
                r"L_{p,i} \le (1-p)L_{\max} + pL_{\mathrm{avg}}",
                r"the gap is $(1-p)(L_{\max} - L_i) \ge 0$ (for matrices: triangle inequality)",
                sp.diff(f_hat[i], x, 2),
                (1 - p) * L_max + p * L_avg,
                relation="<=",
                gap=(1 - p) * (L_max - L_i[i]),
            ),
        ),
        f"N={N} clients, m={m} scalar quadratic samples each",
    )


def derivations(N: int = 3, m: int = 2, d: int = 1) -> tuple[Derivation, ...]:
    """All of Lemma 1's derivations, D-5 with K = N·m so that the uniform-mix step is included."""
    return (derive_D5(N, m, N * m, d), derive_D7_D11(N, m, 2, d), derive_D4(N, m))


def lemma_latex(N: int = 3, m: int = 2, d: int = 1) -> str:
    """Every derivation of Lemma 1 as LaTeX, one ``align*`` block each."""
    return "\n\n".join(derivation.latex() for derivation in derivations(N, m, d))
