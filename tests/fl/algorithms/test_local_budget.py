"""``train.local_budget = "real-steps"`` (fl.clients.client_budget): a client takes the K_i = E·⌈n_i/B⌉ steps of E
epochs over its own n_i samples whatever else it trains on (Fedssyn's authors keep the iterations when synthetic
data are added). Checked against the closed form, against the D_i-only run (the same steps, bit for bit when nothing
is added), in both backends, and from a run's config."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fl.algorithms.fedavg import FedAvg
from fl.clients import ClientSet, LocalConfig, batches, client_budget
from fl.config import load_config
from fl.engine import client_seed, init_state, run_round
from theory.errors import InputError


@pytest.mark.parametrize("n_own, expected", [(5, (2, 4)), (6, (2, 4)), (7, (2, 6)), (1, (2, 2)), (0, (0, 0))])
def test_real_steps_are_e_times_the_batches_of_d_i(n_own, expected):
    local = LocalConfig(epochs=2, batch_size=3, budget="real-steps")
    assert client_budget(local, n_own) == expected
    assert client_budget(dataclasses.replace(local, budget="epochs"), n_own) == (2, 0)  # E epochs of everything
    assert client_budget(dataclasses.replace(local, steps=9), n_own) == (2, 9)  # a fixed τ wins


def with_received(data: ClientSet, extra: int) -> ClientSet:
    """Each client's training set grown by ``extra`` samples of the pool beyond its own (its D_i stays original)."""
    n = len(data.y)
    x, y = torch.cat([data.x, data.x[:extra]]), torch.cat([data.y, data.y[:extra]])
    added = [n + torch.arange(extra) for _ in data.train]
    train = [torch.cat([t, a]) for t, a in zip(data.train, added)]
    return dataclasses.replace(data, x=x, y=y, train=train, received=added)


def server_model(tiny, data: ClientSet, local: LocalConfig) -> torch.Tensor:
    """FedAvg's server model after one round."""
    flat, algorithm = tiny.make_flat(body_params=True), FedAvg()
    state, _ = run_round(init_state(flat, algorithm, data.n_clients, 0.1), flat, algorithm, data, local, 4)
    return state.x


@pytest.mark.parametrize("backend", ["sequential", "batched"])
def test_a_client_with_added_data_keeps_its_d_i_steps(tiny, backend):
    data = tiny.make_data()  # n_i = 5, 8, 7; B = 3, E = 2: K_i = 4, 6, 6
    local = dataclasses.replace(tiny.local(), backend=backend)
    real = dataclasses.replace(local, budget="real-steps")
    grown = with_received(data, 9)
    for i, n in enumerate(len(t) for t in data.train):
        epochs, steps = client_budget(real, len(grown.original[i]))
        order = list(batches(grown.train[i], 3, torch.Generator().manual_seed(client_seed(4, 1, i)), epochs, steps))
        assert len(order) == 2 * -(-n // 3)  # E·⌈n_i/B⌉ batches, drawn over D_i and the added samples
        assert (torch.cat(order) >= len(data.y)).any()  # the added samples are trained on
        assert len(list(batches(grown.train[i], 3, torch.Generator(), 2))) == 2 * -(-(n + 9) // 3)  # "epochs"
    # with nothing added, "real-steps" is "epochs" bit for bit
    assert torch.equal(server_model(tiny, data, local), server_model(tiny, data, real))
    # with data added, the two budgets differ (more steps under "epochs")
    assert not torch.equal(server_model(tiny, grown, real), server_model(tiny, grown, local))


def test_the_backends_agree_under_real_steps(tiny):
    grown = with_received(tiny.make_data(), 9)
    real = dataclasses.replace(tiny.local(), budget="real-steps")
    sequential = server_model(tiny, grown, dataclasses.replace(real, backend="sequential"))
    batched = server_model(tiny, grown, dataclasses.replace(real, backend="batched"))
    torch.testing.assert_close(batched, sequential, rtol=1e-10, atol=1e-10)


def test_the_config_key_and_its_refusal():
    assert load_config(None, ["train.local_budget=real-steps"]).train.local_budget == "real-steps"
    assert load_config(None).train.local_budget == "epochs"
    with pytest.raises(InputError, match=r"train\.local_budget"):
        load_config(None, ["train.local_budget=steps"])
