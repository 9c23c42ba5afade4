"""FedAvg on the least-squares problem, vectorised over batch axes (seeds, p) and step sizes.

Three local solvers, all returning the server error ||x_t - x*||² for rounds t = 0..R, shape (..., E, R+1) for E
step sizes η (x* is the optimum of the problem as given, i.e. of the shuffled data):

- ``full_batch``: τ local gradient steps on f_i. Every Hessian is h̄_i I, so one round is the affine map
  x ↦ α x + β with α = (1/N) Σ_i ρ_i, ρ_i = (1 - η h̄_i)^τ and β = (1/N) Σ_i (1 - ρ_i) x_i*, x_i* = c̄_i / h̄_i.
  The errors follow in closed form from the fixed point x_∞ = β / (1 - α): x_t - x* = α^t (x_0 - x_∞) + (x_∞ - x*),
  without stepping any round.
- ``minibatch``: τ local SGD steps, each on ``batch_size`` samples drawn with replacement (same draws for every
  step size: common random numbers make step sizes comparable).
- ``epoch``: the authors' setting, one local epoch of single-sample SGD in a fresh random order each round
  (τ = n steps). The contraction α = (1/N) Σ_i Π_j (1 - η h_ij) does not depend on the order, and client i's
  offset is q_i = η Σ_j Π_{l after j} (1 - η h_l) c_j, a weighted sum computed for all rounds of a chunk as one
  batched matrix product; the server recursion x_{t+1} = α x_t + mean_i q_i is then cheap.

A run whose error overflows (a step size too large for the curvature) reports inf, never NaN; ``diverged`` marks
those step sizes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sims.quadratic.problem import Problem
from theory.errors import InputError


def _check(etas: np.ndarray, tau: int, rounds: int) -> np.ndarray:
    etas = np.asarray(etas, dtype=np.float64)
    if etas.ndim != 1 or etas.size == 0 or not (etas > 0).all():
        raise InputError("step sizes must be a non-empty list of positive numbers")
    if int(tau) < 1:
        raise InputError(f"tau must be >= 1, got {tau}")
    if int(rounds) < 1:
        raise InputError(f"rounds must be >= 1, got {rounds}")
    return etas


def _start(problem: Problem, x0: np.ndarray | None) -> np.ndarray:
    d = problem.c.shape[-1]
    return np.zeros(d) if x0 is None else np.asarray(x0, dtype=np.float64)


def _clean(errors: np.ndarray) -> np.ndarray:
    """Overflowed or NaN errors (divergence) become inf."""
    return np.where(np.isfinite(errors), errors, np.inf)


def round_map(problem: Problem, etas: np.ndarray, tau: int) -> tuple[np.ndarray, np.ndarray]:
    """(α, β) of the full-batch FedAvg round x ↦ α x + β; α shape (..., E), β shape (..., E, d)."""
    h = problem.client_h[..., None, :]  # (..., 1, N)
    x_local_star = (problem.client_c / problem.client_h[..., None])[..., None, :, :]  # (..., 1, N, d)
    with np.errstate(over="ignore", invalid="ignore"):
        rho = (1.0 - etas[:, None] * h) ** int(tau)  # (..., E, N)
        alpha = rho.mean(axis=-1)
        beta = ((1.0 - rho)[..., None] * x_local_star).mean(axis=-2)
    return alpha, beta


def full_batch(problem: Problem, etas: np.ndarray, tau: int, rounds: int, x0: np.ndarray | None = None) -> np.ndarray:
    """Errors of FedAvg with τ full-batch local steps, in closed form (see module docstring)."""
    etas = _check(etas, tau, rounds)
    alpha, beta = round_map(problem, etas, tau)
    x_star = problem.x_star()[..., None, :]  # (..., 1, d)
    t = np.arange(int(rounds) + 1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x_inf = beta / (1.0 - alpha)[..., None]
        v = _start(problem, x0) - x_inf  # x_0 - x_∞
        w = x_inf - x_star  # x_∞ - x*: FedAvg's heterogeneity bias
        V, C, W = (np.sum(a * b, axis=-1)[..., None] for a, b in ((v, v), (v, w), (w, w)))
        power = alpha[..., None] ** t  # (..., E, R+1)
        errors = power**2 * V + 2 * power * C + W
        errors = np.maximum(errors, 0.0)  # rounding can leave -1e-20 where the error is exactly 0
    return _clean(errors)


def minibatch(
    problem: Problem,
    etas: np.ndarray,
    tau: int,
    rounds: int,
    batch_size: int,
    rng: np.random.Generator,
    x0: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Errors of FedAvg with τ local mini-batch SGD steps (batches drawn with replacement); ``progress(1)`` after
    every round."""
    etas = _check(etas, tau, rounds)
    if int(batch_size) < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    *batch, N, n = problem.h.shape
    B = int(batch_size)
    x_star = problem.x_star()[..., None, :]
    x = np.broadcast_to(_start(problem, x0), (*batch, etas.size, problem.c.shape[-1])).copy()
    errors = np.empty((*batch, etas.size, int(rounds) + 1))
    errors[..., 0] = np.sum((x - x_star) ** 2, axis=-1)
    eta = etas[:, None, None]
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, int(rounds) + 1):
            local = np.repeat(x[..., None, :], N, axis=-2)  # (..., E, N, d)
            for _ in range(int(tau)):
                idx = rng.integers(0, n, size=(*batch, N, B))
                h_b = np.take_along_axis(problem.h, idx, axis=-1).mean(axis=-1)  # (..., N)
                c_b = np.take_along_axis(problem.c, idx[..., None], axis=-2).mean(axis=-2)  # (..., N, d)
                local -= eta * (h_b[..., None, :, None] * local - c_b[..., None, :, :])
            x = local.mean(axis=-2)
            errors[..., t] = np.sum((x - x_star) ** 2, axis=-1)
            if progress:
                progress(1)
    return _clean(errors)


EPOCH_CHUNK = 16  # rounds of ``epoch`` computed as one batched product


def epoch(
    problem: Problem,
    etas: np.ndarray,
    rounds: int,
    rng: np.random.Generator,
    x0: np.ndarray | None = None,
    chunk: int = EPOCH_CHUNK,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Errors of FedAvg with one local epoch of single-sample SGD in random order per round (τ = n)."""
    *batch, N, n = problem.h.shape
    etas = _check(etas, n, rounds)
    d = problem.c.shape[-1]
    E = etas.size
    x_star = problem.x_star()[..., None, :]
    x = np.broadcast_to(_start(problem, x0), (*batch, E, d)).copy()
    errors = np.empty((*batch, E, int(rounds) + 1))
    errors[..., 0] = np.sum((x - x_star) ** 2, axis=-1)
    eta = etas.reshape(E, 1, 1, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        # α is a product of scalars: the same in every order and every round.
        alpha = np.prod(1.0 - eta[..., 0] * problem.h[..., None, :, :], axis=-1).mean(axis=-1)[..., None]  # (...,E,1)
        done = 0
        while done < rounds:
            T = min(chunk, int(rounds) - done)
            order = np.argsort(rng.random((*batch, T, N, n)), axis=-1)
            h = np.take_along_axis(problem.h[..., None, :, :], order, axis=-1)  # (..., T, N, n)
            c = np.take_along_axis(problem.c[..., None, :, :, :], order[..., None], axis=-2)  # (..., T, N, n, d)
            factors = 1.0 - eta * h[..., None, :, :, :]  # (..., E, T, N, n)
            after = np.cumprod(factors[..., ::-1], axis=-1)[..., ::-1]  # Π_{l >= j}
            weights = np.concatenate([after[..., 1:], np.ones_like(after[..., :1])], axis=-1) * eta  # Π_{l > j}
            weights = np.moveaxis(weights, -4, -2)  # (..., T, N, E, n)
            offsets = (weights @ c).mean(axis=-3)  # (..., T, E, d)
            for s in range(T):
                x = alpha * x + offsets[..., s, :, :]
                errors[..., done + s + 1] = np.sum((x - x_star) ** 2, axis=-1)
            done += T
            if progress:
                progress(T)
    return _clean(errors)


REACH_MODES = ("first", "stay")


def rounds_to_reach(errors: np.ndarray, eps: np.ndarray, mode: str = "first") -> np.ndarray:
    """Rounds to reach ε, for every ε (last axis of the result); inf where never reached.

    mode "first": the first round with error <= ε (the authors' definition; a transient dip counts).
    mode "stay": the first round from which the error stays <= ε until the last simulated round.
    errors: (..., R+1) -> result (..., K) for K values of ε.
    """
    if mode not in REACH_MODES:
        raise InputError(f"reach mode must be one of {REACH_MODES}, got {mode!r}")
    eps = np.asarray(eps, dtype=np.float64)
    if mode == "first":
        envelope = np.minimum.accumulate(errors, axis=-1)  # best so far: non-increasing in t
    else:
        envelope = np.maximum.accumulate(errors[..., ::-1], axis=-1)[..., ::-1]  # worst from t on: non-increasing
    # The envelope is non-increasing, so the rounds before reaching ε = the number of t with envelope > ε.
    first = np.stack([(envelope > e).sum(axis=-1) for e in eps], axis=-1).astype(np.float64)
    first[first == errors.shape[-1]] = np.inf
    return first


def diverged(errors: np.ndarray, growth: float = 1e6) -> np.ndarray:
    """Step sizes whose error overflowed or grew ``growth``-fold over the run, shape errors.shape[:-1].

    An error that merely ends above its start is not divergence: FedAvg's fixed point can sit farther from x* than
    the starting point when the local steps are long.
    """
    start = np.maximum(errors[..., 0], np.finfo(np.float64).tiny)
    return ~np.isfinite(errors[..., -1]) | (errors[..., -1] > growth * start)
