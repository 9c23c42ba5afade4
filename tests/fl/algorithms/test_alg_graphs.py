"""Replayed steps (fl/graphs.py): a batched round's local steps recorded once and replayed change no number. On the
CPU the recording is a traced FX graph (train.graphs = "on"), which holds the CUDA graph's contract: a step that
reads a value on the host or makes a tensor from host data is refused, and a value baked into the recording would
show as a different number here. Every algorithm with SGD, momentum and weight decay, Adam with τ steps; merged
groups; HFMDs' mixed batches and prototypes in a fleet: bit for bit in float64."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fl.batched as batched_module
from fl.algorithms import ALGORITHMS
from fl.clients import LocalConfig
from fl.config import build_algorithm
from fl.graphs import GRAPHS_ENV, StepNotRecordable, graph_kind, replay
from tests.fl.algorithms.test_alg_batched import PARAMS, run
from theory.errors import InputError


def test_the_setting_picks_the_kind_and_refuses_a_bad_value_in_one_line(monkeypatch):
    monkeypatch.delenv(GRAPHS_ENV, raising=False)
    assert graph_kind("cpu") is None and graph_kind("cuda") == "cuda"
    assert graph_kind("cuda", runs=4) is None  # "auto": a fleet's steps eagerly (measured: no faster replayed)
    assert graph_kind("cpu", 1, "on") == "trace" and graph_kind("cuda", 1, "on") == "cuda"
    assert graph_kind("cpu", 4, "on") == "trace" and graph_kind("cuda", 4, "on") == "cuda"
    assert graph_kind("cpu", 1, "off") is None and graph_kind("cuda", 1, "off") is None
    with pytest.raises(InputError, match=r"^config train\.graphs: 'yes': expected one of auto, on, off$"):
        graph_kind("cpu", 1, "yes")
    monkeypatch.setenv(GRAPHS_ENV, "on")  # the variable that chose it before: refused, naming the key
    with pytest.raises(InputError, match=r"^SHUFFLEFL_GRAPHS='on': .* set train\.graphs in the config"):
        graph_kind("cpu")


def test_a_traced_replay_equals_the_eager_steps_and_counts_s_up():
    g = torch.Generator().manual_seed(0)
    x, w0 = torch.randn(6, 3, dtype=torch.float64, generator=g), torch.randn(3, dtype=torch.float64, generator=g)

    def advance(state, s):
        (w,) = state
        row = x.index_select(0, s.reshape(1)).squeeze(0)
        return (w - 0.1 * (s + 1) * torch.tanh(row * w),)

    eager = (w0,)
    for s in range(2, 6):
        eager = advance(eager, torch.tensor(s))
    (replayed,) = replay(advance, (w0,), 2, 6, "trace")
    assert torch.equal(replayed, eager[0]) and not torch.equal(replayed, w0)
    assert replay(advance, (w0,), 3, 3, "trace")[0] is w0


def test_a_step_that_reads_a_value_on_the_host_is_refused():
    x = torch.arange(6.0)

    def indexed(state, s):  # a tensor as a Python index: .item() inside, a sync a CUDA capture refuses
        return (state[0] + x[s],)

    with pytest.raises(StepNotRecordable, match="reads a tensor's value on the host"):
        replay(indexed, (torch.zeros(()),), 0, 2, "trace")


def test_a_step_that_makes_a_tensor_from_host_data_is_refused():
    def fresh(state, s):
        return (state[0] + torch.tensor([1.0, 2.0]),)

    with pytest.raises(StepNotRecordable, match="from host data"):
        replay(fresh, (torch.zeros(2),), 0, 2, "trace")


def test_an_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="graph kind"):
        replay(lambda state, s: state, (torch.zeros(1),), 0, 1, "tape")


def _graphed_and_eager(tiny, monkeypatch, algorithm, local):
    eager = run(tiny, algorithm, dataclasses.replace(local, graphs="off"))
    recorded = []
    real = batched_module.replay

    def counting(advance, state, start, stop, kind):
        recorded.append((start, stop, kind))
        return real(advance, state, start, stop, kind)

    monkeypatch.setattr(batched_module, "replay", counting)
    graphed = run(tiny, algorithm, dataclasses.replace(local, graphs="on"))
    assert recorded and all(start == 1 and stop > 2 and kind == "trace" for start, stop, kind in recorded)
    return eager, graphed


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize(
    "options",
    [{"momentum": 0.9, "weight_decay": 0.01}, {"optimizer": "adam", "steps": 5}],
    ids=["momentum-wd", "adam-tau"],
)
def test_a_graphed_round_equals_the_eager_round_bit_for_bit(tiny, monkeypatch, name, options):
    algorithm = build_algorithm({"name": name, **PARAMS.get(name, {})})
    local = LocalConfig(epochs=2, batch_size=3, participation=0.75, backend="batched", **options)
    (eager_state, eager_records), (graphed_state, graphed_records) = _graphed_and_eager(
        tiny, monkeypatch, algorithm, local
    )
    assert torch.equal(graphed_state.x, eager_state.x)
    for key in algorithm.server_keys:
        assert torch.equal(graphed_state.server[key], eager_state.server[key])
    for key in algorithm.client_keys:
        assert torch.equal(graphed_state.clients[key], eager_state.clients[key])
    assert [r["clients"] for r in graphed_records] == [r["clients"] for r in eager_records]


def test_plain_sgd_and_uniform_chunks_graphed_equal_eager(tiny, monkeypatch):
    algorithm = build_algorithm({"name": "fedavg"})
    for options in ({}, {"weighting": "uniform", "chunk": 2}):
        local = dataclasses.replace(LocalConfig(epochs=2, batch_size=3, participation=0.75, backend="batched"),
                                    **options)  # fmt: skip
        (eager_state, _), (graphed_state, _) = _graphed_and_eager(tiny, monkeypatch, algorithm, local)
        assert torch.equal(graphed_state.x, eager_state.x)


def test_a_failed_cuda_capture_warns_runs_the_round_eagerly_and_is_not_tried_again(tiny, monkeypatch):
    """Stand-ins for CUDA (no GPU here): a capture that fails leaves the state as it was, the round runs eagerly to
    the eager numbers with one warning, and the process's later rounds are not captured again."""
    import fl.graphs as graphs_module

    algorithm = build_algorithm({"name": "fedavg"})
    local = LocalConfig(epochs=2, batch_size=3, participation=0.75, backend="batched", momentum=0.9)
    eager_state, _ = run(tiny, algorithm, dataclasses.replace(local, graphs="off"))
    monkeypatch.setattr(graphs_module, "_failed_captures", [])
    monkeypatch.setattr(batched_module, "graph_kind",
                        lambda device, runs, setting: graphs_module.graph_kind("cuda", runs, setting))  # fmt: skip
    tries = []

    def failing(advance, state, start, stop, kind):
        tries.append(kind)
        advance(tuple(t.clone() for t in state), torch.tensor(start))  # what a capture leaves bound: undone after
        graphs_module._failed_captures.append("operation not permitted when stream is capturing")
        raise StepNotRecordable("the CUDA capture failed (stand-in); this process runs its steps eagerly")

    monkeypatch.setattr(batched_module, "replay", failing)
    with pytest.warns(RuntimeWarning, match="capture failed") as caught:
        state, _ = run(tiny, algorithm, local)
    assert torch.equal(state.x, eager_state.x)
    assert tries == ["cuda"] and len(caught) == 1  # two rounds, one try
    assert graphs_module.graph_kind("cuda") is None
