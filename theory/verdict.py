"""One verdict vocabulary for every claim the report judges, and the one rule that gives it from the numbers (the
floor every room stands on: a simulator's summary line and REPORT judge with the same words).

A claim has a *direction* (the paper says a is larger than b, or that a measured quantity stays within a bound, or
that a measurement follows a predicted curve) and, often, a *size* (the paper's number). The two are judged apart:

- :data:`HELD`: the paper's direction, beyond the seed spread (or: within the bound at every point measured);
- :data:`NOT_RESOLVED`: within the seed spread (or one seed only: no spread to judge by); not resolved is not
  "no effect";
- :data:`CONTRADICTED`: the opposite direction beyond the seed spread, or a bound exceeded beyond its allowance;
- :data:`NOT_MEASURED`: no number to judge by.

"Beyond the seed spread" means the difference of the means exceeds sqrt(sd_a² + sd_b²) over the seeds. A claim of
several parts is held when every part held, contradicted when any part is, and not resolved otherwise
(:func:`combine`).

The size is a second word (:data:`SIZES`): ours smaller than, as, or larger than the paper's number, judged by
whether the paper's number (or range) lies below, inside or above ours ± its seed spread (:func:`size_word`).

A number that is a bound (a run that never reached its target counts as its last round + 1, a lower bound on its
rounds) is shown with ≥ or ≤ (:func:`censored_mark`), and a mean that includes one is a bound too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

HELD, NOT_RESOLVED, CONTRADICTED, NOT_MEASURED = "held", "not resolved", "contradicted", "not measured"
WORDS = (HELD, NOT_RESOLVED, CONTRADICTED, NOT_MEASURED)
SMALLER, AS_PAPER, LARGER = "smaller than the paper's", "as the paper's", "larger than the paper's"
NOT_COMPARABLE = "not comparable"
SIZES = (SMALLER, AS_PAPER, LARGER, NOT_COMPARABLE)
DEFINITIONS = (
    (HELD, "the paper's direction, beyond the seed spread (a bound: never exceeded beyond its allowance)"),
    (NOT_RESOLVED, 'within the seed spread, or a single seed: the effect is not resolved, which is not "no effect"'),
    (CONTRADICTED, "the opposite direction beyond the seed spread, or a bound exceeded beyond its allowance"),
    (NOT_MEASURED, "no run in the ledger measures it (the row says why and what would)"),
)
SIZE_DEFINITIONS = (
    (SMALLER, "the paper's number lies above our mean + sd"),
    (AS_PAPER, "the paper's number (or range) meets our mean ± sd"),
    (LARGER, "the paper's number lies below our mean − sd"),
    (
        NOT_COMPARABLE,
        "our protocol differs from the paper's in what sets the number's scale (fewer rounds, a "
        "narrower model): the size is not judged, and the row says why",
    ),
)


def sample_mean_sd(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value) of the values that are not None; NaN when none are."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return float("nan"), float("nan")
    return float(np.mean(kept)), float(np.std(kept, ddof=1)) if len(kept) > 1 else 0.0


def mean_sd(values: Iterable[float | None]) -> tuple[float, float, int]:
    """:func:`sample_mean_sd` of the finite values, and their count."""
    kept = [v for v in values if v is not None and np.isfinite(v)]
    return (*sample_mean_sd(kept), len(kept))


def direction(a: Sequence[float | None], b: Sequence[float | None]) -> str:
    """The verdict on "a is larger than b" from per-seed values: held / contradicted when the difference of the
    means is beyond sqrt(sd_a² + sd_b²) in the paper's / the opposite direction, not resolved within it or with
    fewer than two seeds on a side, not measured with no value on a side."""
    (ma, sa, na), (mb, sb, nb) = mean_sd(a), mean_sd(b)
    if na == 0 or nb == 0:
        return NOT_MEASURED
    if na < 2 or nb < 2:
        return NOT_RESOLVED
    difference, spread = ma - mb, float(np.hypot(sa, sb))
    if difference > spread:
        return HELD
    if difference < -spread:
        return CONTRADICTED
    return NOT_RESOLVED


def alike(a: Sequence[float | None], b: Sequence[float | None]) -> str:
    """The one rule for a claim of *no* difference ("nearly the same", "does not change"): :data:`CONTRADICTED` where
    the means differ beyond the seed spread in either direction (the difference the claim says is absent),
    :data:`NOT_RESOLVED` within it or with fewer than two seeds on a side (a spread rule cannot prove an absence, so
    such a claim is never held), :data:`NOT_MEASURED` with no value on a side."""
    word = direction(a, b)
    return CONTRADICTED if word == HELD else word


NO_DIFFERENCE = (
    'A claim of no difference ("nearly the same", "does not change") is contradicted by a difference beyond the seed '
    "spread in either direction and otherwise not resolved: the rule cannot prove an absence, so it is never held."
)
PARTS = (
    "A claim measured in parts (partitions, settings, algorithms, values of p) is held when every part held, "
    "contradicted when any part is, not measured when no part was measured, and not resolved otherwise. Where the "
    "paper states the parts apart (HFMDs' partitions, FedCOG's settings), each follows its row as a ↳ row with its "
    "own verdict and size; a part on another data set or model than the paper's names it there."
)


def at_or_below(
    low: Sequence[float] | np.ndarray, ceiling: Sequence[float] | np.ndarray, allowance: float = 1e-9
) -> str:
    """The one rule for a measurement against an upper bound (Lemma 1's ζ̂²-ratio, Corollary I's round ratio, in
    every artefact that judges them): :data:`HELD` when the lower end of each measurement (``low``: its 95 %
    interval's lower end, or mean − sd over seeds) lies at or below its ``ceiling`` (the bound, any finite-sample
    allowance included) up to the relative ``allowance`` (float rounding), :data:`CONTRADICTED` where one lies
    above, :data:`NOT_MEASURED` without a finite one. One-sided: a measurement far below its bound holds it."""
    low, ceiling = np.asarray(low, dtype=float), np.asarray(ceiling, dtype=float)
    return bound(low / ceiling - 1, allowance)


def bound(excess: Iterable[float], allowance: float = 0.0) -> str:
    """The verdict on "a measured quantity stays within its bound": ``excess`` = measured / bound − 1 at each point
    (relative excess), ``allowance`` the relative excess tolerated (float rounding)."""
    values = [float(e) for e in excess if np.isfinite(e)]
    if not values:
        return NOT_MEASURED
    return HELD if max(values) <= allowance else CONTRADICTED


def within_intervals(low: Sequence[float], high: Sequence[float], curve: Sequence[float]) -> str:
    """The one rule for "a measured curve matches a predicted one", with each point's 95 % interval [low, high]:
    :data:`HELD` where the predicted ``curve`` lies outside the interval at no more than one point in twenty (what
    95 % intervals allow by chance), :data:`CONTRADICTED` where it lies outside at more, :data:`NOT_MEASURED` with no
    finite interval."""
    low, high, curve = (np.asarray(v, dtype=float) for v in (low, high, curve))
    ok = np.isfinite(low) & np.isfinite(high) & np.isfinite(curve)
    if not ok.any():
        return NOT_MEASURED
    outside = (curve[ok] < low[ok]) | (curve[ok] > high[ok])
    return HELD if outside.sum() <= 0.05 * ok.sum() else CONTRADICTED


def combine(verdicts: Iterable[str]) -> str:
    """A claim of several parts: held when every part held, contradicted when any part is, not measured when no
    part was measured, not resolved otherwise."""
    parts = list(verdicts)
    for word in parts:
        check(word)
    if not parts or all(p == NOT_MEASURED for p in parts):
        return NOT_MEASURED
    if CONTRADICTED in parts:
        return CONTRADICTED
    if all(p == HELD for p in parts):
        return HELD
    return NOT_RESOLVED


def check(word: str) -> str:
    if word not in WORDS:
        raise ValueError(f"verdict {word!r} is not one of {', '.join(WORDS)}")
    return word


def size_word(mean: float, sd: float, paper: float | tuple[float, float]) -> str:
    """Ours against the paper's number (or range (low, high)): smaller, as, or larger than the paper's."""
    low, high = (paper, paper) if isinstance(paper, int | float) else paper
    if mean + sd < low:
        return SMALLER
    if mean - sd > high:
        return LARGER
    return AS_PAPER


def not_comparable(why: str) -> str:
    """The size word where our protocol caps or rescales the number against the paper's (say ``why``)."""
    return f"{NOT_COMPARABLE} ({why})"


def bounded_size(mean: float, sd: float, paper: float | tuple[float, float], mark: str = "") -> str:
    """:func:`size_word` of a number that may be a bound (``mark``: :func:`censored_mark`'s "≥ ", "≤ ", "? " or ""):
    a lower bound whose mean + sd lies below the paper's could still reach it, an upper bound above it could still
    fall to it, a bound both ways could be anything: then no size word, but :data:`NOT_RESOLVED` with what the bound
    is. Never a size word taken from a bound that does not decide it."""
    word = size_word(mean, sd, paper)
    if mark == "? " or (mark == "≥ " and word != LARGER) or (mark == "≤ " and word != SMALLER):
        kind = {"≥ ": "a lower bound", "≤ ": "an upper bound"}.get(mark, "a bound both ways")
        return f"{NOT_RESOLVED} ({kind})"
    return word


def censored_mark(lower: bool, upper: bool) -> str:
    """The mark of a number that is a bound: "≥ " (a lower bound), "≤ " (an upper bound), "" (exact), "? " (bounds
    both ways: neither is known)."""
    return "? " if lower and upper else "≥ " if lower else "≤ " if upper else ""
