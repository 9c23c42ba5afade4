"""Bad input to every public function of ``theory``: an InputError (a ValueError) whose message names the argument.

Messages start with the argument's name ("p must lie in [0, 1], got 1.5"), which is what is checked here.
"""

import inspect
import itertools

import numpy as np
import pytest

import theory
from theory import Constants, InputError

GOOD = {"zeta2": 1.0, "sigma2": 0.5, "L_max": 100.0, "L_avg": 38.5, "tau": 10, "N": 10, "mu": 1.0}
C = Constants(**GOOD)
G = np.arange(12.0).reshape(2, 3, 2) ** 0.5  # per-sample gradients: N = 2 clients, n = 3 samples, d = 2
H = np.broadcast_to(np.eye(2), (2, 3, 2, 2)) * np.arange(1.0, 3.0)[:, None, None, None]  # per-sample Hessians


def rng():
    return np.random.default_rng(0)


# name in theory.__all__ -> a call with the fraction p given
WITH_P = {
    "zeta2_hat_bound": lambda p: theory.zeta2_hat_bound(p, 1.0),
    "sigma2_hat_bound": lambda p: theory.sigma2_hat_bound(p, 1.0, 1.0),
    "L_p_bound": lambda p: theory.L_p_bound(p, 100.0, 38.5),
    "iteration_bound": lambda p: theory.iteration_bound(p, 1e-6, C),
    "speedup": lambda p: theory.speedup(p, 1e-6, C),
    "is_superlinear": lambda p: theory.is_superlinear(p, 1e-6, C),
    "mixture_client_gradients": lambda p: theory.mixture_client_gradients(G, p),
    "mixture_zeta2": lambda p: theory.mixture_zeta2(G, p),
    "mixture_sigma2": lambda p: theory.mixture_sigma2(G, p),
    "mixture_sigma2_per_client": lambda p: theory.mixture_sigma2_per_client(G, p),
    "mixture_L_p": lambda p: theory.mixture_L_p(H, p),
    "n_exchanged": lambda p: theory.n_exchanged(3, p),
    "shuffle_assignment": lambda p: theory.shuffle_assignment(2, 3, p, rng()),
    "shuffle_samples": lambda p: theory.shuffle_samples(G, p, rng()),
    "expected_realised_zeta2": lambda p: theory.expected_realised_zeta2(G, p),
}
BAD_P = [1.5, -0.1, np.inf, np.nan, [0.2, 1.01], [-1e-9, 0.5], [0.5, np.nan], "abc"]


@pytest.mark.parametrize(("function", "p"), list(itertools.product(WITH_P, BAD_P)))
def test_p_outside_the_unit_interval(function, p):
    with pytest.raises(InputError, match=r"^p must"):
        WITH_P[function](p)


@pytest.mark.parametrize("function", WITH_P)
def test_p_at_the_ends_of_the_interval_is_accepted(function):
    """The checks are not too strict: p = 0 and p = 1 are valid (no shuffling, everything shuffled)."""
    WITH_P[function](0.0)
    WITH_P[function](1.0)


def constants_with(**changes):
    return Constants(**GOOD | changes)


# (function in theory.__all__, call, the argument's name)
CASES = [
    # negative (or infinite) variances
    ("zeta2_hat_bound", lambda: theory.zeta2_hat_bound(0.5, -1.0), "zeta2"),
    ("zeta2_hat_bound", lambda: theory.zeta2_hat_bound(0.5, [1.0, -1e-12]), "zeta2"),
    ("sigma2_hat_bound", lambda: theory.sigma2_hat_bound(0.5, -1.0, 1.0), "sigma2"),
    ("sigma2_hat_bound", lambda: theory.sigma2_hat_bound(0.5, 1.0, -1.0), "zeta2"),
    ("sigma2_hat_bound", lambda: theory.sigma2_hat_bound(0.5, 1.0, 1.0, sigma2_tilde=-2.0), "sigma2_tilde"),
    ("sigma2_hat_bound", lambda: theory.sigma2_hat_bound(0.5, 1.0, 1.0, delta2=-2.0), "delta2"),
    ("sigma2_hat_bound", lambda: theory.sigma2_hat_bound(0.5, np.inf, 1.0), "sigma2"),
    ("Constants", lambda: constants_with(zeta2=-1.0), "zeta2"),
    ("Constants", lambda: constants_with(sigma2=-1.0), "sigma2"),
    ("Constants", lambda: constants_with(sigma2_tilde=-1.0), "sigma2_tilde"),
    ("Constants", lambda: constants_with(delta2=-1.0), "delta2"),
    ("Constants", lambda: constants_with(sigma2_hat=-1.0), "sigma2_hat"),
    ("Constants", lambda: constants_with(sigma2=np.nan), "sigma2"),
    ("Constants", lambda: constants_with(zeta2="abc"), "zeta2"),
    # eps <= 0
    ("iteration_bound", lambda: theory.iteration_bound(0.5, 0.0, C), "eps"),
    ("iteration_bound", lambda: theory.iteration_bound(0.5, -1e-3, C), "eps"),
    ("iteration_bound", lambda: theory.iteration_bound(0.5, [1e-3, 0.0], C), "eps"),
    ("iteration_bound", lambda: theory.iteration_bound(0.5, np.nan, C), "eps"),
    ("speedup", lambda: theory.speedup(0.5, 0.0, C), "eps"),
    ("is_superlinear", lambda: theory.is_superlinear(0.5, -1.0, C), "eps"),
    ("min_p_for_speedup", lambda: theory.min_p_for_speedup(2.0, 0.0, C), "eps"),
    # N < 1, tau < 1, mu <= 0, L_max <= 0, L_avg > L_max
    ("Constants", lambda: constants_with(N=0), "N"),
    ("Constants", lambda: constants_with(N=0.5), "N"),
    ("Constants", lambda: constants_with(tau=0), "tau"),
    ("Constants", lambda: constants_with(tau=0.5), "tau"),
    ("Constants", lambda: constants_with(tau=np.inf), "tau"),
    ("Constants", lambda: constants_with(mu=0), "mu"),
    ("Constants", lambda: constants_with(mu=-1.0), "mu"),
    ("Constants", lambda: constants_with(L_max=0.0, L_avg=0.0), "L_max"),
    ("Constants", lambda: constants_with(L_max=-1.0), "L_max"),
    ("Constants", lambda: constants_with(L_avg=-1.0), "L_avg"),
    ("Constants", lambda: constants_with(L_avg=200.0), "L_avg"),
    ("Constants", lambda: constants_with(L_max=[100.0, 10.0], L_avg=[50.0, 20.0]), "L_avg"),
    ("L_p_bound", lambda: theory.L_p_bound(0.5, -1.0, 0.0), "L_max"),
    ("L_p_bound", lambda: theory.L_p_bound(0.5, 100.0, -1.0), "L_avg"),
    ("L_p_bound", lambda: theory.L_p_bound(0.5, 10.0, 20.0), "L_avg"),
    ("L_p_bound", lambda: theory.L_p_bound(0.5, [100.0, 10.0], [50.0, 20.0]), "L_avg"),
    # Corollary I's other arguments
    ("iteration_bound", lambda: theory.iteration_bound(0.5, 1e-6, C, "convex"), "convexity"),
    ("speedup", lambda: theory.speedup(0.5, 1e-6, C, "convex"), "convexity"),
    ("is_superlinear", lambda: theory.is_superlinear(0.5, 1e-6, C, "convex"), "convexity"),
    ("min_p_for_speedup", lambda: theory.min_p_for_speedup(2.0, 1e-6, C, "convex"), "convexity"),
    ("min_p_for_speedup", lambda: theory.min_p_for_speedup(0.0, 1e-6, C), "target"),
    ("min_p_for_speedup", lambda: theory.min_p_for_speedup(np.nan, 1e-6, C), "target"),
    # wrongly shaped or empty G / G_tilde / H / H_tilde
    ("client_gradients", lambda: theory.client_gradients(np.ones((2, 3))), "G"),
    ("zeta2", lambda: theory.zeta2(np.ones((2, 3))), "G"),
    ("zeta2", lambda: theory.zeta2(np.ones((2, 0, 2))), "G"),
    ("sigma2", lambda: theory.sigma2(np.ones((2, 3, 2, 1))), "G"),
    ("sigma2_per_client", lambda: theory.sigma2_per_client(np.ones(3)), "G"),
    ("sigma2_per_client", lambda: theory.sigma2_per_client(np.full((2, 3, 2), np.nan)), "G"),
    ("delta2", lambda: theory.delta2(np.ones((2, 3)), np.ones((3, 2))), "G"),
    ("delta2", lambda: theory.delta2(G, np.ones((3, 3))), "G_tilde"),
    ("delta2", lambda: theory.delta2(G, np.ones((3, 4, 2))), "G_tilde"),
    ("delta2", lambda: theory.delta2(G, np.ones((0, 2))), "G_tilde"),
    ("delta2", lambda: theory.delta2(G, np.ones(2)), "G_tilde"),
    ("mixture_client_gradients", lambda: theory.mixture_client_gradients(np.ones((2, 3)), 0.5), "G"),
    ("mixture_client_gradients", lambda: theory.mixture_client_gradients(G, 0.5, np.ones((3, 3))), "G_tilde"),
    ("mixture_zeta2", lambda: theory.mixture_zeta2(G, 0.5, np.ones((3, 4, 2))), "G_tilde"),
    ("mixture_sigma2", lambda: theory.mixture_sigma2(G, 0.5, np.ones((2, 0, 2))), "G_tilde"),
    ("mixture_sigma2_per_client", lambda: theory.mixture_sigma2_per_client(np.ones((1, 2)), 0.5), "G"),
    ("mixture_sigma2_per_client", lambda: theory.mixture_sigma2_per_client(G, 0.5, np.ones((4, 3))), "G_tilde"),
    ("smoothness", lambda: theory.smoothness(np.ones((2, 3, 2))), "H"),
    ("smoothness", lambda: theory.smoothness(np.ones((2, 3, 2, 3))), "H"),
    ("smoothness", lambda: theory.smoothness(np.ones((2, 0, 2, 2))), "H"),
    ("mixture_L_p", lambda: theory.mixture_L_p(np.ones((2, 2, 2)), 0.5), "H"),
    ("mixture_L_p", lambda: theory.mixture_L_p(H, 0.5, np.ones((3, 3, 3))), "H_tilde"),
    ("mixture_L_p", lambda: theory.mixture_L_p(H, 0.5, np.ones((0, 2, 2))), "H_tilde"),
    ("expected_realised_zeta2", lambda: theory.expected_realised_zeta2(np.ones((2, 3)), 0.5), "G"),
    # shuffles
    ("shuffle_assignment", lambda: theory.shuffle_assignment(0, 3, 0.5, rng()), "n_clients"),
    ("shuffle_assignment", lambda: theory.shuffle_assignment(2, 0, 0.5, rng()), "n_per_client"),
    ("shuffle_assignment", lambda: theory.shuffle_assignment(2, 3, 0.5, rng(), shuffles=0), "shuffles"),
    ("shuffle_samples", lambda: theory.shuffle_samples(np.ones(3), 0.5, rng()), "samples"),
    ("shuffle_samples", lambda: theory.shuffle_samples(np.ones((0, 3)), 0.5, rng()), "samples"),
    # the symbolic derivations' problem sizes
    ("derivations", lambda: theory.derivations(N=0), "N"),
    ("derivations", lambda: theory.derivations(m=0), "m"),
    ("lemma_latex", lambda: theory.lemma_latex(d=0), "d"),
]


@pytest.mark.parametrize(("function", "call", "name"), CASES, ids=[f"{f}-{n}-{i}" for i, (f, _, n) in enumerate(CASES)])
def test_bad_input_raises_input_error_naming_the_argument(function, call, name):
    with pytest.raises(InputError, match=rf"^{name} must") as info:
        call()
    assert isinstance(info.value, ValueError)  # callers that only know the standard library can catch it


def test_min_p_for_speedup_needs_scalars():
    with pytest.raises(InputError, match="scalar constants and a scalar eps"):
        theory.min_p_for_speedup(2.0, 1e-6, constants_with(zeta2=[1.0, 2.0]))
    with pytest.raises(InputError, match="scalar constants and a scalar eps"):
        theory.min_p_for_speedup(2.0, [1e-6], C)


def test_input_error_is_a_value_error():
    assert issubclass(InputError, ValueError)


# Public names that take no user input to validate: the exception itself and result containers.
NOT_VALIDATING = {"InputError", "RateTerms", "Smoothness", "Derivation"}


def test_every_public_function_is_covered():
    """Adding a public function to theory.__all__ without a bad-input case here makes this test fail."""
    covered = set(WITH_P) | {function for function, _, _ in CASES}
    public = {name for name in theory.__all__ if callable(getattr(theory, name))} - NOT_VALIDATING
    assert public - covered == set()
    assert covered <= set(theory.__all__)
    assert all(inspect.isclass(getattr(theory, name)) for name in NOT_VALIDATING)


# --- gaps a helper found in the package's checks (now fixed): regression tests ---


@pytest.mark.parametrize(
    "function", ["n_exchanged", "shuffle_assignment", "shuffle_samples", "expected_realised_zeta2"]
)
def test_scalar_p_functions_reject_an_array_p(function):
    with pytest.raises(InputError, match=r"^p "):
        WITH_P[function]([0.2, 0.3])


@pytest.mark.parametrize("n", [-5, 2.5])
def test_n_exchanged_checks_n(n):
    with pytest.raises(InputError, match=r"^n "):
        theory.n_exchanged(n, 0.5)


@pytest.mark.parametrize(("n_clients", "n_per_client"), [(1.5, 3), (2, 3.7)])
def test_shuffle_assignment_rejects_fractional_counts(n_clients, n_per_client):
    with pytest.raises(InputError, match=r"^n_"):
        theory.shuffle_assignment(n_clients, n_per_client, 0.5, rng())
