"""FedAvgM against a hand-written float64 reference: Δ = x - Σ_S w_i y_i, v <- β v + Δ, x <- x - η_g v; with
β = 0 and η_g = 1 it is FedAvg."""

import pytest
import torch

from fl.algorithms import FedAvg, FedAvgM

ROUNDS, SEED, LR = 3, 3, 0.3


def reference_fedavgm(tiny, weighting, beta, server_lr):
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local(weighting)
    x = flat.params.detach().clone()
    v = torch.zeros_like(x)
    out = [(x, v)]
    for t in range(1, ROUNDS + 1):
        selected = list(range(data.n_clients))
        ys = [tiny.local_sgd(x, data, i, t, SEED, config, LR)[0] for i in selected]
        w = tiny.aggregation_weights(data, selected, weighting)
        v = beta * v + (x - sum(w_i * y_i for w_i, y_i in zip(w, ys)))
        x = x - server_lr * v
        out.append((x, v))
    return out


@pytest.mark.parametrize("weighting", ["size", "uniform"])
@pytest.mark.parametrize("beta, server_lr", [(0.9, 1.0), (0.5, 0.7), (0.0, 1.5)])
def test_fedavgm_matches_reference(tiny, weighting, beta, server_lr):
    states = tiny.run_engine(FedAvgM(beta=beta, server_lr=server_lr), tiny.local(weighting), ROUNDS, SEED, LR)
    expected = reference_fedavgm(tiny, weighting, beta, server_lr)
    assert set(states[0]["server"]) == {"v"} and states[0]["clients"] == {}
    assert torch.count_nonzero(states[0]["server"]["v"]) == 0
    for t in range(1, ROUNDS + 1):
        x, v = expected[t]
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["v"], v)
        assert states[t]["record"]["clients"] == [0, 1, 2]


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_fedavgm_without_momentum_is_fedavg(tiny, weighting):
    momentum = tiny.run_engine(FedAvgM(beta=0.0, server_lr=1.0), tiny.local(weighting), ROUNDS, SEED, LR)
    plain = tiny.run_engine(FedAvg(), tiny.local(weighting), ROUNDS, SEED, LR)
    for a, b in zip(momentum, plain):
        tiny.assert_close(a["x"], b["x"])


def test_momentum_changes_the_second_round(tiny):
    """Round 1 with v = 0 is η_g-scaled FedAvg; from round 2 on, β v makes a difference."""
    momentum = tiny.run_engine(FedAvgM(beta=0.9, server_lr=1.0), tiny.local(), 2, SEED, LR)
    plain = tiny.run_engine(FedAvg(), tiny.local(), 2, SEED, LR)
    tiny.assert_close(momentum[1]["x"], plain[1]["x"])
    assert (momentum[2]["x"] - plain[2]["x"]).abs().max() > 1e-6
