"""FedProx against a hand-written float64 reference: every local step adds μ(w - x); μ = 0 is FedAvg exactly."""

import pytest
import torch

from fl.algorithms import Context, FedAvg, FedProx

ROUNDS, SEED, LR = 3, 11, 0.3


def reference_fedprox(tiny, weighting, mu):
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local(weighting)
    x = flat.params.detach().clone()
    xs = [x]
    for t in range(1, ROUNDS + 1):
        selected = list(range(data.n_clients))
        ys = [tiny.local_sgd(x, data, i, t, SEED, config, LR, lambda w, x=x: mu * (w - x))[0] for i in selected]
        w = tiny.aggregation_weights(data, selected, weighting)
        x = sum(w_i * y_i for w_i, y_i in zip(w, ys))
        xs.append(x)
    return xs


@pytest.mark.parametrize("weighting", ["size", "uniform"])
@pytest.mark.parametrize("mu", [0.1, 1.0])
def test_fedprox_matches_reference(tiny, weighting, mu):
    states = tiny.run_engine(FedProx(mu=mu), tiny.local(weighting), ROUNDS, SEED, LR)
    expected = reference_fedprox(tiny, weighting, mu)
    for t in range(1, ROUNDS + 1):
        assert states[t]["server"] == {} and states[t]["clients"] == {}
        tiny.assert_close(states[t]["x"], expected[t])


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_fedprox_mu_zero_is_fedavg_exactly(tiny, weighting):
    prox = tiny.run_engine(FedProx(mu=0.0), tiny.local(weighting), ROUNDS, SEED, LR)
    plain = tiny.run_engine(FedAvg(), tiny.local(weighting), ROUNDS, SEED, LR)
    for a, b in zip(prox, plain):
        assert torch.equal(a["x"], b["x"])


def test_fedprox_pulls_towards_x(tiny):
    """A large μ keeps every local model nearer the server model, so the round moves x less."""
    x0 = tiny.run_engine(FedAvg(), tiny.local(), 0, SEED, LR)[0]["x"]
    steps = [(tiny.run_engine(FedProx(mu=mu), tiny.local(), 1, SEED, LR)[1]["x"] - x0).norm() for mu in (0, 0.5, 2)]
    assert steps[0] > steps[1] > steps[2] > 0


def test_fedprox_correction_formula(tiny):
    x = torch.arange(5, dtype=tiny.DTYPE)
    w = x.flip(0)
    ctx = Context(x, {}, {}, torch.ones(5, dtype=torch.bool))
    torch.testing.assert_close(FedProx(mu=0.25).correction(w, ctx), 0.25 * (w - x))
    assert FedProx(mu=0.0).correction(w, ctx) is None
