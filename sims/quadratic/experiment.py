"""The three panels of Fedssyn Fig. 2 (plus the measured ζ*² ratio) as pure functions of a Config and a seed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from sims.quadratic import fedavg, fit
from sims.quadratic.problem import MEAN_SCALES, Problem, diagnostics, make_problem, shuffle_problem
from theory import lemma1
from theory.errors import InputError
from theory.shuffle import n_exchanged

LOCAL_SOLVERS = ("full-batch", "epoch")

# The authors' saved diagnostics (notes/fedssyn_code.md): p -> (ζ*², σ² at x*, L_max).
AUTHORS_DIAGNOSTICS = {0.0: (9.8, 0.0, 100.0), 0.4: (3.5, 6.3, 75.9), 1.0: (0.07, 9.7, 43.2)}


@dataclass(frozen=True)
class Config:
    """Parameters of the least-squares reproduction (Fedssyn Sec. 2.3, Fig. 2, Fig. B.3).

    n_clients, n_per_client, dim: N, n_i, d of the problem (paper: 10, 100, 25).
    zeta2, mean_scale: dissimilarity scale ζ² and its convention (see sims.quadratic.problem).
    local: "full-batch" (τ full-batch gradient steps; the round map is affine, solved in closed form) or "epoch"
        (the authors' one epoch of single-sample SGD in random order, τ = n_i).
    tau: τ, local steps per round for "full-batch" and "minibatch" (ignored by "epoch").
    seeds, seed: number of problem draws/shuffles averaged, and the base seed that makes every curve repeatable.
    sigma2_levels, p_a, eta_a, rounds_a, batch_size: panel (a): noise levels σ², shuffled fractions, the fixed step
        size, rounds, and the mini-batch size used when σ² > 0 (σ² = 0 uses full batches unless local = "epoch").
    p_grid, etas, rounds, eps_target, eps_grid: panels (b)-(d): fractions p, step-size grid tuned per p, rounds,
        the target ε of panel (b), and the ε values (>= 6) used to fit R_p = A_p/√ε + B_p.
    reach: "first" (first round with error <= ε, the authors' definition) or "stay" (from then on the error stays
        <= ε; the default, because the closed-form curves dip below ε on the way to a higher floor).
    n_boot: bootstrap resamples of the fit.
    """

    preset: str = "default"
    n_clients: int = 10
    n_per_client: int = 100
    dim: int = 25
    zeta2: float = 10.0
    mean_scale: str = "code"
    local: str = "full-batch"
    tau: int = 10
    seeds: int = 3
    seed: int = 0
    sigma2_levels: tuple[float, ...] = (0.0, 1.0, 10.0)
    p_a: tuple[float, ...] = (0.0, 0.1, 0.3, 0.6)
    eta_a: float = 2e-3
    rounds_a: int = 300
    batch_size: int = 10
    p_grid: tuple[float, ...] = tuple(np.round(np.linspace(0, 0.9, 10), 3))
    etas: tuple[float, ...] = tuple(np.logspace(-6, -1.5, 46))
    rounds: int = 20000
    eps_target: float = 1.1e-6
    eps_grid: tuple[float, ...] = tuple(np.logspace(-8.5, -5.5, 13))
    reach: str = "stay"
    n_boot: int = 500
    extra: dict = field(default_factory=dict)

    def validate(self) -> Config:
        checks = [
            ("n_clients", self.n_clients >= 1),
            ("n_per_client", self.n_per_client >= 1),
            ("dim", self.dim >= 1),
            ("tau", self.tau >= 1),
            ("seeds", self.seeds >= 1),
            ("rounds", self.rounds >= 1),
            ("rounds_a", self.rounds_a >= 1),
            ("batch_size", self.batch_size >= 1),
            ("zeta2", self.zeta2 >= 0),
            ("eta_a", self.eta_a > 0),
            ("n_boot", self.n_boot >= 1),
        ]
        for name, ok in checks:
            if not ok:
                raise InputError(f"{name} has an invalid value: {getattr(self, name)!r}")
        if self.mean_scale not in MEAN_SCALES:
            raise InputError(f"mean_scale must be one of {MEAN_SCALES}, got {self.mean_scale!r}")
        if self.reach not in fedavg.REACH_MODES:
            raise InputError(f"reach must be one of {fedavg.REACH_MODES}, got {self.reach!r}")
        if self.local not in LOCAL_SOLVERS:
            raise InputError(f"local must be one of {LOCAL_SOLVERS}, got {self.local!r}")
        for name in ("p_a", "p_grid"):
            values = np.asarray(getattr(self, name), dtype=np.float64)
            if values.size == 0 or ((values < 0) | (values > 1)).any():
                raise InputError(f"{name}: every p must lie in [0, 1], got [{', '.join(f'{v:g}' for v in values)}]")
            if 0.0 not in values:
                raise InputError(f"{name} must contain p = 0 (the reference run)")
        if min(self.sigma2_levels, default=-1) < 0:
            raise InputError(f"sigma2 levels must be >= 0, got {list(self.sigma2_levels)}")
        if min(self.etas, default=0) <= 0:
            raise InputError("step sizes must be positive")
        if self.eps_target <= 0 or min(self.eps_grid, default=0) <= 0:
            raise InputError("eps must be > 0 (both --eps and --eps-grid)")
        if len(self.eps_grid) < 2:
            raise InputError("eps_grid needs at least 2 values to fit R_p = A_p/sqrt(eps) + B_p (6 or more advised)")
        self.check_meaningful()
        # Sorted so that p = 0, the reference every ratio divides by, comes first.
        return replace(self, p_grid=tuple(sorted(set(self.p_grid))), p_a=tuple(sorted(set(self.p_a))))

    def check_meaningful(self) -> None:
        """Refuse a problem on which p can have no effect (its table would print a κ that means nothing) or whose
        numbers overflow float64 (every result NaN or inf)."""
        for name, value in (("zeta2", self.zeta2), *(("sigma2", s) for s in self.sigma2_levels)):
            if value > MAX_SCALE:
                raise InputError(
                    f"{name} = {value:g} overflows float64 in the squared errors and gradient norms (at most "
                    f"{MAX_SCALE:g}; the problem is the same at any scale relative to eps)"
                )
        if self.zeta2 == 0:
            raise InputError(
                "zeta2 = 0: every client has the same optimum (all at 0, so panels (b)-(d) start at it and shuffling "
                "has nothing to mix): p can have no effect; give zeta2 > 0"
            )
        if self.n_clients < 2:
            raise InputError(
                "one client: a shuffle exchanges samples between clients, so p can have no effect; use N >= 2"
            )
        if self.n_per_client < 2:
            raise InputError(
                "one sample per client: a shuffle then only renames the clients, so p can have no effect; use n >= 2"
            )
        idle = sorted(
            {
                float(p)
                for p in (*self.p_grid, *self.p_a)
                if p > 0 and self.n_per_client < 2**53 and n_exchanged(self.n_per_client, p) == 0
            }
        )
        if idle:
            raise InputError(
                f"p = {', '.join(f'{p:g}' for p in idle)} moves round(p*n) = 0 of n = {self.n_per_client} samples per "
                "client: those rows would repeat p = 0; use larger p or n"
            )


MAX_SCALE = 1e200  # zeta2 and sigma2 beyond this overflow float64 (squared norms of N*n*d gradients of size ~N^2 ζ²)

# ||x - x*||² cannot be resolved below this fraction of ||x*||²: a float64 iterate (and x* itself) is exact only to
# within its machine epsilon 2^-52 relative, so each coordinate of x - x* is lost below 2^-52 |x*_k| and the squared
# error below (2^-52)² ||x*||² = 2^-104 ||x*||² ≈ 4.9e-32 ||x*||².
RESOLUTION = float(np.finfo(np.float64).eps) ** 2


def start_error(config: Config) -> float:
    """E||x_0 - x*||² of panels (b)-(d) (x_0 = 0, σ² = 0), from the problem's definition (sims.quadratic.problem).

    x* = Σ_i c̄_i / Σ_i h̄_i with h̄_i = i² and c̄_i = i μ_i (σ² = 0), the same for every p (a shuffle moves samples
    between clients, not their sums). The c̄_i are independent with E||c̄_i||² = i² d ζ²/(i² d) = ζ² ("code") or
    i² d ζ²/(i d)² = ζ²/d ("paper"), so E||x*||² = N ζ² / (Σ_i i²)² (divided by d for "paper"), Σ_i i² =
    N(N+1)(2N+1)/6. It shrinks like ζ²/N⁵: more clients need a larger ζ² for the same start.
    """
    N = float(config.n_clients)
    curvature = N * (N + 1) * (2 * N + 1) / 6
    scale = 1.0 if config.mean_scale == "code" else float(config.dim)
    return N * config.zeta2 / scale / curvature**2


def check_scale(config: Config) -> None:
    """Refuse, before any work, a ζ² on a scale where panels (b)-(d) can measure no round count.

    Every error is proportional to ζ² (the problem is the same at any scale relative to ε), and the run starts at
    E||x_0 - x*||² = :func:`start_error`. If that is at or below the target ε, or below all but one ε of the grid,
    every p reaches them at round 0 (no rounds to compare, no slope A_p to fit: ζ² = 1e-300 printed NaN). If the
    smallest ε lies below :data:`RESOLUTION` times it, float64 cannot resolve the error down to ε and no number of
    rounds reaches it (ζ² = 1e200 printed NaN and inf). Between the two, whether ``rounds`` suffice is known only
    after the run (rounds grow like √(ζ²/ε), Fig. 2b): :func:`check_results`.
    """
    start = start_error(config)
    if not 0 < start < math.inf:
        return  # ζ² = 0 and sizes beyond float range are refused elsewhere
    formula = "N zeta2/(sum_i i^2)^2" + ("" if config.mean_scale == "code" else "/d")
    grid = sorted(config.eps_grid)
    needed = max(config.eps_target, grid[1])  # the target and at least two ε of the fit must lie below the start
    if start <= needed:
        raise InputError(
            f"zeta2 = {config.zeta2:g} puts the starting error E||x0 - x*||^2 = {formula} = {start:.3g} "
            f"(N = {config.n_clients}), not above eps = {needed:.3g}: the target --eps and at least two of --eps-grid "
            "must lie below the starting error, or every p reaches them at round 0 and there are no rounds to "
            f"compare; use zeta2 well above {config.zeta2 * needed / start:.3g}, or smaller --eps and --eps-grid"
        )
    smallest = min(config.eps_target, grid[0])
    if smallest < RESOLUTION * start:
        raise InputError(
            f"zeta2 = {config.zeta2:g} puts the starting error E||x0 - x*||^2 = {formula} at {start:.3g}, and "
            f"eps = {smallest:g} is below what float64 resolves of it (2^-104 = {RESOLUTION:.2g} of it: x is exact "
            "only to 2^-52 of its size), so no number of rounds reaches eps; use zeta2 below "
            f"{config.zeta2 * smallest / (RESOLUTION * start):.3g} (and far below for few rounds: rounds grow like "
            "sqrt(zeta2/eps)), or larger --eps and --eps-grid"
        )


def check_results(config: Config, panels: dict) -> None:
    """Refuse, after the run, results that are not numbers or measure nothing: a p whose target ε is not reached
    within ``rounds`` (its rounds are inf); counts so few (ζ² barely above ε) that every p takes the same rounds to
    every ε (every ratio 1, κ = 0); a fitted A_p/A_0 that is not finite (the reference p = 0 has no positive slope
    A_0, or too few ε of the grid were reached to fit A_p). Rounds to reach ε grow like √(ζ²/ε) (Fig. 2b), so this
    is ζ² too large for ε and ``rounds``, or too small for the grid."""
    p = panels["p"]
    setting = f"zeta2 = {config.zeta2:g}, {config.rounds} rounds"
    missed = p[np.isinf(panels["target_rounds"]).any(axis=0)]
    if missed.size:
        raise InputError(
            f"eps = {config.eps_target:g} is not reached within {config.rounds} rounds at p = "
            f"{', '.join(f'{q:g}' for q in missed)} (zeta2 = {config.zeta2:g}; rounds grow like sqrt(zeta2/eps)): "
            "no rounds to compare; use more --rounds, a larger --eps or a smaller --zeta2"
        )
    rounds = panels["rounds"]  # (seeds, P, 1 + K)
    if p.size > 1 and (rounds == rounds[:, :1]).all():
        raise InputError(
            f"every p takes the same rounds to every eps (at most {rounds.max():g}; {setting}): the starting error "
            f"E||x0 - x*||^2 = {start_error(config):.3g} is so close to eps that the counts are too coarse to show p "
            "(every ratio would be 1 and kappa 0); use a larger --zeta2, or smaller --eps and --eps-grid"
        )
    A0, unfit = panels["A"][0], p[~np.isfinite(panels["A_ratio"])]
    if A0 > 0 and not unfit.size:
        return
    where = (
        f"p = 0 no positive slope (A_0 = {A0:.3g}; every A_p/A_0 divides by it)"
        if not A0 > 0
        else f"no finite slope at p = {', '.join(f'{q:g}' for q in unfit)}"
    )
    raise InputError(
        f"the fit R_p = A_p/sqrt(eps) + B_p over --eps-grid gives {where} ({setting}): the grid's eps are reached at "
        "round 0 or not within the rounds; use an --eps-grid nearer --eps, more --rounds, or another --zeta2"
    )


PRESETS: dict[str, Config] = {
    "default": Config(),
    # The authors' toy-example code (notes/fedssyn_code.md): one local epoch of single-sample SGD in random order,
    # 41 values of p, their 31 step sizes, 800 rounds, their ε grid, one seed.
    "paper": Config(
        preset="paper",
        local="epoch",
        seeds=1,
        p_a=(0.0, 0.1, 0.3, 0.6),
        eta_a=1e-3,
        rounds_a=300,
        p_grid=tuple(np.round(np.linspace(0, 1, 41), 4)),
        etas=tuple(np.logspace(-6, 2, 40)[:31]),
        rounds=800,
        eps_grid=tuple(np.logspace(-6, -4.3, 80)[1:]),
        reach="first",
    ),
}


def quick(config: Config) -> Config:
    """A reduced grid that runs in about a second (used by the tests)."""
    return replace(
        config,
        seeds=min(config.seeds, 2),
        p_a=(0.0, 0.5),
        sigma2_levels=(0.0, 1.0),
        rounds_a=40,
        p_grid=(0.0, 0.25, 0.5),
        etas=tuple(np.geomspace(min(config.etas[-1], 1e-3) / 30, min(config.etas[-1], 1e-2), 12)),
        rounds=min(config.rounds, 400),
        eps_grid=tuple(np.logspace(-5, -3.5, 6)),
        eps_target=1e-5,
        n_boot=50,
    )


def seed_rngs(config: Config, stage: str, count: int) -> list[np.random.Generator]:
    """Independent generators per seed, derived from (seed, stage) so every stage is repeatable on its own."""
    stage_key = sum(ord(ch) << (8 * i) for i, ch in enumerate(stage[:7]))
    return [np.random.default_rng([config.seed, stage_key, s]) for s in range(count)]


def shuffled_problems(config: Config, p_values, sigma2: float, stage: str) -> Problem:
    """Problems of shape (seeds, P, ...): one draw per seed, shuffled independently for each p."""
    hs, cs = [], []
    for rng in seed_rngs(config, stage, config.seeds):
        base = make_problem(
            rng, config.n_clients, config.n_per_client, config.dim, config.zeta2, sigma2, config.mean_scale
        )
        shuffled = [shuffle_problem(base, float(p), rng) for p in p_values]
        hs.append(np.stack([s.h for s in shuffled]))
        cs.append(np.stack([s.c for s in shuffled]))
    return Problem(h=np.stack(hs), c=np.stack(cs))


def run_panel_a(config: Config, progress: Callable[[int], None] | None = None) -> dict:
    """Fig. 2(a): error per round for each σ² level and p at one fixed step size, the mean over seeds
    (``errors``: levels × P × rounds + 1) and each seed's (``by_seed``: levels × seeds × P × rounds + 1);
    ``progress(k)`` counts rounds (``rounds_a`` per level)."""
    curves, by_seed = [], []
    eta = np.array([config.eta_a])
    for level, sigma2 in enumerate(config.sigma2_levels):
        problem = shuffled_problems(config, config.p_a, sigma2, stage=f"a{level}")
        rng = seed_rngs(config, f"a-run{level}", 1)[0]
        if config.local == "epoch":
            errors = fedavg.epoch(problem, eta, config.rounds_a, rng, progress=progress)
        elif sigma2 == 0:
            errors = fedavg.full_batch(problem, eta, config.tau, config.rounds_a)
            if progress:
                progress(config.rounds_a)
        else:
            errors = fedavg.minibatch(
                problem, eta, config.tau, config.rounds_a, config.batch_size, rng, progress=progress
            )
        errors = errors[..., 0, :]  # (seeds, P, R+1)
        bad = fedavg.diverged(errors)
        if bad.any():
            p_bad = sorted({float(config.p_a[j]) for j in np.argwhere(bad)[:, 1]})
            raise InputError(
                f"panel (a) step size eta_a={config.eta_a:g} diverges (sigma2={sigma2:g}, p={p_bad}); "
                "choose a smaller one"
            )
        curves.append(errors.mean(axis=0))
        by_seed.append(errors)
    return {"sigma2": list(config.sigma2_levels), "p": list(config.p_a), "errors": np.stack(curves),
            "by_seed": np.stack(by_seed)}  # fmt: skip


def run_panels_bcd(config: Config, progress: Callable[[int], None] | None = None) -> dict:
    """Fig. 2(b)-(c) and the ζ*² ratio: tuned rounds to reach ε per p, fit of A_p, diagnostics."""
    p = np.asarray(config.p_grid, dtype=np.float64)
    etas = np.asarray(config.etas, dtype=np.float64)
    eps_all = np.concatenate([[config.eps_target], config.eps_grid])
    problem = shuffled_problems(config, p, 0.0, stage="b")
    if config.local == "epoch":
        rngs = seed_rngs(config, "b-run", config.seeds)
        errors = np.stack(
            [
                fedavg.epoch(Problem(problem.h[s], problem.c[s]), etas, config.rounds, rngs[s], progress=progress)
                for s in range(config.seeds)
            ]
        )
    else:
        errors = fedavg.full_batch(problem, etas, config.tau, config.rounds)
        if progress:
            progress(config.seeds)
    # errors: (seeds, P, E, R+1)
    bad = fedavg.diverged(errors)
    if bad.all(axis=-1).any():
        raise InputError("every step size diverges for some p: extend the step-size grid to smaller values")
    reached = fedavg.rounds_to_reach(errors, eps_all, config.reach)  # (S, P, E, K)
    rounds = reached.min(axis=2)  # tuned per (seed, p, ε)
    best_eta_index = np.argmin(reached[..., 0], axis=2)  # (S, P) for the target ε
    target_rounds = rounds[..., 0]
    best_curves = np.take_along_axis(errors, best_eta_index[..., None, None], axis=2)[:, :, 0]  # (S, P, R+1)

    fit_rounds = np.moveaxis(rounds[..., 1:], 0, 1)  # (P, S, K)
    A, B, A_boot = fit.fit_rounds(
        fit_rounds, np.asarray(config.eps_grid), seed_rngs(config, "boot", 1)[0], config.n_boot
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        A_ratio = A / A[0]
        A_ratio_boot = A_boot / A_boot[0]
    A_ratio_boot[~np.isfinite(A_ratio_boot)] = np.nan  # a resample with A_0 = 0 has no ratio (inf would be its CI)
    ci = np.nanpercentile(A_ratio_boot, [2.5, 97.5], axis=-1) if np.isfinite(A_ratio_boot).any() else None

    diag = [
        [diagnostics(Problem(problem.h[s, j], problem.c[s, j])) for j in range(p.size)] for s in range(config.seeds)
    ]
    zeta2_star = np.array([[d.zeta2_star for d in row] for row in diag]).mean(axis=0)
    sigma2_star = np.array([[d.sigma2_star for d in row] for row in diag]).mean(axis=0)
    L_p = np.array([[d.L_p for d in row] for row in diag]).mean(axis=0)
    L_avg = float(np.mean([row[0].L_avg for row in diag]))
    L_max = float(L_p[0])
    theory_ratio = (1 - p) * np.sqrt(lemma1.L_p_bound(p, L_max, L_avg) / L_max)  # (1-p)√(1-p+p L_avg/L_max)
    zeta_star_ratio = zeta2_star / zeta2_star[0]
    return {
        "p": p,
        "eps_target": config.eps_target,
        "eps_grid": np.asarray(config.eps_grid),
        "rounds": rounds,  # (S, P, 1+K)
        "target_rounds": target_rounds,  # (S, P)
        "best_eta": etas[best_eta_index],  # (S, P)
        "best_curves": best_curves,
        "diverged_fraction": bad.mean(axis=(0, 2)),  # per p
        "A": A,
        "B": B,
        "A_ratio": A_ratio,
        "A_ratio_ci": ci,
        "L_p": L_p,
        "L_max": L_max,
        "L_avg": L_avg,
        "zeta2_star": zeta2_star,
        "zeta2_star_ratio": zeta_star_ratio,
        "sigma2_star": sigma2_star,
        "theory_ratio": theory_ratio,
        "zeta_star_theory_ratio": np.sqrt(zeta_star_ratio * L_p / L_max),
        "kappa": fit.exponent(A_ratio, p),
        "kappa_all": fit.fit_exponent(A_ratio, p),
        "kappa_small_p": fit.fit_exponent(A_ratio[p <= 0.6], p[p <= 0.6]),
    }


BASE_MEMORY = 64 * 2**20  # the interpreter, numpy and the small arrays of any run


def memory_needed(config: Config) -> float:
    """Bytes a run of ``config`` needs at its peak, estimated from its largest float64 arrays and their temporaries
    (conservative, within a small factor: a check before any work, see theory.cli.check_memory).

    Counted: the problems of shape (seeds, P, N, n, d) with the per-seed lists they are stacked from; the error
    curves (seeds, P, step sizes, rounds + 1) of each solver with the temporaries of its closed form or its chunk of
    rounds; the envelopes of ``rounds_to_reach``; the bootstrap of the fit; the diagnostics' per-sample gradients;
    the figure's curves. A size too large for a float gives inf.
    """
    try:
        return _memory_needed(config)
    except OverflowError:  # a size beyond float range: more than any machine has
        return math.inf


def _memory_needed(config: Config) -> float:
    f = 8.0  # float64 (and int64) bytes
    S, N, n, d = config.seeds, config.n_clients, config.n_per_client, config.dim
    Pa, Pb, E, L = len(config.p_a), len(config.p_grid), len(config.etas), len(config.sigma2_levels)
    rows_a, rows = config.rounds_a + 1, config.rounds + 1
    K = len(config.eps_grid)
    sample = f * N * n * (d + 1)  # one problem's h and c

    def problems(P: int) -> float:  # shuffled_problems: the per-seed lists, their stack, one draw's temporaries
        return 2 * S * P * sample + 4 * sample

    def epoch_chunk(P: int, E: int) -> float:  # one chunk of fedavg.epoch (order, h, c, factors, weights, products)
        return f * fedavg.EPOCH_CHUNK * P * N * (n * (3 + d + 6 * E) + E * d) + 2 * f * P * E * N * n

    solvers_a = []
    for sigma2 in config.sigma2_levels:
        curves = f * S * Pa * rows_a
        if config.local == "epoch":
            solvers_a.append(curves + epoch_chunk(S * Pa, 1))
        elif sigma2 == 0:
            solvers_a.append(5 * curves + 3 * f * S * Pa * N * d)
        else:
            B = config.batch_size
            solvers_a.append(curves + f * S * Pa * N * (2 * B * d + B + 4 * d))
    panel_a = problems(Pa) + max(solvers_a, default=0.0)

    X = f * S * Pb * E * rows  # the error curves of panels (b)-(d)
    if config.local == "epoch":
        solve = 2 * X + epoch_chunk(Pb, E)
    else:
        solve = 5 * X + 3 * f * S * Pb * E * N * d
    reach = 2.2 * X + 2 * f * S * Pb * E * (K + 1)
    bootstrap = X + 8 * f * Pb * config.n_boot * S * K + f * config.n_boot * S * K
    diagnose = X + 6 * f * N * n * d
    panels = problems(Pb) + max(solve, reach, bootstrap, diagnose)
    plot = 4 * f * (Pb * rows + L * Pa * rows_a)
    return BASE_MEMORY + f * L * Pa * rows_a + max(panel_a, panels, plot)


def loop_steps(config: Config) -> float:
    """Iterations of the Python loops a run of ``config`` steps through: τ local steps per round of panel (a)'s
    mini-batch solver (each σ² > 0), and a chunk of rounds per seed of the epoch solver (the closed form has none)."""
    noisy = sum(1 for sigma2 in config.sigma2_levels if sigma2 > 0)
    steps = 0.0
    if config.local == "epoch":
        chunks = -(-config.rounds_a // fedavg.EPOCH_CHUNK) * len(config.sigma2_levels)
        steps += chunks + config.seeds * -(-config.rounds // fedavg.EPOCH_CHUNK)
    else:
        steps += float(noisy) * config.rounds_a * config.tau
    return steps


# Wall time on one core, measured on the CPUs these runs were made on (within about 2x there; another machine
# scales all of them alike): one pass of a Python loop's body of numpy calls, one float64 element through such a
# pass, and per element of the closed form's error curves (x eps values for the rounds to reach them).
STEP_SECONDS = 150e-6
ELEMENT_SECONDS = 15e-9
CURVE_SECONDS = 20e-9
CURVE_EPS_SECONDS = 8e-9
EPOCH_SECONDS = 30e-9  # per (p, step size, round, client, sample) of the epoch solver, plus 1 ns per dimension


def seconds_needed(config: Config) -> float:
    """Rough wall time of a run of ``config`` on one core (the check before a long run, and its announcement):
    panel (a)'s solvers, panels (b)-(d)'s solver and the rounds to reach each ε. inf for sizes beyond float range."""
    try:
        return _seconds_needed(config)
    except OverflowError:
        return math.inf


def _seconds_needed(config: Config) -> float:
    S, N, n, d = config.seeds, config.n_clients, config.n_per_client, config.dim
    Pa, Pb, E, K = len(config.p_a), len(config.p_grid), len(config.etas), len(config.eps_grid) + 1
    chunk = fedavg.EPOCH_CHUNK

    def epoch(batch: float, E: int, rounds: int) -> float:  # fedavg.epoch: a batched product per chunk of rounds
        chunks = -(-rounds // chunk)
        return chunks * (STEP_SECONDS + batch * E * chunk * N * n * (EPOCH_SECONDS + 1e-9 * d))

    seconds = 0.0
    for sigma2 in config.sigma2_levels:
        if config.local == "epoch":
            seconds += epoch(S * Pa, 1, config.rounds_a)
        elif sigma2 == 0:
            seconds += S * Pa * (config.rounds_a + 1) * CURVE_SECONDS
        else:  # fedavg.minibatch: τ steps a round, each over (seeds, p, N, B, d) draws
            step = STEP_SECONDS + ELEMENT_SECONDS * S * Pa * N * d * (config.batch_size + 1)
            seconds += float(config.rounds_a) * config.tau * step
    curves = S * Pb * E * (config.rounds + 1)
    if config.local == "epoch":
        seconds += S * epoch(Pb, E, config.rounds)
    seconds += curves * (CURVE_SECONDS + K * CURVE_EPS_SECONDS)
    return seconds


def config_dict(config: Config) -> dict:
    """The config as JSON-ready data."""
    out = asdict(config)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}
