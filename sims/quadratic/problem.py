"""The distributed least-squares problem of Fedssyn Sec. 2.3 (Fig. 2), its shuffle, optimum and diagnostics.

f(x) = (1/N) Σ_i f_i(x),  f_i(x) = 1/(2n) Σ_j ||A_ij x - b_ij||²,  A_ij = a_ij I_d.

Before shuffling a_ij = i (clients i = 1..N), μ_i ~ N(0, s_ζ(i) I_d) and b_ij ~ N(μ_i, s_σ(i) I_d). Every sample's
Hessian is a scalar multiple of the identity, so a sample is stored as h_ij = a_ij² (its Hessian ∇²F = h_ij I)
and c_ij = a_ij b_ij (its gradient is ∇F(x; ξ_ij) = h_ij x - c_ij). Arrays carry any leading batch axes
(seeds, p) in front of (N, n) and (N, n, d).

Variance scale (``mean_scale``): the paper's text writes μ_i ~ N(0, ζ²(id)⁻² I_d); the authors' code uses
variance ζ/(i² d) with "ζ = 10". We default to the code's convention with ζ² in place of their ζ, variance
ζ²/(i² d) per coordinate ("code"), which makes E||∇f_i(0)||² = ζ² (the measured ζ² at 0, which subtracts the
mean gradient, averages to (1 - 1/N)ζ²); the code's ζ = 10 is our ``zeta2 = 10``. ``mean_scale="paper"`` uses
ζ²/(i d)². The noise σ² scales the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory import estimators
from theory.errors import InputError
from theory.shuffle import shuffle_assignment

MEAN_SCALES = ("code", "paper")


@dataclass(frozen=True)
class Problem:
    """Samples of one or many least-squares problems.

    h: per-sample curvature h_ij = a_ij², shape (..., N, n).
    c: per-sample a_ij b_ij, shape (..., N, n, d).
    """

    h: np.ndarray
    c: np.ndarray

    @property
    def client_h(self) -> np.ndarray:
        """h̄_i: client i's Hessian is h̄_i I_d (so its smoothness L_i = h̄_i), shape (..., N)."""
        return self.h.mean(axis=-1)

    @property
    def client_c(self) -> np.ndarray:
        """c̄_i, so that ∇f_i(x) = h̄_i x - c̄_i, shape (..., N, d)."""
        return self.c.mean(axis=-2)

    def x_star(self) -> np.ndarray:
        """The minimiser of f: ∇f(x*) = 0 gives x* = Σ_i c̄_i / Σ_i h̄_i, shape (..., d)."""
        return self.client_c.sum(axis=-2) / self.client_h.sum(axis=-1)[..., None]

    def gradients(self, x: np.ndarray) -> np.ndarray:
        """Per-sample gradients ∇F(x; ξ_ij) = h_ij x - c_ij at x of shape (..., d); result (..., N, n, d)."""
        return self.h[..., None] * x[..., None, None, :] - self.c


def make_problem(
    rng: np.random.Generator,
    n_clients: int = 10,
    n_per_client: int = 100,
    dim: int = 25,
    zeta2: float = 10.0,
    sigma2: float = 0.0,
    mean_scale: str = "code",
    batch_shape: tuple[int, ...] = (),
) -> Problem:
    """Draw the paper's problem (Sec. 2.3): A_ij = i I_d, μ_i and b_ij Gaussian; ``batch_shape`` independent draws."""
    if mean_scale not in MEAN_SCALES:
        raise InputError(f"mean_scale must be one of {MEAN_SCALES}, got {mean_scale!r}")
    for name, value in (("n_clients", n_clients), ("n_per_client", n_per_client), ("dim", dim)):
        if int(value) < 1:
            raise InputError(f"{name} must be >= 1, got {value}")
    for name, value in (("zeta2", zeta2), ("sigma2", sigma2)):
        if not value >= 0:
            raise InputError(f"{name} must be >= 0, got {value}")
    N, n, d = int(n_clients), int(n_per_client), int(dim)
    a = np.arange(1, N + 1, dtype=np.float64)
    denominator = a**2 * d if mean_scale == "code" else (a * d) ** 2  # variance = scale / denominator
    std_mean = np.sqrt(zeta2 / denominator)[:, None]  # (N, 1)
    std_noise = np.sqrt(sigma2 / denominator)[:, None, None]  # (N, 1, 1)
    mu = std_mean * rng.standard_normal((*batch_shape, N, d))
    b = mu[..., None, :] + std_noise * rng.standard_normal((*batch_shape, N, n, d))
    a_ij = np.broadcast_to(a[:, None], (*batch_shape, N, n))
    return Problem(h=a_ij**2, c=a_ij[..., None] * b)


def shuffle_problem(problem: Problem, p: float, rng: np.random.Generator, shuffles: int | None = None) -> Problem:
    """Exchange round(p·n) samples per client through a pooled permutation (theory.shuffle), per batch entry.

    ``problem`` has batch shape B; the result has batch shape B, or (shuffles, *B) when ``shuffles`` is given.
    """
    *batch, N, n = problem.h.shape
    count = int(np.prod(batch, dtype=int)) * (1 if shuffles is None else shuffles)
    assignment = shuffle_assignment(N, n, p, rng, shuffles=count)  # (count, N, n)
    out_batch = tuple(batch) if shuffles is None else (shuffles, *batch)
    h = np.broadcast_to(problem.h, (*out_batch, N, n)).reshape(count, N * n)
    c = np.broadcast_to(problem.c, (*out_batch, N, n, problem.c.shape[-1])).reshape(count, N * n, -1)
    flat = assignment.reshape(count, N * n)
    h = np.take_along_axis(h, flat, axis=1).reshape(*out_batch, N, n)
    c = np.take_along_axis(c, flat[..., None], axis=1).reshape(*out_batch, N, n, -1)
    return Problem(h=h, c=c)


@dataclass(frozen=True)
class Diagnostics:
    """Lemma 1's quantities of one problem, measured with theory.estimators.

    zeta2_star: ζ*² = (1/N) Σ_i ||∇f_i(x*)||², the dissimilarity at the optimum (the revised paper's quantity).
    zeta2_zero: ζ² at x = 0, the worst case over the starting point of every run.
    sigma2_star: σ² at x* (client-averaged single-sample noise).
    L_p: the largest client smoothness max_i h̄_i after shuffling (L_max at p = 0).
    L_avg: the average client smoothness (1/N) Σ_i h̄_i (unchanged by shuffling).
    """

    zeta2_star: float
    zeta2_zero: float
    sigma2_star: float
    L_p: float
    L_avg: float


def diagnostics(problem: Problem) -> Diagnostics:
    """Measure ζ*², σ²(x*), L_p of one problem (no batch axes)."""
    if problem.h.ndim != 2:
        raise InputError("diagnostics takes one problem; index the batch axes first")
    x_star = problem.x_star()
    at_star = problem.gradients(x_star)
    at_zero = problem.gradients(np.zeros_like(x_star))
    # Each sample's Hessian is h_ij I_d, whose spectral norm is h_ij: 1×1 Hessians give the same constants.
    smooth = estimators.smoothness(problem.h[..., None, None])
    return Diagnostics(
        zeta2_star=estimators.zeta2(at_star),
        zeta2_zero=estimators.zeta2(at_zero),
        sigma2_star=estimators.sigma2(at_star),
        L_p=smooth.L_max,
        L_avg=smooth.L_avg,
    )
