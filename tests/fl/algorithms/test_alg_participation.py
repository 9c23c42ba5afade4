"""Partial participation, C = 2/3 with N = 3: each round fl.engine.select_clients picks |S| = 2 clients, only they
train and update their state (the others' rows stay bit for bit), the weights are over S, SCAFFOLD's c moves by
(|S|/N)·mean_S(c_i⁺ - c_i) and FedDyn's h by α (1/N) Σ_S (y_k - x)."""

import pytest
import torch

from fl.algorithms import FedAvg, FedDyn, Scaffold
from fl.engine import select_clients

ROUNDS, SEED, LR, C = 3, 1, 0.3, 2 / 3


def selection(t, n_clients=3):
    selected = select_clients(SEED, t, n_clients, C).tolist()
    assert len(selected) == 2 and selected == sorted(set(selected))
    return selected


def test_selection_varies_and_is_reproducible():
    rounds = [selection(t) for t in range(1, ROUNDS + 1)]
    assert len({tuple(s) for s in rounds}) > 1
    assert rounds == [select_clients(SEED, t, 3, C).tolist() for t in range(1, ROUNDS + 1)]
    assert select_clients(SEED, 1, 3, 1.0).tolist() == [0, 1, 2]
    assert len(select_clients(SEED, 1, 3, 0.01)) == 1


def check_untouched(states, key):
    """Non-selected clients' rows are unchanged; at least once such a row is non-zero (the check has teeth)."""
    teeth = False
    for t in range(1, ROUNDS + 1):
        selected = states[t]["record"]["clients"]
        assert selected == selection(t)
        for i in set(range(3)) - set(selected):
            before, after = states[t - 1]["clients"][key][i], states[t]["clients"][key][i]
            assert torch.equal(before, after), f"round {t}: client {i} was not selected but its {key} changed"
            teeth |= bool(torch.count_nonzero(before))
    assert teeth


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_partial_fedavg(tiny, weighting):
    config = tiny.local(weighting, participation=C)
    states = tiny.run_engine(FedAvg(), config, ROUNDS, SEED, LR)
    data = tiny.make_data()
    x = states[0]["x"]
    for t in range(1, ROUNDS + 1):
        selected = selection(t)
        assert {k: states[t]["record"][k] for k in ("round", "clients")} == {"round": t, "clients": selected}
        ys = [tiny.local_sgd(x, data, i, t, SEED, config, LR)[0] for i in selected]
        w = tiny.aggregation_weights(data, selected, weighting)
        x = sum(w_i * y_i for w_i, y_i in zip(w, ys))
        tiny.assert_close(states[t]["x"], x)


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_partial_scaffold(tiny, weighting):
    config = tiny.local(weighting, participation=C)
    states = tiny.run_engine(Scaffold(), config, ROUNDS, SEED, LR)
    data = tiny.make_data()
    n_clients = data.n_clients
    x = states[0]["x"]
    c = torch.zeros_like(x)
    ci = torch.zeros(n_clients, x.numel(), dtype=x.dtype)
    for t in range(1, ROUNDS + 1):
        selected = selection(t)
        ys, new = [], []
        for i in selected:
            y, k = tiny.local_sgd(x, data, i, t, SEED, config, LR, lambda w, i=i, c=c: c - ci[i])
            ys.append(y)
            new.append(ci[i] - c + (x - y) / (k * LR))
        w = tiny.aggregation_weights(data, selected, weighting)
        x = sum(w_i * y_i for w_i, y_i in zip(w, ys))
        # |S|/N = 2/3 times the mean over S, i.e. (1/N) times the sum over S
        c = c + (2 / 3) * torch.stack([new[j] - ci[i] for j, i in enumerate(selected)]).mean(0)
        for j, i in enumerate(selected):
            ci[i] = new[j]
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["c"], c)
        tiny.assert_close(states[t]["clients"]["c"], ci)
        tiny.assert_close(c, ci.sum(0) / n_clients)  # option II keeps c = mean of all N c_i
    check_untouched(states, "c")


def test_partial_feddyn(tiny):
    alpha = 0.1
    config = tiny.local("size", participation=C)
    states = tiny.run_engine(FedDyn(alpha=alpha), config, ROUNDS, SEED, LR)
    data = tiny.make_data()
    n_clients = data.n_clients
    x = states[0]["x"]
    h = torch.zeros_like(x)
    g = torch.zeros(n_clients, x.numel(), dtype=x.dtype)
    for t in range(1, ROUNDS + 1):
        selected = selection(t)
        ys = []
        for i in selected:
            correction = lambda w, i=i, x=x: -g[i] + alpha * (w - x)  # noqa: E731
            ys.append(tiny.local_sgd(x, data, i, t, SEED, config, LR, correction)[0])
        for j, i in enumerate(selected):
            g[i] = g[i] - alpha * (ys[j] - x)
        h = h - alpha * sum(y - x for y in ys) / n_clients
        x = sum(ys) / len(ys) - h / alpha
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["h"], h)
        tiny.assert_close(states[t]["clients"]["g"], g)
    check_untouched(states, "g")
