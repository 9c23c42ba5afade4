"""The scatter of one realised shuffle (theory.shuffle.realised_statistics and its statistics), the rule for a claim
of no difference (theory.verdict.alike), and the least-squares problems replayed for Lemma 1's judgement
(sims.quadratic.scatter): each against an independent few-line computation."""

from __future__ import annotations

import numpy as np
import pytest

import theory
from theory import verdict
from theory.shuffle import (
    expected_realised_zeta2,
    largest_client_smoothness,
    realised_statistics,
    shuffle_samples,
    zeta2_of,
)


def test_the_batched_statistics_are_the_plain_estimators():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(4, 3, 6, 2))  # a batch of 4 problems: 3 clients, 6 samples, d = 2
    assert np.allclose(zeta2_of(G), [theory.zeta2(g) for g in G])
    A = rng.normal(size=(4, 3, 6, 2, 2))
    H = A @ np.swapaxes(A, -1, -2)  # symmetric per-sample Hessians
    assert np.allclose(largest_client_smoothness(H), [theory.smoothness(h).L_max for h in H])
    h = rng.uniform(1, 4, size=(3, 6))[..., None, None]
    assert largest_client_smoothness(h) == pytest.approx(h[..., 0, 0].mean(axis=1).max())


def test_each_draw_is_one_realised_shuffle_drawn_in_chunks():
    rng = np.random.default_rng(1)
    G = rng.normal(size=(5, 8, 3))
    drawn = realised_statistics(G, 0.25, zeta2_of, np.random.default_rng(7), shuffles=10, chunk=4)
    again = np.random.default_rng(7)
    by_hand = np.concatenate([zeta2_of(shuffle_samples(G, 0.25, again, shuffles=s)) for s in (4, 4, 2)])
    assert drawn.shape == (10,) and np.allclose(drawn, by_hand)
    assert np.allclose(realised_statistics(G, 0.0, zeta2_of, rng, shuffles=3), theory.zeta2(G))  # p = 0 moves none


def test_the_draws_scatter_around_the_exact_expectation():
    """Seed 3, 4,000 shuffles: the Monte Carlo mean within 5 standard errors of the closed form, and a scatter that
    is not zero at 0 < p < 1 (would fail if the draws were one shuffle repeated)."""
    rng = np.random.default_rng(3)
    G = rng.normal(size=(6, 20, 4)) + rng.normal(size=(6, 1, 4))
    draws = realised_statistics(G, 0.3, zeta2_of, rng, shuffles=4000)
    error = draws.std(ddof=1) / np.sqrt(draws.size)
    assert abs(draws.mean() - expected_realised_zeta2(G, 0.3)) < 5 * error and draws.std() > 0


def test_alike_is_contradicted_by_a_difference_and_never_held():
    assert verdict.alike([1.0, 1.1], [2.0, 2.1]) == verdict.CONTRADICTED  # apart, either way
    assert verdict.alike([2.0, 2.1], [1.0, 1.1]) == verdict.CONTRADICTED
    assert verdict.alike([1.0, 2.0], [1.2, 1.9]) == verdict.NOT_RESOLVED  # within the spread: not "no effect"
    assert verdict.alike([1.0], [1.0]) == verdict.NOT_RESOLVED  # one seed
    assert verdict.alike([], [1.0, 2.0]) == verdict.NOT_MEASURED
    assert verdict.combine([verdict.alike([1.0, 1.1], [1.0, 1.1]), verdict.HELD]) != verdict.HELD


def test_the_replayed_problems_are_the_simulators_and_the_scatter_is_repeatable():
    from sims.quadratic.experiment import PRESETS, quick, run_panels_bcd
    from sims.quadratic.problem import Problem, diagnostics
    from sims.quadratic.scatter import config_from, lemma1_scatter, replayed

    config = quick(PRESETS["default"])
    from sims.quadratic.experiment import config_dict

    assert config_from(config_dict(config)) == config
    ratio, l_p, problems = replayed(config)
    by_hand = [[diagnostics(Problem(problems.h[s, j], problems.c[s, j])) for j in range(len(config.p_grid))]
               for s in range(config.seeds)]  # fmt: skip
    zeta = np.mean([[d.zeta2_star for d in row] for row in by_hand], axis=0)
    assert np.allclose(ratio, zeta / zeta[0]) and np.allclose(l_p, np.mean([[d.L_p for d in r] for r in by_hand], 0))
    panels = run_panels_bcd(config)  # the simulator's own measurement of the same problems
    assert np.allclose(ratio, panels["zeta2_star_ratio"]) and np.allclose(l_p, panels["L_p"])
    first, second = lemma1_scatter(config, shuffles=20), lemma1_scatter(config, shuffles=20)
    assert all(np.array_equal(first[k], second[k]) for k in first)  # deterministic: the config's seed
    assert first["zeta_ratio_sd"][0] == 0 and first["L_p_sd"][0] == 0  # p = 0: nothing moves
    assert (first["zeta_ratio_sd"][1:-1] > 0).all()
