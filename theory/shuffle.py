"""One realised finite shuffle of a fraction p of every client's data, and its exact expected ζ̂².

The paper's shuffle (Fedssyn Sec. 2.3): every client hands k = round(p·n) of its n samples, drawn uniformly
without replacement, to a pool; the server permutes the pool and deals it back in N equal parts of k, so every
client keeps n samples. Done for many independent shuffles at once (a leading ``shuffles`` axis).

A realised shuffle is not the mixture D̂_i = (1-p)D_i + pD̃ of Lemma 1: which samples move is random, so its
ζ̂² carries a finite-sample term of order (σ² + ζ²)·p/n on top of (1-p)²ζ². :func:`expected_realised_zeta2`
gives that expectation exactly, which lets simulators separate the lemma from finite-sample effects.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory import _validate
from theory.errors import InputError
from theory.estimators import _gradients


def n_exchanged(n: int, p: float) -> int:
    """k = round(p·n), the number of samples each client hands to the pool (round half to even)."""
    n = _validate.count("n", n)
    return round(_validate.scalar_fraction("p", p) * n)


def shuffle_assignment(
    n_clients: int, n_per_client: int, p: float, rng: np.random.Generator, shuffles: int | None = None
) -> np.ndarray:
    """Indices into the pooled samples (client-major, ``client * n_per_client + j``) after one shuffle.

    Returns shape (n_clients, n_per_client), or (shuffles, n_clients, n_per_client) when ``shuffles`` is
    given. Row i lists client i's kept samples first (in their original order), then the k it received.

    >>> rng = np.random.default_rng(0)
    >>> assignment = shuffle_assignment(3, 4, 0.5, rng)
    >>> sorted(assignment.ravel().tolist()) == list(range(12))
    True
    """
    N = _validate.count("n_clients", n_clients)
    n = _validate.count("n_per_client", n_per_client)
    k = n_exchanged(n, p)
    S = 1 if shuffles is None else _validate.count("shuffles", shuffles)
    flat = np.arange(N * n).reshape(N, n)
    # Random keys -> a uniformly random order of each client's samples; the first k are given away.
    order = np.argsort(rng.random((S, N, n)), axis=-1)
    given = np.take_along_axis(np.broadcast_to(flat, (S, N, n)), order[..., :k], axis=-1)
    kept = np.sort(np.take_along_axis(np.broadcast_to(flat, (S, N, n)), order[..., k:], axis=-1), axis=-1)
    pool = given.reshape(S, N * k)
    dealt = np.take_along_axis(pool, np.argsort(rng.random((S, N * k)), axis=-1), axis=-1).reshape(S, N, k)
    assignment = np.concatenate([kept, dealt], axis=-1)
    return assignment[0] if shuffles is None else assignment


def shuffle_samples(samples: ArrayLike, p: float, rng: np.random.Generator, shuffles: int | None = None) -> np.ndarray:
    """Apply :func:`shuffle_assignment` to ``samples`` of shape (N, n, ...) (gradients, Hessians, data)."""
    samples = np.asarray(samples)
    if samples.ndim < 2 or 0 in samples.shape[:2]:
        raise InputError(f"samples must have shape (clients, samples, ...) with no empty axis, got {samples.shape}")
    N, n = samples.shape[:2]
    assignment = shuffle_assignment(N, n, p, rng, shuffles)
    return samples.reshape(N * n, *samples.shape[2:])[assignment]


def expected_realised_zeta2(G: ArrayLike, p: float) -> float:
    """E ζ̂² over the randomness of one realised shuffle of per-sample gradients ``G`` (N, n, d), exactly.

    With k = round(p·n) exchanged per client, s_i the sum of what client i gives, r_i the sum it receives and
    T = Σ_i s_i the pool's sum, client i's new mean is ĝ_i = ḡ_i + (r_i - s_i)/n while the global mean ḡ is
    unchanged. Sampling without replacement gives E s_i = k ḡ_i, Var s_i = k σ_i² (n-k)/(n-1), E[r_i | pool] =
    T/N and Var(r_i | pool) = k σ_P² (M-k)/(M-1) with M = N·k and σ_P² the pool's variance. Expanding
    E||n(ĝ_i - ḡ)||² with these moments gives the closed form below; for k -> p·n, n -> ∞ it tends to (1-p)²ζ².
    """
    G = _gradients(G)
    N, n, _ = G.shape
    k = n_exchanged(n, p)
    if k == 0:
        grads = G.mean(axis=1)
        return float(np.mean(np.sum((grads - grads.mean(axis=0)) ** 2, axis=-1)))
    M = N * k
    c_n = (n - k) / (n - 1) if n > 1 else 0.0  # finite-population corrections
    c_M = (M - k) / (M - 1) if M > 1 else 0.0
    g_i = G.mean(axis=1)  # (N, d)
    g = g_i.mean(axis=0)
    u2 = np.sum((g_i - g) ** 2, axis=-1)  # ||ḡ_i - ḡ||²
    sigma2_i = np.mean(np.sum((G - g_i[:, None]) ** 2, axis=-1), axis=1)
    second_moment = np.mean(np.sum(G**2, axis=-1), axis=1)  # q_i = mean_j ||g_ij||²

    E_s2 = k**2 * np.sum(g_i**2, axis=-1) + k * c_n * sigma2_i  # E||s_i||²
    E_T2 = (k * N) ** 2 * np.sum(g**2) + k * c_n * sigma2_i.sum()  # E||T||²
    E_pool_sq = k * second_moment.sum()  # E Σ_pool ||x||²
    E_r2 = E_T2 / N**2 + k * c_M * (E_pool_sq / M - E_T2 / M**2)  # E||r_i||²
    cross = k**2 * (g_i @ g_i.T)
    E_sr = (E_s2 + cross.sum(axis=1) - np.diag(cross)) / N  # E<s_i, r_i> = E<s_i, T>/N
    E_norm2 = n**2 * u2 + E_s2 + E_r2 - 2 * n * k * u2 - 2 * E_sr
    return float(np.mean(E_norm2) / n**2)


def finite_sample_allowance(p: ArrayLike, sigma2: float, zeta2: float, n: ArrayLike) -> np.ndarray:
    """How far a *realised* shuffle's ζ̂²_p/ζ² may lie above Lemma 1's (1-p)² (the lemma bounds the mixture
    (1-p)D_i + pD̃): at most 2p(3σ̄² + ζ²)/(n·ζ²) for clients of n samples exchanging round(p·n) of them (the
    finite-sample terms of :func:`expected_realised_zeta2`, bounded). One allowance wherever realised shuffles are
    judged (the least-squares ``lemma1`` rows and the FL ``theory-fl`` rows)."""
    p, n = np.asarray(p, dtype=float), np.asarray(n, dtype=float)
    return 2 * p * (3 * sigma2 + zeta2) / (n * zeta2)


def realised_statistics(
    samples: ArrayLike,
    p: float,
    statistic,
    rng: np.random.Generator,
    shuffles: int,
    chunk: int = 128,
) -> np.ndarray:
    """``statistic`` of ``shuffles`` independent realised shuffles of ``samples`` (N, n, ...), shape (shuffles,):
    the Monte Carlo scatter of one realised shuffle around its expectation (Lemma 1 bounds the expectation, or the
    mixture, never one draw). ``statistic`` maps shuffled samples of shape (S, N, n, ...) to S numbers; the
    shuffles are drawn ``chunk`` at a time, so memory stays at ``chunk`` copies of ``samples``."""
    samples = np.asarray(samples, dtype=np.float64)
    total = _validate.count("shuffles", shuffles)
    out = []
    while total > 0:
        size = min(total, _validate.count("chunk", chunk))
        out.append(np.asarray(statistic(shuffle_samples(samples, p, rng, shuffles=size)), dtype=np.float64))
        total -= size
    return np.concatenate(out)


def zeta2_of(G: np.ndarray) -> np.ndarray:
    """ζ² of per-sample gradients with leading batch axes, (..., N, n, d) -> (...): ``theory.estimators.zeta2``
    over a batch of problems (the statistic :func:`realised_statistics` takes for ζ̂²_p)."""
    grads = G.mean(axis=-2)
    return np.mean(np.sum((grads - grads.mean(axis=-2, keepdims=True)) ** 2, axis=-1), axis=-1)


def largest_client_smoothness(H: np.ndarray) -> np.ndarray:
    """L_p = max_i ||(1/n) Σ_j H_ij||₂ of per-sample Hessians with leading batch axes, (..., N, n, k, k) -> (...)
    (k = 1 for scalar curvatures): the smoothness of the least smooth client, as ``theory.estimators.smoothness``."""
    client = H.mean(axis=-3)
    norms = np.abs(client[..., 0, 0]) if client.shape[-1] == 1 else np.linalg.norm(client, ord=2, axis=(-2, -1))
    return norms.max(axis=-1)
