"""Fit R_p(ε) = A_p/√ε + B_p (Fedssyn Sec. 2.3, Fig. B.3), unconstrained, with a bootstrap uncertainty.

The authors bound each A_p by the previous p's fit, which forces A_p to be non-increasing in p; here every p is fitted
on its own by ordinary least squares over (ε, seed) points, and the bootstrap resamples those points.
"""

from __future__ import annotations

import numpy as np


def weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and intercept of y ≈ slope·x + intercept with weights w (last axis), vectorised."""
    with np.errstate(invalid="ignore", divide="ignore"):  # no weight (nothing reached): NaN, reported upstream
        sw = w.sum(axis=-1)
        mx = (w * x).sum(axis=-1) / sw
        my = (w * y).sum(axis=-1) / sw
        sxx = (w * (x - mx[..., None]) ** 2).sum(axis=-1)
        sxy = (w * (x - mx[..., None]) * (y - my[..., None])).sum(axis=-1)
        slope = sxy / sxx
        return slope, my - slope * mx


def fit_rounds(
    rounds: np.ndarray, eps: np.ndarray, rng: np.random.Generator, n_boot: int = 500
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit A, B of R = A/√ε + B for each leading index of ``rounds`` (..., S seeds, K eps values).

    Points where ε was never reached (inf) are left out. Returns (A, B, A_boot) with A_boot of shape (..., n_boot):
    the fit on bootstrap resamples of the S·K (seed, ε) points.
    """
    x = np.broadcast_to(1.0 / np.sqrt(np.asarray(eps, dtype=np.float64)), rounds.shape)
    *lead, S, K = rounds.shape
    x = x.reshape(*lead, S * K)
    y = rounds.reshape(*lead, S * K)
    ok = np.isfinite(y)
    y0 = np.where(ok, y, 0.0)
    A, B = weighted_line(x, y0, ok.astype(np.float64))
    counts = rng.multinomial(S * K, np.full(S * K, 1.0 / (S * K)), size=n_boot).astype(np.float64)  # (n_boot, SK)
    A_boot, _ = weighted_line(x[..., None, :], y0[..., None, :], counts * ok[..., None, :])
    enough = ok.sum(axis=-1) >= 2
    A = np.where(enough, A, np.nan)
    B = np.where(enough, B, np.nan)
    A_boot = np.where(enough[..., None], A_boot, np.nan)
    return A, B, A_boot


def exponent(ratio: np.ndarray, p: np.ndarray) -> np.ndarray:
    """κ with ratio = (1-p)^κ, i.e. ln(ratio)/ln(1-p); NaN at p = 0 and p = 1 where it is undefined."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = np.log(ratio) / np.log1p(-p)
    return np.where((p > 0) & (p < 1), kappa, np.nan)


def fit_exponent(ratio: np.ndarray, p: np.ndarray) -> float:
    """One κ for all 0 < p < 1 with a finite positive ratio: least squares of ln ratio = κ ln(1-p), no intercept."""
    p = np.asarray(p, dtype=np.float64)
    ok = (p > 0) & (p < 1) & np.isfinite(ratio) & (ratio > 0)
    if not ok.any():
        return float("nan")
    u, v = np.log1p(-p[ok]), np.log(ratio[ok])
    return float(np.sum(u * v) / np.sum(u * u))
