"""SCAFFOLD (option II) against a hand-written float64 reference, checking x, the server control variate c and
the clients' c_i after every round:

    local step   w <- w - η (g - c_i + c)
    client       c_i⁺ = c_i - c + (x - y_i)/(K η),  K = E·⌈n_i/B⌉
    server       x <- x + η_g (Σ_S w_i y_i - x),  c <- c + (|S|/N) mean_S (c_i⁺ - c_i)
"""

import math

import pytest
import torch

from fl.algorithms import FedAvg, Scaffold

ROUNDS, SEED, LR = 3, 5, 0.3


def reference_scaffold(tiny, weighting, server_lr):
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local(weighting)
    n_clients = data.n_clients
    x = flat.params.detach().clone()
    c = torch.zeros_like(x)
    ci = torch.zeros(n_clients, x.numel(), dtype=x.dtype)
    out = [(x, c, ci.clone())]
    for t in range(1, ROUNDS + 1):
        selected = list(range(n_clients))
        ys, new = [], []
        for i in selected:
            y, k = tiny.local_sgd(x, data, i, t, SEED, config, LR, lambda w, i=i, c=c: c - ci[i])
            assert k == config.epochs * math.ceil(len(data.train[i]) / config.batch_size)
            ys.append(y)
            new.append(ci[i] - c + (x - y) / (k * LR))
        w = tiny.aggregation_weights(data, selected, weighting)
        x_new = x + server_lr * (sum(w_i * y_i for w_i, y_i in zip(w, ys)) - x)
        c = c + (len(selected) / n_clients) * torch.stack([new[j] - ci[i] for j, i in enumerate(selected)]).mean(0)
        for j, i in enumerate(selected):
            ci[i] = new[j]
        x = x_new
        out.append((x, c, ci.clone()))
    return out


@pytest.mark.parametrize("weighting", ["size", "uniform"])
@pytest.mark.parametrize("server_lr", [1.0, 0.5])
def test_scaffold_matches_reference(tiny, weighting, server_lr):
    states = tiny.run_engine(Scaffold(server_lr=server_lr), tiny.local(weighting), ROUNDS, SEED, LR)
    expected = reference_scaffold(tiny, weighting, server_lr)
    assert set(states[0]["server"]) == {"c"} and set(states[0]["clients"]) == {"c"}
    assert states[0]["clients"]["c"].shape == (3, states[0]["x"].numel())
    assert states[0]["clients"]["c"].dtype == tiny.DTYPE
    for t in range(1, ROUNDS + 1):
        x, c, ci = expected[t]
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["c"], c)
        tiny.assert_close(states[t]["clients"]["c"], ci)
    assert torch.count_nonzero(states[-1]["server"]["c"]) > 0


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_scaffold_first_round_is_fedavg(tiny, weighting):
    scaffold = tiny.run_engine(Scaffold(), tiny.local(weighting), 2, SEED, LR)
    plain = tiny.run_engine(FedAvg(), tiny.local(weighting), 2, SEED, LR)
    tiny.assert_close(scaffold[1]["x"], plain[1]["x"])
    assert (scaffold[2]["x"] - plain[2]["x"]).abs().max() > 1e-6  # the control variates act from round 2 on


def test_scaffold_first_round_control_variates(tiny):
    """With c = c_i = 0: c_i⁺ = (x - y_i)/(K_i η) with K = 2·⌈(5, 8, 7)/3⌉ = (4, 6, 6), and c = mean_i c_i⁺."""
    states = tiny.run_engine(Scaffold(), tiny.local(), 1, SEED, LR)
    data, config = tiny.make_data(), tiny.local()
    x0 = states[0]["x"]
    expected = []
    for i, k in enumerate((4, 6, 6)):
        y, steps = tiny.local_sgd(x0, data, i, 1, SEED, config, LR)
        assert steps == k
        expected.append((x0 - y) / (k * LR))
    tiny.assert_close(states[1]["clients"]["c"], torch.stack(expected))
    tiny.assert_close(states[1]["server"]["c"], torch.stack(expected).mean(0))


def test_scaffold_communication(tiny):
    flat = tiny.make_flat()
    assert Scaffold().communication(flat.n_params, int(flat.head_mask.sum())) == 4 * flat.n_params == 60
