"""The verdict vocabulary: one rule from the numbers, and every row of REPORT's claims table uses only its words."""

from pathlib import Path

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from figures import verdict as v
from figures.claims import CATALOGUE_HEADERS, catalogue_rows
from figures.report import CLAIMS_BEGIN, CLAIMS_END, between

REPORT = Path(__file__).resolve().parents[2] / "results" / "REPORT.md"
seeds = st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=5)


def test_direction_by_the_seed_spread():
    assert v.direction([0.9, 0.91], [0.8, 0.81]) == v.HELD
    assert v.direction([0.8, 0.81], [0.9, 0.91]) == v.CONTRADICTED
    assert v.direction([0.8, 0.9], [0.82, 0.88]) == v.NOT_RESOLVED  # gain 0 within sqrt(2)·0.07
    assert v.direction([0.9], [0.8]) == v.NOT_RESOLVED  # one seed: no spread to judge by
    assert v.direction([None, None], [0.8, 0.8]) == v.NOT_MEASURED


@given(seeds, seeds)
def test_direction_is_antisymmetric(a, b):
    flipped = {v.HELD: v.CONTRADICTED, v.CONTRADICTED: v.HELD, v.NOT_RESOLVED: v.NOT_RESOLVED}
    assert v.direction(b, a) == flipped[v.direction(a, b)]


@given(seeds, seeds, st.floats(0.01, 100))
def test_direction_does_not_depend_on_units(a, b, scale):
    """Rescaling both arms (points instead of fractions, say) leaves the verdict as it is, except at a tie."""
    spread = np.hypot(np.std(a, ddof=1), np.std(b, ddof=1))
    assume(abs(abs(np.mean(a) - np.mean(b)) - spread) > 1e-6 * (1 + spread))  # not at the boundary
    assert v.direction([scale * x for x in a], [scale * x for x in b]) == v.direction(a, b)


@given(seeds)
def test_a_shift_beyond_the_spread_holds(a):
    spread = np.std(a, ddof=1) * np.sqrt(2)
    assert v.direction([x + spread + 1.0 for x in a], a) == v.HELD
    assert v.direction(a, [x + spread + 1.0 for x in a]) == v.CONTRADICTED


def test_bound_and_combine():
    assert v.bound([-0.1, 0.0]) == v.HELD and v.bound([0.02, -0.1]) == v.CONTRADICTED
    assert v.bound([0.02], allowance=0.05) == v.HELD and v.bound([np.nan]) == v.NOT_MEASURED
    assert v.combine([v.HELD, v.HELD]) == v.HELD
    assert v.combine([v.HELD, v.NOT_RESOLVED]) == v.NOT_RESOLVED
    assert v.combine([v.HELD, v.NOT_RESOLVED, v.CONTRADICTED]) == v.CONTRADICTED
    assert v.combine([]) == v.NOT_MEASURED and v.combine([v.NOT_MEASURED, v.HELD]) == v.NOT_RESOLVED


def test_size_and_censoring_marks():
    assert v.size_word(2.0, 0.5, (4.3, 14.8)) == v.SMALLER
    assert v.size_word(5.0, 1.0, (4.3, 14.8)) == v.AS_PAPER
    assert v.size_word(12.17, 3.08, 13.02) == v.AS_PAPER and v.size_word(20.0, 1.0, 13.02) == v.LARGER
    assert v.censored_mark(True, False) == "≥ " and v.censored_mark(False, True) == "≤ "
    assert v.censored_mark(False, False) == "" and v.censored_mark(True, True) == "? "


def test_every_row_of_the_claims_table_uses_the_vocabulary():
    section = between(REPORT.read_text(), CLAIMS_BEGIN, CLAIMS_END)
    assert section is not None
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| paper, where ")]
    parts = [line for line in rows if " | ↳ " in line]  # the parts of a combined row, shown where it rebuilt
    assert len(rows) - len(parts) == len(catalogue_rows({}))  # one per (catalogue claim, row measuring it)
    column = CATALOGUE_HEADERS.index("verdict")
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert cells[column] in v.WORDS, line
    for word, _ in v.DEFINITIONS:
        assert f"**{word}**" in section
