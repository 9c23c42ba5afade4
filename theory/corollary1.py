"""Corollary I of Fedssyn: iterations of FedAvg to reach accuracy eps after shuffling a fraction p.

The corollary (fedssyn_neurips.txt, Sec. 2.2) plugs Lemma 1 into the FedAvg rates of Koloskova et al. 2020
(the paper's reference [19]). With σ̂²_p := (1-p)σ² + pσ̃² + p(1-p)ζ² (+ p(1-p)δ² for synthetic data, D-3)
and L_p := (1-p)L_max + pL_avg (D-4), the number of iterations T is, up to constants,

strongly convex (μ > 0)::

    T = σ̂²_p / (μ N ε)                                   noise term
      + √L_p (τ (1-p) ζ + √τ σ̂_p) / (μ √ε)               drift (heterogeneity) term
      + (L_p τ / μ) log(1/ε)                              deterministic term

non-convex::

    T = L_p σ̂²_p / (N ε²) + L_p (τ (1-p) ζ + √τ σ̂_p) / ε^{3/2} + L_p τ / ε

Every O-constant is set to 1, so T is a bound *shape*, not a prediction of absolute counts: ratios T(p)/T(0)
are what the package compares with measurements. log(1/ε) is floored at 1 (``log_term``) so that the
deterministic term stays positive for ε >= 1/e. At p = 0 the formulas are exactly the Koloskova et al. rates
quoted in the paper (L_1 = L_max, ζ, σ unchanged).

``N`` is the number of clients, ``tau`` (τ) the number of local steps, ``mu`` (μ) the strong-convexity constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from theory import _validate
from theory.errors import InputError
from theory.lemma1 import L_p_bound, sigma2_hat_bound

Convexity = Literal["strongly-convex", "non-convex"]
CONVEXITIES: tuple[str, ...] = ("strongly-convex", "non-convex")
TERM_NAMES: tuple[str, ...] = ("noise", "drift", "deterministic")


@dataclass(frozen=True)
class Constants:
    """Problem constants of Corollary I (scalars or numpy-broadcastable arrays).

    zeta2: ζ², gradient dissimilarity (Assumption 1, eq. 2).
    sigma2: σ², stochastic noise on the clients' own data (Assumption 2, eq. 3).
    L_max: largest client smoothness (L_1 in Koloskova et al.; D-4). Must be > 0.
    L_avg: smoothness of the global objective (D-4), 0 < L_avg <= L_max.
    tau: τ, local steps per round, >= 1.
    N: number of clients, >= 1.
    mu: μ, strong-convexity constant (used by the strongly convex rate only), > 0.
    sigma2_tilde: σ̃², noise on the shuffled data D̃ (p = 1); None means equal to sigma2.
    delta2: δ² = ||∇f - ∇f̃||², distance of a synthetic D̃ from the real data (D-3); 0 for real shuffling.
    sigma2_hat: overrides Lemma 1's σ̂²_p when given (e.g. 0 for full-batch local gradients, where shuffling adds
        no sampling noise); None uses the Lemma 1 bound.
    """

    zeta2: ArrayLike
    sigma2: ArrayLike
    L_max: ArrayLike
    L_avg: ArrayLike
    tau: ArrayLike = 1.0
    N: ArrayLike = 1.0
    mu: ArrayLike = 1.0
    sigma2_tilde: ArrayLike | None = None
    delta2: ArrayLike = 0.0
    sigma2_hat: ArrayLike | None = None

    def __post_init__(self) -> None:
        _validate.nonnegative("zeta2", self.zeta2)
        _validate.nonnegative("sigma2", self.sigma2)
        _validate.positive("L_max", self.L_max)
        _validate.positive("L_avg", self.L_avg)  # L_avg = 0 would make T(1) = 0 and the speed-up infinite
        _validate.at_least_one("tau", self.tau)
        _validate.at_least_one("N", self.N)
        _validate.positive("mu", self.mu)
        if self.sigma2_tilde is not None:
            _validate.nonnegative("sigma2_tilde", self.sigma2_tilde)
        _validate.nonnegative("delta2", self.delta2)
        if self.sigma2_hat is not None:
            _validate.nonnegative("sigma2_hat", self.sigma2_hat)
        if (np.asarray(self.L_avg) > np.asarray(self.L_max) * (1 + 1e-12)).any():
            raise InputError("L_avg must not exceed L_max")


@dataclass(frozen=True)
class RateTerms:
    """The three terms of Corollary I, each an array broadcast over p (and the constants).

    ``drift`` = ``drift_zeta`` + ``drift_sigma``: the part driven by the dissimilarity τ(1-p)ζ and the part
    driven by the noise √τ σ̂_p.
    """

    noise: np.ndarray
    drift_zeta: np.ndarray
    drift_sigma: np.ndarray
    deterministic: np.ndarray

    @property
    def drift(self) -> np.ndarray:
        return self.drift_zeta + self.drift_sigma

    @property
    def total(self) -> np.ndarray:
        """T, the iteration bound with all O-constants equal to 1."""
        return self.noise + self.drift + self.deterministic

    @property
    def dominant(self) -> np.ndarray:
        """Name of the largest term ('noise', 'drift' or 'deterministic'), elementwise."""
        stacked = np.stack(np.broadcast_arrays(self.noise, self.drift, self.deterministic))
        return np.asarray(TERM_NAMES)[np.argmax(stacked, axis=0)]


def log_term(eps: np.ndarray) -> np.ndarray:
    """log(1/ε) floored at 1, the factor of the strongly convex deterministic term."""
    return np.maximum(np.log(1.0 / eps), 1.0)


def iteration_bound(
    p: ArrayLike, eps: ArrayLike, constants: Constants, convexity: Convexity = "strongly-convex"
) -> RateTerms:
    """Corollary I's iteration bound T(p) to reach accuracy ``eps``, term by term.

    >>> c = Constants(zeta2=1.0, sigma2=0.0, L_max=100.0, L_avg=38.5, tau=10, N=10)
    >>> terms = iteration_bound(0.0, 1e-6, c)
    >>> round(float(terms.drift), 1)  # √L τ ζ / (μ √ε) = 10 · 10 · 1 / 1e-3
    100000.0
    """
    if convexity not in CONVEXITIES:
        raise InputError(f"convexity must be one of {CONVEXITIES}, got {convexity!r}")
    p = _validate.fraction("p", p)
    eps = _validate.positive("eps", eps)
    c = constants
    zeta2, tau, N, mu = (np.asarray(v, dtype=np.float64) for v in (c.zeta2, c.tau, c.N, c.mu))
    if c.sigma2_hat is None:
        sigma2_hat = sigma2_hat_bound(p, c.sigma2, c.zeta2, c.sigma2_tilde, c.delta2)
    else:
        sigma2_hat = np.asarray(c.sigma2_hat, dtype=np.float64) + np.zeros_like(p)  # broadcast with p
    L_p = L_p_bound(p, c.L_max, c.L_avg)
    heterogeneity = tau * (1.0 - p) * np.sqrt(zeta2)  # τ (1-p) ζ = τ ζ̂_p
    local_noise = np.sqrt(tau * sigma2_hat)  # √τ σ̂_p
    if convexity == "strongly-convex":
        drift_scale = np.sqrt(L_p) / (mu * np.sqrt(eps))
        return RateTerms(
            noise=sigma2_hat / (mu * N * eps),
            drift_zeta=drift_scale * heterogeneity,
            drift_sigma=drift_scale * local_noise,
            deterministic=L_p * tau / mu * log_term(eps),
        )
    drift_scale = L_p / eps**1.5
    return RateTerms(
        noise=L_p * sigma2_hat / (N * eps**2),
        drift_zeta=drift_scale * heterogeneity,
        drift_sigma=drift_scale * local_noise,
        deterministic=L_p * tau / eps,
    )


def speedup(p: ArrayLike, eps: ArrayLike, constants: Constants, convexity: Convexity = "strongly-convex") -> np.ndarray:
    """T(0) / T(p): how many times fewer iterations shuffling a fraction p needs."""
    p = _validate.fraction("p", p)
    T0 = iteration_bound(np.zeros_like(p), eps, constants, convexity).total
    return T0 / iteration_bound(p, eps, constants, convexity).total


def is_superlinear(
    p: ArrayLike, eps: ArrayLike, constants: Constants, convexity: Convexity = "strongly-convex"
) -> np.ndarray:
    """Whether the saving is super-linear in p: T(p)/T(0) < 1 - p (Sec. 2.2, below Corollary I)."""
    p = _validate.fraction("p", p)
    return 1.0 / speedup(p, eps, constants, convexity) < 1.0 - p


def min_p_for_speedup(
    target: float,
    eps: float,
    constants: Constants,
    convexity: Convexity = "strongly-convex",
    grid_size: int = 2001,
) -> float | None:
    """Smallest p in [0, 1] with T(0)/T(p) >= ``target``; None when no p reaches it.

    T(p) need not be monotone (the noise term p(1-p)ζ² grows for small p), so the first crossing is bracketed
    on a grid of ``grid_size`` points and refined with Brent's method (scipy.optimize.brentq). A crossing
    narrower than the grid spacing can be missed. Constants must be scalars here.
    """
    from scipy import optimize  # imported here: scipy.optimize adds ~0.3 s to every import of theory

    target = float(_validate.positive("target", target))
    if any(np.ndim(v) for v in vars(constants).values() if v is not None) or np.ndim(eps):
        raise InputError("min_p_for_speedup needs scalar constants and a scalar eps")
    if int(grid_size) < 2:
        raise InputError(f"grid_size must be >= 2, got {grid_size}")
    if target <= 1.0:
        return 0.0
    grid = np.linspace(0.0, 1.0, grid_size)
    gap = speedup(grid, eps, constants, convexity) - target
    reached = np.flatnonzero(gap >= 0)
    if reached.size == 0:
        return None
    i = reached[0]
    return float(
        optimize.brentq(
            lambda q: float(speedup(q, eps, constants, convexity)) - target, grid[i - 1], grid[i], xtol=1e-12
        )
    )
