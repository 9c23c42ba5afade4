"""Fit R_p(ε) = A_p/√ε + B_p (Fedssyn Sec. 2.3, Fig. B.3), unconstrained, with a bootstrap uncertainty.

The authors bound each A_p by the previous p's fit, which forces A_p to be non-increasing in p; here every p is fitted
on its own by ordinary least squares over (ε, seed) points, and the bootstrap resamples those points.
"""

from __future__ import annotations

import numpy as np

from theory.verdict import HELD, NOT_MEASURED, at_or_below, within_intervals


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


MATCH_P_MAX = 0.6  # the paper says the fitted ratio matches the theory ratio for p <= 0.6 (Fig. 2c)


def fit_errors(p: np.ndarray, a_ratio: np.ndarray, theory_ratio: np.ndarray) -> tuple[float, float] | None:
    """Log-space RMS error of the fitted A_p/A_0 against the theory ratio and against (1-p)², over
    0 < p <= 0.6 with a finite positive fit (None when there is no such p)."""
    ok = (p > 0) & (p <= MATCH_P_MAX) & np.isfinite(a_ratio) & (a_ratio > 0)
    if not ok.any():
        return None
    log_ratio = np.log(a_ratio[ok])
    rms_theory = float(np.sqrt(np.mean((log_ratio - np.log(theory_ratio[ok])) ** 2)))
    rms_square = float(np.sqrt(np.mean((log_ratio - 2 * np.log1p(-p[ok])) ** 2)))
    return rms_theory, rms_square


def corollary_claims(
    p: np.ndarray,
    a_ratio: np.ndarray,
    theory: np.ndarray,
    ci: tuple[np.ndarray, np.ndarray] | None,
    zeta_star: np.ndarray | None = None,
) -> dict[str, tuple[str, str]]:
    """Fig. 2c's two claims judged by :mod:`theory.verdict`'s rules, as (verdict, sentence) by name; the
    simulator's summary line and REPORT print these same words.

    - ``bound``: Corollary I bounds the rounds, so for 0 < p <= 0.6 the fitted A_p/A_0 stays at or below its ratio
      (1-p)·sqrt(1-p+p·L_avg/L_max): exceeded where even the lower end of the bootstrap 95 % interval lies above it
      (:func:`theory.verdict.at_or_below`);
    - ``shape``: the paper's "the estimated ratio matches the theoretical ratio" for p <= 0.6: the corollary's ratio
      inside the fit's 95 % intervals (:func:`theory.verdict.within_intervals`); the sentence says whether the fit
      follows the corollary's ratio or (1-p)² (log-space RMS distances);
    - ``zeta_star`` (with ``zeta_star``, the corollary's ratio with ζ*, the dissimilarity at the optimum, in place of
      ζ: sqrt(ζ*²_p/ζ*²_0 · L_p/L_max)): the revised paper's "the observed speed-up matches the theory only with ζ*",
      by the same rule as ``shape``."""
    errors = fit_errors(p, a_ratio, theory)
    if errors is None:
        why = "no p in (0, 0.6] has a finite fitted ratio: the claim cannot be checked here"
        return {"bound": (NOT_MEASURED, why), "shape": (NOT_MEASURED, why), "zeta_star": (NOT_MEASURED, why)}
    rms_theory, rms_square = errors
    keep = (p > 0) & (p <= MATCH_P_MAX) & np.isfinite(a_ratio)
    low = a_ratio if ci is None else np.asarray(ci[0], dtype=float)
    bound = at_or_below(low[keep], theory[keep])
    outside = (p > MATCH_P_MAX) & np.isfinite(low) & (low > theory * (1 + 1e-9))
    beyond = (
        f"; beyond that range (not claimed) it lies above it, past its 95 % interval, at p = "
        f"{', '.join(f'{q:g}' for q in p[outside])}"
        if outside.any()
        else ""
    )
    follows = "(1-p)²" if rms_square < rms_theory else "Corollary I's ratio"
    distances = f"log-RMS distance {rms_theory:.3f} to Corollary I's ratio, {rms_square:.3f} to (1-p)²"
    if ci is None:
        shape, misses = NOT_MEASURED, "no 95 % intervals (one seed)"
    else:
        high = np.asarray(ci[1], dtype=float)
        shape = within_intervals(low[keep], high[keep], theory[keep])
        out = int(((theory[keep] < low[keep]) | (theory[keep] > high[keep])).sum())
        misses = f"the corollary's ratio outside the fit's 95 % interval at {out} of {int(keep.sum())} values of p"
    claims = {
        "bound": (
            bound,
            f"Corollary I's bound on the rounds (A_p/A_0 <= its ratio for p <= {MATCH_P_MAX:g}): {bound}: for "
            f"0 < p <= {MATCH_P_MAX:g} the fitted ratio lies {'at or below' if bound == HELD else 'above'} it{beyond}",
        ),
        "shape": (
            shape,
            f"Fig. 2c's match of the fitted A_p/A_0 with Corollary I's ratio for p <= {MATCH_P_MAX:g}: {shape}: "
            f"{misses}; the fit follows {follows} ({distances})",
        ),
    }
    if zeta_star is not None:
        claims["zeta_star"] = zeta_star_claim(p, a_ratio, np.asarray(zeta_star, dtype=float), ci, rms_square)
    return claims


def zeta_star_claim(
    p: np.ndarray, a_ratio: np.ndarray, zeta_star: np.ndarray, ci: tuple[np.ndarray, np.ndarray] | None, rms_square
) -> tuple[str, str]:
    """The revised paper's Fig. 2(b): the fitted A_p/A_0 matches the corollary's ratio with ζ* in place of ζ for
    0 < p <= 0.6 (:func:`theory.verdict.within_intervals`, as the ``shape`` claim)."""
    keep = (p > 0) & (p <= MATCH_P_MAX) & np.isfinite(a_ratio) & np.isfinite(zeta_star)
    rms = float(np.sqrt(np.mean((np.log(a_ratio[keep]) - np.log(zeta_star[keep])) ** 2))) if keep.any() else np.nan
    head = f"The revised Fig. 2(b)'s match of the fitted A_p/A_0 with the ratio at ζ* for p <= {MATCH_P_MAX:g}"
    if ci is None or not keep.any():
        return NOT_MEASURED, f"{head}: {NOT_MEASURED}: no 95 % intervals (one seed)"
    low, high = (np.asarray(c, dtype=float)[keep] for c in ci)
    word = within_intervals(low, high, zeta_star[keep])
    out = int(((zeta_star[keep] < low) | (zeta_star[keep] > high)).sum())
    above = int((zeta_star[keep] > high).sum())
    return word, (
        f"{head}: {word}: the ratio at ζ*, sqrt(ζ*²_p/ζ*²_0 · L_p/L_max), outside the fit's 95 % interval at {out} "
        f"of {int(keep.sum())} values of p ({above} above it); log-RMS distance {rms:.3f} to it, {rms_square:.3f} to "
        f"(1-p)²"
    )
