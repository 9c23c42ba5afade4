"""Argument checks shared by the theory modules: each raises InputError naming the argument."""

from __future__ import annotations

import numpy as np

from theory.errors import InputError


def as_float_array(name: str, value) -> np.ndarray:
    """``value`` as a float64 array; non-numeric or NaN input is an InputError naming ``name``."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if np.isnan(array).any():
        raise InputError(f"{name} must not be NaN")
    return array


def fraction(name: str, value) -> np.ndarray:
    """Check 0 <= value <= 1 elementwise (the shuffled fraction p)."""
    array = as_float_array(name, value)
    bad = (array < 0) | (array > 1)
    if bad.any():
        raise InputError(f"{name} must lie in [0, 1], got {_show(array, bad)}")
    return array


def nonnegative(name: str, value) -> np.ndarray:
    """Check value >= 0 elementwise (variances, dissimilarities, smoothness constants)."""
    array = as_float_array(name, value)
    bad = ~(np.isfinite(array) & (array >= 0))
    if bad.any():
        raise InputError(f"{name} must be finite and >= 0, got {_show(array, bad)}")
    return array


def positive(name: str, value) -> np.ndarray:
    """Check value > 0 elementwise (target accuracy eps, strong convexity mu)."""
    array = as_float_array(name, value)
    bad = ~(np.isfinite(array) & (array > 0))
    if bad.any():
        raise InputError(f"{name} must be finite and > 0, got {_show(array, bad)}")
    return array


def at_least_one(name: str, value) -> np.ndarray:
    """Check value >= 1 elementwise (number of clients N, local steps tau)."""
    array = as_float_array(name, value)
    bad = ~(np.isfinite(array) & (array >= 1))
    if bad.any():
        raise InputError(f"{name} must be finite and >= 1, got {_show(array, bad)}")
    return array


def scalar_fraction(name: str, value) -> float:
    """One fraction p in [0, 1] (functions that take a single p, e.g. a realised shuffle)."""
    array = fraction(name, value)
    if array.ndim != 0:
        raise InputError(f"{name} must be a single number here, got an array of shape {array.shape}")
    return float(array)


def count(name: str, value, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` (clients, samples, shuffles); 1.5 clients is an error, not 1."""
    array = as_float_array(name, value)
    if array.ndim != 0 or not np.isfinite(array) or array != np.round(array) or array < minimum:
        raise InputError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(array)


def _show(array: np.ndarray, bad: np.ndarray) -> str:
    """The offending values, at most three of them."""
    if array.ndim == 0:
        return f"{float(array):g}"
    values = array[bad]
    shown = ", ".join(f"{x:g}" for x in values[:3])
    return f"[{shown}, ...]" if values.size > 3 else f"[{shown}]"
