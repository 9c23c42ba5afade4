"""shufflefl.theory: Lemma 1 and Corollary I of Fedssyn (synthetic data shuffling in FL), numerically and symbolically.

Pure math (numpy, scipy, sympy); imports nothing else of shufflefl. Modules:

- :mod:`theory.lemma1`: the bounds of Lemma 1 (σ̂²_p, ζ̂²_p, L_p; eq. 4 and D-2..D-4).
- :mod:`theory.corollary1`: Corollary I's iteration bounds T(p), term by term, and what follows from them.
- :mod:`theory.estimators`: exact σ², ζ², δ², L on finite problems, plain and under the mixture model.
- :mod:`theory.shuffle`: one realised finite shuffle (the paper's protocol) and its exact expected ζ̂².
- :mod:`theory.symbolic`: the appendix-D derivations re-checked with sympy, as LaTeX.

``python -m theory --help`` prints Lemma 1 and Corollary I for given constants.
"""

import theory.datafolder  # noqa: F401  (first: a data folder as working directory leaves sys.path)
from theory.corollary1 import (
    Constants,
    RateTerms,
    is_superlinear,
    iteration_bound,
    min_p_for_speedup,
    speedup,
)
from theory.errors import InputError
from theory.estimators import (
    Smoothness,
    client_gradients,
    delta2,
    mixture_client_gradients,
    mixture_L_p,
    mixture_sigma2,
    mixture_sigma2_per_client,
    mixture_zeta2,
    sigma2,
    sigma2_per_client,
    smoothness,
    zeta2,
)
from theory.lemma1 import L_p_bound, sigma2_hat_bound, zeta2_hat_bound
from theory.shuffle import expected_realised_zeta2, n_exchanged, shuffle_assignment, shuffle_samples

_SYMBOLIC = ("Derivation", "derivations", "lemma_latex")


def __getattr__(name: str):
    # sympy takes about a second to import: load theory.symbolic only when it is asked for.
    if name in _SYMBOLIC:
        from theory import symbolic

        return getattr(symbolic, name)
    raise AttributeError(f"module 'theory' has no attribute {name!r}")


__all__ = [
    "Constants",
    "Derivation",
    "InputError",
    "L_p_bound",
    "RateTerms",
    "Smoothness",
    "client_gradients",
    "delta2",
    "derivations",
    "expected_realised_zeta2",
    "is_superlinear",
    "iteration_bound",
    "lemma_latex",
    "min_p_for_speedup",
    "mixture_L_p",
    "mixture_client_gradients",
    "mixture_sigma2",
    "mixture_sigma2_per_client",
    "mixture_zeta2",
    "n_exchanged",
    "shuffle_assignment",
    "shuffle_samples",
    "sigma2",
    "sigma2_hat_bound",
    "sigma2_per_client",
    "smoothness",
    "speedup",
    "zeta2",
    "zeta2_hat_bound",
]
