"""Fedssyn Fig. 2(a): with ζ² and the step size fixed, shuffling lowers the reached error less when the stochastic
noise σ² is high.

A run's *reached error* is its mean error over the last tenth of panel (a)'s rounds (:func:`reached`); shuffling's
*gain* at p is 1 − reached(p)/reached(0), per seed (a seed's problems at p and at 0 are the same draws, shuffled by
p; :func:`gains`). The claim, by the one rule (:func:`theory.verdict.direction`) for each p > 0 and each pair of
adjacent noise levels, is that the gain at the lower σ² is larger than at the higher; the parts combine by
:func:`theory.verdict.combine`.
"""

from __future__ import annotations

import numpy as np

from theory.verdict import combine, direction, mean_sd

TAIL = 0.1  # the share of the last rounds whose mean error is the error a run reached


def reached(errors: np.ndarray, tail: float = TAIL) -> np.ndarray:
    """The mean over the last ``tail`` of the rounds (the last axis, at least one round) of ``errors``."""
    keep = max(1, round(tail * errors.shape[-1]))
    return errors[..., -keep:].mean(axis=-1)


def gains(by_seed: np.ndarray) -> np.ndarray:
    """Shuffling's gain 1 − reached(p)/reached(0) per σ² level, seed and p (``by_seed``: levels × seeds × P × rounds
    + 1, :func:`sims.quadratic.experiment.run_panel_a`'s, whose first p is 0)."""
    floor = reached(by_seed)
    return 1.0 - floor / floor[..., :1]


def panel_a_claim(sigma2: list[float], p: list[float], by_seed: np.ndarray) -> tuple[str, str]:
    """The verdict on Fig. 2(a)'s claim and the sentence that says it, from panel (a)'s per-seed errors."""
    if p[0] != 0:
        raise ValueError(f"panel (a) needs p = 0 first to measure a gain (p = {p})")
    gain = gains(by_seed)
    parts, against = [], []
    for j in range(1, len(p)):
        for low in range(len(sigma2) - 1):
            word = direction(gain[low, :, j], gain[low + 1, :, j])
            parts.append(word)
            if word == "contradicted":
                against.append(f"p = {p[j]:g}, σ² {sigma2[low]:g} vs {sigma2[low + 1]:g}")
    verdict = combine(parts)
    means = "; ".join(
        f"p = {p[j]:g}: " + ", ".join(f"{100 * mean_sd(gain[k, :, j])[0]:.1f} %" for k in range(len(sigma2)))
        for j in range(1, len(p))
    )
    held = sum(word == "held" for word in parts)
    text = (
        f"shuffling's gain in reached error (1 − E_p/E_0, last {TAIL:.0%} of {by_seed.shape[-1] - 1} rounds, "
        f"{by_seed.shape[1]} seeds) at σ² = {', '.join(f'{s:g}' for s in sigma2)}: {means}; lower at the higher σ² "
        f"beyond the seed spread in {held} of {len(parts)} (p, σ² pair) parts"
    )
    if against:
        text += f"; higher beyond it at {', '.join(against)}"
    return verdict, text + "."
