"""FedAvg through fl.engine.run_round against a hand-written float64 reference: x <- Σ_S w_i y_i with
w_i = n_i/Σ_S n_j ("size") or 1/|S| ("uniform"), over three rounds; plus the engine's local-step count and
batch order."""

import math

import pytest
import torch

import fl.engine
from fl.algorithms import FedAvg
from fl.clients import LocalConfig
from fl.engine import init_state, local_train

ROUNDS, SEED, LR = 3, 7, 0.3


def reference_fedavg(tiny, weighting):
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local(weighting)
    x = flat.params.detach().clone()
    xs = [x]
    for t in range(1, ROUNDS + 1):
        selected = list(range(data.n_clients))
        ys = [tiny.local_sgd(x, data, i, t, SEED, config, LR)[0] for i in selected]
        w = tiny.aggregation_weights(data, selected, weighting)
        x = sum(w_i * y_i for w_i, y_i in zip(w, ys))
        xs.append(x)
    return xs


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_fedavg_matches_reference(tiny, weighting):
    states = tiny.run_engine(FedAvg(), tiny.local(weighting), ROUNDS, SEED, LR)
    expected = reference_fedavg(tiny, weighting)
    tiny.assert_close(states[0]["x"], expected[0])
    for t in range(1, ROUNDS + 1):
        assert states[t]["round"] == t + 1
        assert {k: states[t]["record"][k] for k in ("round", "clients")} == {"round": t, "clients": [0, 1, 2]}
        assert states[t]["server"] == {} and states[t]["clients"] == {}
        tiny.assert_close(states[t]["x"], expected[t])
    assert not torch.equal(states[-1]["x"], states[0]["x"])


def test_size_and_uniform_weighting_differ(tiny):
    """The sizes differ, so the two weightings must give different models (the choice is really used)."""
    size = tiny.run_engine(FedAvg(), tiny.local("size"), 1, SEED, LR)[-1]["x"]
    uniform = tiny.run_engine(FedAvg(), tiny.local("uniform"), 1, SEED, LR)[-1]["x"]
    assert (size - uniform).abs().max() > 1e-6


def test_seed_changes_batch_order(tiny):
    a = tiny.run_engine(FedAvg(), tiny.local(), 1, SEED, LR)[-1]["x"]
    b = tiny.run_engine(FedAvg(), tiny.local(), 1, SEED + 1, LR)[-1]["x"]
    c = tiny.run_engine(FedAvg(), tiny.local(), 1, SEED, LR)[-1]["x"]
    assert (a - b).abs().max() > 1e-8
    assert torch.equal(a, c)


def test_local_train_steps_and_batches(tiny):
    """K = E·⌈n_i/B⌉; each epoch is a fresh permutation of the client's indices cut into batches of B (last one
    smaller), and the correction sees the parameters before each step."""
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local()
    for i, n in enumerate(tiny.SIZES):
        seen = []
        flat.load(init_state(flat, FedAvg(), data.n_clients, LR).x)
        x0 = flat.params.clone()
        steps = local_train(
            flat,
            (data.x, data.y, data.train[i]),
            LocalConfig(epochs=config.epochs, batch_size=config.batch_size),
            LR,
            lambda w, seen=seen: seen.append(w.clone()),
            torch.Generator().manual_seed(fl.engine.client_seed(SEED, 1, i)),
        )
        assert steps == config.epochs * math.ceil(n / config.batch_size) == len(seen)
        tiny.assert_close(seen[0], x0)
        y_ref, k_ref = tiny.local_sgd(x0, data, i, 1, SEED, config, LR)
        assert k_ref == steps
        tiny.assert_close(flat.params, y_ref)


def test_reference_batches_cover_each_epoch(tiny):
    """Sanity of the reference's batching: per epoch the batches partition the client's indices, sizes 3,3,..,r."""
    data, config = tiny.make_data(), tiny.local()
    index = data.train[1]
    generator = torch.Generator().manual_seed(fl.engine.client_seed(SEED, 1, 1))
    for _ in range(config.epochs):
        order = index[torch.randperm(len(index), generator=generator)]
        batches = [order[s : s + config.batch_size] for s in range(0, len(order), config.batch_size)]
        assert [len(b) for b in batches] == [3, 3, 2]
        assert torch.equal(torch.cat(batches).sort().values, index.sort().values)
