"""The batched backend (fl.batched: all participants at once through torch.func vmap) gives the sequential
backend's result in float64: every algorithm, two rounds, clients of unequal size (5, 8, 7, 11 samples with B = 3,
so they take different numbers of steps and end epochs on short batches), partial participation, with momentum,
Adam, weight decay and τ local steps; the same batch order per (seed, round, client); one-line fallbacks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from fl.algorithms import ALGORITHMS
from fl.batched import plan, unbatchable
from fl.clients import LocalConfig, batches
from fl.config import build_algorithm
from fl.engine import client_seed, init_state, run_round

SIZES = (5, 8, 7, 11)
PARAMS = {"fedprox": {"mu": 0.1}, "feddyn": {"alpha": 0.1}, "fedavgm": {"beta": 0.9}}
TOL = {"rtol": 1e-10, "atol": 1e-10}


def run(tiny, algorithm, local, rounds=2, seed=3):
    flat = tiny.make_flat(body_params=True)
    data = tiny.make_data(SIZES)
    state = init_state(flat, algorithm, data.n_clients, 0.2)
    records = []
    for _ in range(rounds):
        state, record = run_round(state, flat, algorithm, data, local, seed)
        records.append(record)
    return state, records


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"momentum": 0.9, "weight_decay": 0.01},
        {"optimizer": "adam", "steps": 5},
        {"weighting": "uniform", "chunk": 2},
    ],
    ids=["sgd", "momentum-wd", "adam-tau", "uniform-chunked"],
)
def test_batched_equals_sequential(tiny, name, options):
    algorithm = build_algorithm({"name": name, **PARAMS.get(name, {})})
    base = LocalConfig(epochs=2, batch_size=3, participation=0.75, **options)
    seq_state, seq_records = run(tiny, algorithm, dataclasses.replace(base, backend="sequential"))
    bat_state, bat_records = run(tiny, algorithm, dataclasses.replace(base, backend="batched"))
    assert [r["backend"] for r in bat_records] == ["batched", "batched"]
    assert [r["clients"] for r in seq_records] == [r["clients"] for r in bat_records]
    assert len(seq_records[0]["clients"]) == 3  # partial participation: 3 of 4
    torch.testing.assert_close(bat_state.x, seq_state.x, **TOL)
    assert not torch.equal(seq_state.x, init_state(tiny.make_flat(True), algorithm, 4, 0.2).x)
    for key in algorithm.server_keys:
        torch.testing.assert_close(bat_state.server[key], seq_state.server[key], **TOL)
    for key in algorithm.client_keys:
        torch.testing.assert_close(bat_state.clients[key], seq_state.clients[key], **TOL)


def test_plan_repeats_the_sequential_batch_order(tiny):
    data = tiny.make_data(SIZES)
    make = lambda: [torch.Generator().manual_seed(client_seed(0, 1, i)) for i in range(4)]  # noqa: E731
    index, weight, counts = plan(data.train, 3, make(), [(2, 0)] * len(data.train))
    assert counts.tolist() == [4, 6, 6, 8]  # 2 epochs of ceil(n_i / 3)
    for i, generator in enumerate(make()):
        expected = list(batches(data.train[i], 3, generator, 2))
        for s, batch in enumerate(expected):
            n = len(batch)
            assert index[s, i, :n].tolist() == batch.tolist() and weight[s, i].tolist() == [1] * n + [0] * (3 - n)
        assert weight[len(expected) :, i].sum() == 0  # past its K_i steps: masked


def test_unbatchable_says_why_in_one_line():
    plain = nn.Sequential(nn.Linear(2, 2))
    assert unbatchable(plain, [None, None], explicit=True) is None
    for model, tasks, explicit in [
        (plain, [None, object()], True),
        (nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), [None], True),
        (nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)), [None], False),
    ]:
        reason = unbatchable(model, tasks, explicit)
        assert reason and "\n" not in reason
    assert unbatchable(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)), [None], explicit=True) is None


def test_auto_is_sequential_on_the_cpu_and_a_method_task_falls_back(tiny):
    algorithm = build_algorithm({"name": "fedavg"})
    _, records = run(tiny, algorithm, LocalConfig(epochs=1, batch_size=3, backend="auto"), rounds=1)
    assert records[0]["backend"] == "sequential" and "backend_note" not in records[0]

    class WithTask:
        """A method whose clients each get an objective: batched training cannot take it."""

        def __getattr__(self, name):
            from fl.methods import Method

            return getattr(Method(), name)

        def before_client(self, c):
            return type("Task", (), {"loss": lambda self, model, x, y: nn.functional.cross_entropy(model(x), y)})()

    flat = tiny.make_flat(body_params=True)
    data = tiny.make_data(SIZES)
    state = init_state(flat, algorithm, data.n_clients, 0.2)
    _, record = run_round(state, flat, algorithm, data, LocalConfig(batch_size=3, backend="batched"), 0, WithTask())
    assert record["backend"] == "sequential" and "objective" in record["backend_note"]


@pytest.mark.parametrize("backend", ["sequential", "batched"])
def test_client_states_kept_in_host_memory_give_the_same_run(tiny, backend):
    """train.client_state = "host": the (N, P) states stay in host memory, only participants' rows move."""
    algorithm = build_algorithm({"name": "scaffold"})
    base = LocalConfig(epochs=1, batch_size=3, participation=0.75, backend=backend)
    device_state, _ = run(tiny, algorithm, base)
    flat = tiny.make_flat(body_params=True)
    data = tiny.make_data(SIZES)
    state = init_state(flat, algorithm, data.n_clients, 0.2, client_state="host")
    assert state.clients["c"].device.type == "cpu"
    for _ in range(2):
        state, _ = run_round(state, flat, algorithm, data, dataclasses.replace(base, client_state="host"), 3)
    assert torch.equal(state.x, device_state.x) and torch.equal(state.clients["c"], device_state.clients["c"])


@pytest.mark.parametrize("options", [{}, {"momentum": 0.9, "weight_decay": 0.01}, {"optimizer": "adam"}],
                         ids=["sgd", "momentum-wd", "adam"])  # fmt: skip
def test_merged_groups_step_together_and_equal_each_group_alone(tiny, options):
    """FedAvg groups of three runs (their own server models, step sizes and data) share one optimiser computation
    (a step size per row); a SCAFFOLD group stays a unit of its own. Each group's models equal the group trained
    alone, bit for bit in float64."""
    from fl.algorithms import Context
    from fl.batched import Group, _units, train_groups

    flat = tiny.make_flat(body_params=True)
    local = LocalConfig(epochs=2, batch_size=3, backend="batched", **options)

    def group(seed, name, lr):
        data = tiny.make_data(SIZES, seed)
        algorithm = build_algorithm({"name": name})
        x0 = tiny.make_flat(True, seed).params.detach()
        server = {k: torch.zeros_like(x0) for k in algorithm.server_keys}
        contexts = [Context(x0, server, {k: torch.zeros_like(x0) for k in algorithm.client_keys}, flat.head_mask)
                    for _ in SIZES]  # fmt: skip
        generators = [torch.Generator().manual_seed(client_seed(seed, 1, i)) for i in range(len(SIZES))]
        return Group(data.x, data.y, data.train, generators, algorithm, contexts, lr, local)

    def groups():
        return [group(0, "fedavg", 0.1), group(1, "scaffold", 0.1), group(2, "fedavg", 0.05), group(3, "fedavg", 0.2)]

    assert _units(groups()) == [[0, 2, 3], [1]]
    together = train_groups(flat, groups())
    for k, alone in enumerate(groups()):
        (w, steps), (w_alone, steps_alone) = together[k], train_groups(flat, [alone])[0]
        assert steps == steps_alone and torch.equal(w, w_alone)
