"""sims.quadratic.fedavg against FedAvg written out by hand: per client, per local step, per sample, in float64."""

import numpy as np
import pytest

from sims.quadratic import fedavg
from sims.quadratic.problem import Problem, make_problem, shuffle_problem

N, n, d = 3, 4, 2


def tiny_problem(p: float = 0.5, seed: int = 0) -> Problem:
    """N=3 clients (h = 1, 4, 9 before shuffling), n=4 samples, d=2; p > 0 mixes curvatures inside clients."""
    rng = np.random.default_rng(seed)
    base = make_problem(rng, n_clients=N, n_per_client=n, dim=d, zeta2=4.0, sigma2=1.0)
    return shuffle_problem(base, p, rng)


def optimum(h: np.ndarray, c: np.ndarray) -> np.ndarray:
    """x* from ∇f(x) = (1/(N n)) Σ_ij (h_ij x - c_ij) = 0, summed sample by sample."""
    num, den = np.zeros(c.shape[-1]), 0.0
    for i in range(h.shape[0]):
        for j in range(h.shape[1]):
            num += c[i, j]
            den += h[i, j]
    return num / den


def full_batch_round(h: np.ndarray, c: np.ndarray, x: np.ndarray, eta: float, tau: int) -> np.ndarray:
    """One FedAvg round: every client takes τ gradient steps on f_i(x) = 1/(2n) Σ_j (h_ij|x|² - 2c_ij·x + ...)."""
    clients = []
    for i in range(h.shape[0]):
        h_bar = sum(h[i, j] for j in range(h.shape[1])) / h.shape[1]
        c_bar = sum(c[i, j] for j in range(h.shape[1])) / h.shape[1]
        local = x.copy()
        for _ in range(tau):
            local = local - eta * (h_bar * local - c_bar)
        clients.append(local)
    return sum(clients) / len(clients)


def sq_dist(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum((x - y) ** 2))


# ---------------------------------------------------------------- full batch and the round map


@pytest.mark.parametrize("x0", [None, np.array([0.3, -0.7])])
def test_one_full_batch_round_equals_the_hand_loop(x0):
    problem = tiny_problem()
    etas = np.array([1e-3, 0.02, 0.1])
    tau = 5
    errors = fedavg.full_batch(problem, etas, tau=tau, rounds=1, x0=x0)
    assert errors.shape == (3, 2)
    start = np.zeros(d) if x0 is None else x0
    x_star = optimum(problem.h, problem.c)
    for e, eta in enumerate(etas):
        x1 = full_batch_round(problem.h, problem.c, start, eta, tau)
        assert errors[e, 0] == pytest.approx(sq_dist(start, x_star), rel=1e-12, abs=1e-15)
        assert errors[e, 1] == pytest.approx(sq_dist(x1, x_star), rel=1e-12, abs=1e-15)


def test_full_batch_follows_the_hand_loop_for_many_rounds():
    problem = tiny_problem(seed=1)
    etas, tau, rounds = np.array([0.01, 0.05]), 3, 40
    errors = fedavg.full_batch(problem, etas, tau=tau, rounds=rounds)
    x_star = optimum(problem.h, problem.c)
    for e, eta in enumerate(etas):
        x, expected = np.zeros(d), [sq_dist(np.zeros(d), x_star)]
        for _ in range(rounds):
            x = full_batch_round(problem.h, problem.c, x, eta, tau)
            expected.append(sq_dist(x, x_star))
        np.testing.assert_allclose(errors[e], expected, rtol=1e-10)


def test_the_round_map_has_fedavgs_biased_fixed_point():
    problem = tiny_problem(p=0.0, seed=2)  # unshuffled: client curvatures 1, 4, 9
    eta, tau = 0.01, 10
    x = np.zeros(d)
    for _ in range(5000):
        x = full_batch_round(problem.h, problem.c, x, eta, tau)
    alpha, beta = fedavg.round_map(problem, np.array([eta]), tau)
    x_inf = beta[0] / (1 - alpha[0])
    np.testing.assert_allclose(x, x_inf, rtol=1e-10)
    # The hand iteration has converged, and its limit is not x*: FedAvg's bias under heterogeneous curvature.
    np.testing.assert_allclose(full_batch_round(problem.h, problem.c, x, eta, tau), x, rtol=1e-13)
    x_star = optimum(problem.h, problem.c)
    bias = sq_dist(x_inf, x_star)
    assert bias > 1e-3 * np.sum(x_star**2)
    errors = fedavg.full_batch(problem, np.array([eta]), tau=tau, rounds=5000)
    assert errors[0, -1] == pytest.approx(bias, rel=1e-8)


def test_equal_curvatures_leave_no_bias():
    # Control for the test above: when every client has the same curvature, x_∞ = x* (the bias needs different h̄_i).
    rng = np.random.default_rng(3)
    h = np.full((N, n), 2.0)
    c = rng.standard_normal((N, n, d))
    problem = Problem(h=h, c=c)
    errors = fedavg.full_batch(problem, np.array([0.05]), tau=7, rounds=3000)
    assert errors[0, -1] < 1e-20 * np.sum(optimum(h, c) ** 2) + 1e-28


def test_full_batch_broadcasts_over_batch_axes():
    problems = [tiny_problem(p=q, seed=4) for q in (0.0, 0.5)]
    stacked = Problem(h=np.stack([q.h for q in problems]), c=np.stack([q.c for q in problems]))
    etas = np.array([0.01, 0.03])
    errors = fedavg.full_batch(stacked, etas, tau=4, rounds=12)
    assert errors.shape == (2, 2, 13)
    for b, q in enumerate(problems):
        np.testing.assert_allclose(errors[b], fedavg.full_batch(q, etas, tau=4, rounds=12), rtol=1e-12)


# ---------------------------------------------------------------- one epoch of single-sample SGD


def naive_epoch(
    h: np.ndarray, c: np.ndarray, etas: np.ndarray, rounds: int, rng: np.random.Generator, batch: int | None = None
) -> np.ndarray:
    """The authors' loop: each round a fresh random order per client, one pass of single-sample SGD, then average.

    Consumes the random stream as fedavg.epoch does with chunk=1: one ``rng.random((*batch, 1, N, n))`` per round,
    argsorted along the samples. ``batch``: number of problems stacked in front (h: (batch, N, n)), or None.
    """
    problems = [(h, c)] if batch is None else [(h[b], c[b]) for b in range(batch)]
    shape = (1, N, n) if batch is None else (batch, 1, N, n)
    x = [[np.zeros(d) for _ in etas] for _ in problems]
    x_star = [optimum(hb, cb) for hb, cb in problems]
    errors = np.empty((len(problems), len(etas), rounds + 1))
    for b in range(len(problems)):
        for e in range(len(etas)):
            errors[b, e, 0] = sq_dist(x[b][e], x_star[b])
    for t in range(1, rounds + 1):
        orders = np.argsort(rng.random(shape), axis=-1)
        orders = [orders[0]] if batch is None else [orders[b, 0] for b in range(batch)]
        for b, (hb, cb) in enumerate(problems):
            for e, eta in enumerate(etas):
                clients = []
                for i in range(N):
                    local = x[b][e].copy()
                    for j in orders[b][i]:
                        local = local - eta * (hb[i, j] * local - cb[i, j])
                    clients.append(local)
                x[b][e] = sum(clients) / N
                errors[b, e, t] = sq_dist(x[b][e], x_star[b])
    return errors[0] if batch is None else errors


def test_generator_random_in_one_call_equals_consecutive_calls():
    # fedavg.epoch draws rng.random((T, N, n)) per chunk of T rounds; chunking keeps the stream only if a bigger
    # draw is the concatenation of smaller ones (true for numpy's Generator.random on float64).
    whole = np.random.default_rng(9).random((7, N, n))
    rng = np.random.default_rng(9)
    parts = np.concatenate([rng.random((1, N, n)) for _ in range(7)])
    assert np.array_equal(whole, parts)


@pytest.mark.parametrize("chunk", [1, 7])
def test_epoch_equals_the_naive_per_sample_loop(chunk):
    problem = tiny_problem(p=0.5, seed=5)
    assert len(set(problem.h[0].tolist())) > 1  # the order of the samples matters inside a client
    etas = np.array([0.003, 0.03, 0.1])
    rounds = 20  # 20 = 2·7 + 6: the last chunk is a short one
    errors = fedavg.epoch(problem, etas, rounds, np.random.default_rng(42), chunk=chunk)
    expected = naive_epoch(problem.h, problem.c, etas, rounds, np.random.default_rng(42))
    assert errors.shape == (3, rounds + 1)
    np.testing.assert_allclose(errors, expected, rtol=1e-10)


def test_epoch_with_batch_axes_equals_the_naive_loop():
    problems = [tiny_problem(p=q, seed=6) for q in (0.25, 0.75)]
    stacked = Problem(h=np.stack([q.h for q in problems]), c=np.stack([q.c for q in problems]))
    etas = np.array([0.01, 0.08])
    errors = fedavg.epoch(stacked, etas, 9, np.random.default_rng(43), chunk=1)
    expected = naive_epoch(stacked.h, stacked.c, etas, 9, np.random.default_rng(43), batch=2)
    assert errors.shape == (2, 2, 10)
    np.testing.assert_allclose(errors, expected, rtol=1e-10)


def test_epoch_order_matters_when_curvatures_differ():
    # Guards the test above: a different random stream gives different errors (the comparison is not vacuous).
    problem = tiny_problem(p=0.5, seed=5)
    etas = np.array([0.1])
    first = fedavg.epoch(problem, etas, 5, np.random.default_rng(1))
    second = fedavg.epoch(problem, etas, 5, np.random.default_rng(2))
    assert not np.allclose(first[:, 1:], second[:, 1:], rtol=1e-6)


# ---------------------------------------------------------------- mini-batch SGD


def naive_minibatch(
    h: np.ndarray, c: np.ndarray, etas: np.ndarray, tau: int, rounds: int, batch_size: int, rng: np.random.Generator
) -> np.ndarray:
    """τ local steps per round, each on batch_size samples drawn with replacement; per step one
    ``rng.integers(0, n, size=(N, B))`` shared by every step size (common random numbers)."""
    x_star = optimum(h, c)
    x = [np.zeros(d) for _ in etas]
    errors = np.empty((len(etas), rounds + 1))
    errors[:, 0] = [sq_dist(xe, x_star) for xe in x]
    for t in range(1, rounds + 1):
        local = [[x[e].copy() for _ in range(N)] for e in range(len(etas))]
        for _ in range(tau):
            idx = rng.integers(0, n, size=(N, batch_size))
            for e, eta in enumerate(etas):
                for i in range(N):
                    h_b = sum(h[i, j] for j in idx[i]) / batch_size
                    c_b = sum(c[i, j] for j in idx[i]) / batch_size
                    local[e][i] = local[e][i] - eta * (h_b * local[e][i] - c_b)
        for e in range(len(etas)):
            x[e] = sum(local[e]) / N
            errors[e, t] = sq_dist(x[e], x_star)
    return errors


@pytest.mark.parametrize("batch_size", [1, 3, n])
def test_minibatch_equals_the_hand_loop_on_the_same_stream(batch_size):
    problem = tiny_problem(p=0.5, seed=7)
    etas = np.array([0.005, 0.05])
    errors = fedavg.minibatch(problem, etas, tau=3, rounds=6, batch_size=batch_size, rng=np.random.default_rng(44))
    expected = naive_minibatch(problem.h, problem.c, etas, 3, 6, batch_size, np.random.default_rng(44))
    np.testing.assert_allclose(errors, expected, rtol=1e-10)


# ---------------------------------------------------------------- rounds to reach ε


def test_rounds_to_reach_on_a_monotone_curve():
    errors = np.array([5.0, 3.0, 1.0, 0.5, 0.2])
    eps = np.array([10.0, 4.0, 1.0, 0.3, 0.2, 0.1])
    expected = [0, 1, 2, 4, 4, np.inf]  # first round t with error_t <= ε
    for mode in ("first", "stay"):
        assert fedavg.rounds_to_reach(errors, eps, mode).tolist() == expected


def test_rounds_to_reach_on_a_non_monotone_curve():
    errors = np.array([5.0, 0.5, 2.0, 0.4, 3.0, 0.3])
    eps = np.array([1.0, 0.5, 0.45, 0.35, 0.1])
    # first: the first dip below ε counts; stay: from that round on the error never exceeds ε again.
    assert fedavg.rounds_to_reach(errors, eps, "first").tolist() == [1, 1, 3, 5, np.inf]
    assert fedavg.rounds_to_reach(errors, eps, "stay").tolist() == [5, 5, 5, 5, np.inf]
    ends_high = np.array([1.0, 0.1, 2.0])
    assert fedavg.rounds_to_reach(ends_high, np.array([0.5]), "first").tolist() == [1]
    assert fedavg.rounds_to_reach(ends_high, np.array([0.5]), "stay").tolist() == [np.inf]


def test_rounds_to_reach_keeps_leading_axes():
    errors = np.array([[[4.0, 2.0, 1.0], [4.0, 4.0, 4.0]]])  # (1, 2, R+1)
    reached = fedavg.rounds_to_reach(errors, np.array([3.0, 1.5, 0.5]))
    assert reached.shape == (1, 2, 3)
    assert reached[0, 0].tolist() == [1, 2, np.inf]
    assert np.isinf(reached[0, 1]).all()


# ---------------------------------------------------------------- divergence


def check_diverged(errors: np.ndarray, expected: list[bool]) -> None:
    assert not np.isnan(errors).any()
    assert fedavg.diverged(errors).tolist() == expected
    for e, bad in enumerate(expected):
        if bad:
            assert np.isposinf(errors[e, -1])
        else:
            assert np.isfinite(errors[e]).all()


def test_diverging_step_sizes_give_inf_not_nan():
    problem = make_problem(np.random.default_rng(8), n_clients=10, n_per_client=5, dim=3)  # h up to 100
    etas = np.array([1e-4, 1e-3, 0.5, 30.0])  # 1 - 0.5·100 = -49: the last client blows up; 30 overflows fast
    expected = [False, False, True, True]
    check_diverged(fedavg.full_batch(problem, etas, tau=4, rounds=800), expected)
    check_diverged(fedavg.epoch(problem, etas, 300, np.random.default_rng(0)), expected)
    check_diverged(fedavg.minibatch(problem, etas, 4, 300, 2, np.random.default_rng(0)), expected)


def test_diverged_uses_growth_not_a_higher_end_point():
    errors = np.array([[1.0, 0.5, 2.0], [1.0, 10.0, 2e6], [1.0, np.inf, np.inf], [0.0, 0.0, 0.0]])
    assert fedavg.diverged(errors).tolist() == [False, True, True, False]
