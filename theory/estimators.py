"""Exact σ², ζ², δ², L_max, L_avg on finite problems, before and after shuffling (Fedssyn Lemma 1, appendix D).

A finite problem is given at one point x by per-sample gradients ``G`` of shape (N, n, d): N clients with n
samples each, gradient dimension d. Client i's distribution D_i is uniform over its n samples, f = (1/N) Σ_i f_i
(eq. 1). The shuffled-in distribution D̃ is given by samples ``G_tilde``: shape (K, d) for one D̃ shared by all
clients (the mixture model of Sec. 2.1; default: all N·n samples pooled, i.e. the uniform mix of real data), or
(N, K, d) for a different D̃_i per client (e.g. each client's share of a synthetic pool in Fedssyn).

Definitions (each averaged over clients, "E_i" in the paper):

- ζ² = (1/N) Σ_i ||∇f_i - ∇f||²                         (Assumption 1, eq. 2, measured at x)
- σ² = (1/N) Σ_i E_{ξ~D_i} ||∇F(x; ξ) - ∇f_i||²          (Assumption 2, eq. 3, client average)
- δ² = ||∇f - ∇f̃||²                                     (Lemma D-3)
- L_i = ||∇²f_i||₂, L_max = max_i L_i, L_avg = (1/N) Σ_i L_i   (Sec. 2.3; D-4's L_avg = ||∇²f||₂ <= this)

The "mixture" functions compute the shuffled quantities in expectation under D̂_i = (1-p) D_i + p D̃, directly
from the mixture's definition (a weighted sum over samples); for one realised finite shuffle, shuffle the
samples with :func:`theory.shuffle.shuffle_samples` and apply the plain estimators. Every mixture function
broadcasts over an array ``p`` (leading axes of the result).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from theory import _validate
from theory.errors import InputError


def _gradients(G: ArrayLike, name: str = "G") -> np.ndarray:
    G = _validate.as_float_array(name, G)
    if G.ndim != 3 or 0 in G.shape:
        raise InputError(f"{name} must have shape (clients, samples, dim) with no empty axis, got {G.shape}")
    return G


def _pool(G: np.ndarray, G_tilde: ArrayLike | None) -> np.ndarray:
    """D̃'s samples as an array of shape (1 or N, K, d); default: all samples of G pooled."""
    if G_tilde is None:
        return G.reshape(1, -1, G.shape[-1])
    G_tilde = _validate.as_float_array("G_tilde", G_tilde)
    if G_tilde.ndim == 2:
        G_tilde = G_tilde[None]
    if G_tilde.ndim != 3 or G_tilde.shape[0] not in (1, G.shape[0]) or G_tilde.shape[-1] != G.shape[-1]:
        raise InputError(
            f"G_tilde must have shape (K, {G.shape[-1]}) or ({G.shape[0]}, K, {G.shape[-1]}), got {G_tilde.shape}"
        )
    if G_tilde.shape[1] == 0:
        raise InputError("G_tilde must hold at least one sample")
    return G_tilde


def client_gradients(G: ArrayLike) -> np.ndarray:
    """∇f_i(x) = mean of client i's per-sample gradients, shape (N, d)."""
    return _gradients(G).mean(axis=1)


def zeta2(G: ArrayLike) -> float:
    """Gradient dissimilarity ζ² = (1/N) Σ_i ||∇f_i - ∇f||² (eq. 2)."""
    grads = client_gradients(G)
    return float(np.mean(np.sum((grads - grads.mean(axis=0)) ** 2, axis=-1)))


def sigma2_per_client(G: ArrayLike) -> np.ndarray:
    """σ_i² = E_{ξ~D_i} ||∇F(x; ξ) - ∇f_i||² per client, shape (N,) (eq. 3, population variance)."""
    G = _gradients(G)
    return np.mean(np.sum((G - G.mean(axis=1, keepdims=True)) ** 2, axis=-1), axis=1)


def sigma2(G: ArrayLike) -> float:
    """Client-averaged stochastic noise σ² = (1/N) Σ_i σ_i² (the E over clients in D.11)."""
    return float(sigma2_per_client(G).mean())


def delta2(G: ArrayLike, G_tilde: ArrayLike) -> float:
    """δ² = ||∇f - ∇f̃||² between the real data and the shuffled-in data D̃ (Lemma D-3).

    With a per-client D̃_i (G_tilde of shape (N, K, d)), ∇f̃ is the average of the clients' ∇f̃_i.
    """
    G = _gradients(G)
    pool = _pool(G, G_tilde)
    return float(np.sum((G.mean(axis=(0, 1)) - pool.mean(axis=1).mean(axis=0)) ** 2))


def mixture_client_gradients(G: ArrayLike, p: ArrayLike, G_tilde: ArrayLike | None = None) -> np.ndarray:
    """∇f̂_i = (1-p) ∇f_i + p ∇f̃_i (eq. D.2b), shape p.shape + (N, d)."""
    G = _gradients(G)
    p = _validate.fraction("p", p)[..., None, None]
    return (1.0 - p) * G.mean(axis=1) + p * _pool(G, G_tilde).mean(axis=1)


def mixture_zeta2(G: ArrayLike, p: ArrayLike, G_tilde: ArrayLike | None = None) -> np.ndarray:
    """ζ̂²_p = (1/N) Σ_i ||∇f̂_i - ∇f̂||² under the mixture D̂_i (eq. D.4's left side), shape p.shape."""
    grads = mixture_client_gradients(G, p, G_tilde)
    return np.mean(np.sum((grads - grads.mean(axis=-2, keepdims=True)) ** 2, axis=-1), axis=-1)


def mixture_sigma2_per_client(G: ArrayLike, p: ArrayLike, G_tilde: ArrayLike | None = None) -> np.ndarray:
    """σ̂²_{p,i} = E_{ξ~D̂_i} ||∇F(x; ξ) - ∇f̂_i||², shape p.shape + (N,).

    Computed from the definition: a sample of client i's mixture is one of its own n samples with weight
    (1-p)/n or one of D̃'s K samples with weight p/K (eq. D.1).
    """
    G = _gradients(G)
    pool = _pool(G, G_tilde)
    p = _validate.fraction("p", p)
    centre = mixture_client_gradients(G, p, G_tilde)[..., :, None, :]  # (..., N, 1, d)
    own = np.mean(np.sum((G - centre) ** 2, axis=-1), axis=-1)
    shuffled = np.mean(np.sum((pool - centre) ** 2, axis=-1), axis=-1)
    return (1.0 - p)[..., None] * own + p[..., None] * shuffled


def mixture_sigma2(G: ArrayLike, p: ArrayLike, G_tilde: ArrayLike | None = None) -> np.ndarray:
    """Client-averaged shuffled noise E σ̂²_p (eq. D.6's left side), shape p.shape."""
    return mixture_sigma2_per_client(G, p, G_tilde).mean(axis=-1)


# --- smoothness (Lemma D-4) -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Smoothness:
    """Smoothness constants of a finite problem (Sec. 2.3 and Lemma D-4).

    L_clients: L_i = ||∇²f_i||₂ per client, shape (N,).
    L_max: max_i L_i.
    L_avg: (1/N) Σ_i L_i, the paper's Sec. 2.3 definition.
    L_global: ||∇²f||₂, the smoothness of f used in Lemma D-4's proof; L_global <= L_avg.
    """

    L_clients: np.ndarray
    L_max: float
    L_avg: float
    L_global: float


def _hessians(H: ArrayLike, name: str = "H") -> np.ndarray:
    H = _validate.as_float_array(name, H)
    if H.ndim != 4 or H.shape[-1] != H.shape[-2] or 0 in H.shape:
        raise InputError(f"{name} must have shape (clients, samples, dim, dim), got {H.shape}")
    return H


def _spectral_norm(M: np.ndarray) -> np.ndarray:
    return np.linalg.norm(M, ord=2, axis=(-2, -1))


def smoothness(H: ArrayLike) -> Smoothness:
    """L_i, L_max, L_avg, L_global from per-sample Hessians ``H`` of shape (N, n, d, d)."""
    client_hessians = _hessians(H).mean(axis=1)
    L_clients = _spectral_norm(client_hessians)
    return Smoothness(
        L_clients=L_clients,
        L_max=float(L_clients.max()),
        L_avg=float(L_clients.mean()),
        L_global=float(_spectral_norm(client_hessians.mean(axis=0))),
    )


def mixture_L_p(H: ArrayLike, p: ArrayLike, H_tilde: ArrayLike | None = None) -> np.ndarray:
    """L_p = max_i ||(1-p) ∇²f_i + p ∇²f̃||₂ under the mixture (Lemma D-4's left side), shape p.shape.

    ``H_tilde``: per-sample Hessians of D̃, shape (K, d, d); default all of H pooled.
    """
    H = _hessians(H)
    p = _validate.fraction("p", p)[..., None, None, None]
    if H_tilde is None:
        tilde = H.mean(axis=(0, 1))
    else:
        H_tilde = _validate.as_float_array("H_tilde", H_tilde)
        if H_tilde.ndim != 3 or H_tilde.shape[1:] != H.shape[2:] or H_tilde.shape[0] == 0:
            raise InputError(f"H_tilde must have shape (K, {H.shape[-1]}, {H.shape[-1]}), got {H_tilde.shape}")
        tilde = H_tilde.mean(axis=0)
    mixed = (1.0 - p) * H.mean(axis=1) + p * tilde  # (..., N, d, d)
    return _spectral_norm(mixed).max(axis=-1)
