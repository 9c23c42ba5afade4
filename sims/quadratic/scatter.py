"""How far one realised shuffle of the Fig. 2 problem scatters around its expectation: the tolerance Lemma 1's
bounds on ζ̂²_p and L_p (bounds on the mixture, in expectation) need before one realised shuffle can be judged
against them.

The simulator measures, at each p, one realised shuffle per seed and reports the mean over seeds: ζ*²_p (the
dissimilarity at the optimum x*, which a shuffle does not move) over ζ*²_0, and L_p = max_i h̄_i. :func:`lemma1_scatter`
replays the simulator's problems from the config in its summary (the same draws: :func:`replayed` gives back the
summary's own numbers, which the caller checks) and repeats the same statistic over many further realised shuffles
of the same problems (:func:`theory.shuffle.realised_statistics`): its standard deviation is the scatter of one
realisation, its mean the realised shuffle's expectation. Deterministic: the Monte Carlo's generator is derived
from the config's seed.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from sims.quadratic.experiment import Config, seed_rngs, shuffled_problems
from sims.quadratic.problem import Problem, diagnostics
from theory.errors import InputError
from theory.shuffle import largest_client_smoothness, realised_statistics, zeta2_of

SHUFFLES = 200  # realised shuffles per (seed, p): the scatter's sd is known to about 1/sqrt(2·200) = 5 %


def config_from(summary_config: dict) -> Config:
    """The :class:`Config` a summary's ``config`` records (lists back to tuples; unknown keys refused)."""
    names = {f.name for f in fields(Config)}
    unknown = sorted(set(summary_config) - names)
    if unknown:
        raise InputError(f"the summary's config has keys sims.quadratic does not know: {', '.join(unknown)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in summary_config.items()}
    return Config(**values)


def replayed(config: Config) -> tuple[np.ndarray, np.ndarray, Problem]:
    """The simulator's own panel (b) problems (seeds, P, ...) and, per p, the ζ*² ratio and L_p it measured on them
    (means over seeds), recomputed: the caller compares these with the summary's to know the replay is exact."""
    problems = shuffled_problems(config, config.p_grid, 0.0, stage="b")
    seeds, count = problems.h.shape[:2]
    diag = [[diagnostics(Problem(problems.h[s, j], problems.c[s, j])) for j in range(count)] for s in range(seeds)]
    zeta2 = np.array([[d.zeta2_star for d in row] for row in diag]).mean(axis=0)
    l_p = np.array([[d.L_p for d in row] for row in diag]).mean(axis=0)
    return zeta2 / zeta2[0], l_p, problems


def lemma1_scatter(config: Config, shuffles: int = SHUFFLES) -> dict[str, np.ndarray]:
    """Per p of ``config.p_grid``: the mean and the standard deviation, over ``shuffles`` further realised shuffles
    of each seed's problem, of the statistics the simulator reports (ζ*²_p/ζ*²_0 and L_p, each a mean over seeds),
    beside the replayed measurement (``zeta_ratio``, ``L_p``)."""
    zeta_ratio, l_p, problems = replayed(config)
    rng = seed_rngs(config, "lemma1", 1)[0]
    base = Problem(problems.h[:, 0], problems.c[:, 0])  # p = 0 (its first entry): no sample moves
    seeds = base.h.shape[0]
    zeta_draws = np.empty((len(config.p_grid), seeds, shuffles))
    l_draws = np.empty_like(zeta_draws)
    for s in range(seeds):
        one = Problem(base.h[s], base.c[s])
        gradients = one.gradients(one.x_star())  # (N, n, d); the optimum is the same for every shuffle
        hessians = one.h[..., None, None]  # (N, n, 1, 1): every sample's Hessian is h_ij·I
        for j, p in enumerate(config.p_grid):
            zeta_draws[j, s] = realised_statistics(gradients, float(p), zeta2_of, rng, shuffles)
            l_draws[j, s] = realised_statistics(hessians, float(p), largest_client_smoothness, rng, shuffles)
    zeta0 = np.mean([zeta2_of(Problem(base.h[s], base.c[s]).gradients(Problem(base.h[s], base.c[s]).x_star()))
                     for s in range(seeds)])  # fmt: skip
    zeta_stat = zeta_draws.mean(axis=1) / zeta0  # (P, shuffles): the seed-mean ratio of each Monte Carlo draw
    l_stat = l_draws.mean(axis=1)
    return {
        "p": np.asarray(config.p_grid, dtype=float),
        "zeta_ratio": zeta_ratio,
        "L_p": l_p,
        "zeta_ratio_mean": zeta_stat.mean(axis=1),
        "zeta_ratio_sd": zeta_stat.std(axis=1, ddof=1),
        "L_p_mean": l_stat.mean(axis=1),
        "L_p_sd": l_stat.std(axis=1, ddof=1),
        "shuffles": np.array(shuffles),
    }
