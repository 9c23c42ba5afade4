"""Lemma 1 of Fedssyn (NeurIPS version, eq. (4); proofs D-2, D-3, D-4 in appendix D): the bounds.

Notation (fedssyn_neurips.txt, Sec. 2 and Table D.1):

- ``p``: the fraction of each client's data that is shuffled, p in [0, 1]. The shuffled client distribution is
  the mixture D̂_i = (1-p) D_i + p D̃ (Sec. 2.1), hence f̂_i = (1-p) f_i + p f̃ (eq. D.2b).
- ``zeta2``: ζ², gradient dissimilarity, E_i ||∇f_i(x) - ∇f(x)||² <= ζ² (Assumption 1, eq. 2).
- ``sigma2``: σ², stochastic noise on the clients' own data, E ||∇F_i(x; ξ) - ∇f_i(x)||² <= σ² (Assumption 2, eq. 3).
- ``sigma2_tilde``: σ̃², stochastic noise on the shuffled data D̃ (the p = 1 noise).
- ``delta2``: δ² := ||∇f(x) - ∇f̃(x)||², how far the shuffled distribution D̃ is from the real one (D-3);
  zero when D̃ is the uniform mix of the clients' real data, positive for synthetic data.
- ``L_max``, ``L_avg``: the largest client smoothness and the average smoothness (D-4).

Every function broadcasts over numpy arrays (p, or any constant) and returns a float64 array (0-d for scalars).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory import _validate
from theory.errors import InputError


def zeta2_hat_bound(p: ArrayLike, zeta2: ArrayLike) -> np.ndarray:
    """Shuffled gradient dissimilarity bound ζ̂²_p <= (1-p)² ζ² (Lemma D-2, eq. D.4).

    Equality holds when every client mixes in the same D̃ (the uniform mix of all clients' data).

    >>> float(zeta2_hat_bound(0.5, 4.0))
    1.0
    """
    p = _validate.fraction("p", p)
    zeta2 = _validate.nonnegative("zeta2", zeta2)
    return (1.0 - p) ** 2 * zeta2


def sigma2_hat_bound(
    p: ArrayLike,
    sigma2: ArrayLike,
    zeta2: ArrayLike,
    sigma2_tilde: ArrayLike | None = None,
    delta2: ArrayLike = 0.0,
) -> np.ndarray:
    """Shuffled stochastic noise bound (Lemma D-3, eq. D.6).

    E σ̂²_p <= (1-p) σ² + p σ̃² + p(1-p) ζ² + p(1-p) δ².

    ``sigma2_tilde`` defaults to ``sigma2``; ``delta2`` defaults to 0 (real data shuffled, D̃ = uniform mix).
    The bound is an identity when σ² is the client-averaged noise (see ``theory.estimators``).

    >>> float(sigma2_hat_bound(0.5, sigma2=0.0, zeta2=4.0))
    1.0
    """
    p = _validate.fraction("p", p)
    sigma2 = _validate.nonnegative("sigma2", sigma2)
    zeta2 = _validate.nonnegative("zeta2", zeta2)
    sigma2_tilde = sigma2 if sigma2_tilde is None else _validate.nonnegative("sigma2_tilde", sigma2_tilde)
    delta2 = _validate.nonnegative("delta2", delta2)
    return (1.0 - p) * sigma2 + p * sigma2_tilde + p * (1.0 - p) * (zeta2 + delta2)


def L_p_bound(p: ArrayLike, L_max: ArrayLike, L_avg: ArrayLike) -> np.ndarray:
    """Shuffled smoothness bound L_p <= (1-p) L_max + p L_avg (Lemma D-4).

    L_max is the largest smoothness constant among the client objectives f_i; L_avg the smoothness of the global
    objective f (Lemma D-4), which is at most the average of the clients' constants (Sec. 2.3 uses the latter).

    >>> float(L_p_bound(0.5, L_max=100.0, L_avg=38.5))
    69.25
    """
    p = _validate.fraction("p", p)
    L_max = _validate.nonnegative("L_max", L_max)
    L_avg = _validate.nonnegative("L_avg", L_avg)
    if (L_avg > L_max * (1 + 1e-12)).any():  # tolerance: a mean of equal values can exceed them by an ulp
        raise InputError("L_avg must not exceed L_max (the average cannot exceed the maximum)")
    return (1.0 - p) * L_max + p * L_avg
