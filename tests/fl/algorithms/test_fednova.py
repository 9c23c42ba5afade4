"""FedNova (Wang et al. 2020) for plain local SGD against its update rule in float64:

    x_{t+1} = x_t - τ_eff Σ_S p_i (x_t - y_i)/τ_i,   τ_eff = Σ_S p_i τ_i,   τ_i = K_i (the client's local steps)

- a two-round example worked out by hand in the comments (client_update and server_update alone);
- three engine rounds on the tiny problem (K = 2·⌈(5, 8, 7)/3⌉ = (4, 6, 6)) against a reference written out here;
- equal step counts give FedAvg; a client without data adds nothing; a lost step count is one line;
- every backend gives the same run: sequential, batched, worker processes (engine level), a fleet, and ``fl.run``
  with ``--set algorithm.name=fednova`` (resumed mid-run); on Flower it stops with one line (slow).
"""

from __future__ import annotations

import json

import pytest
import torch

from fl.algorithms import ALGORITHMS, Context, FedAvg, FedNova
from fl.clients import LocalConfig
from fl.config import build_algorithm, load_config
from fl.engine import init_state, run_round
from fl.flat import FlatModel
from fl.methods import Method
from fl.run import main as run_main
from fl.workers import RunSpec, Workers
from tests.fl import test_fleet as fleet_helpers
from tests.fl.conftest import interrupt_at
from tests.fl.test_workers import SPEC, image_data
from theory.errors import InputError

ROUNDS, SEED, LR = 3, 2, 0.3
F64 = {"dtype": torch.float64}


def steps_rows(counts: list[float], width: int = 2) -> torch.Tensor:
    return torch.tensor(counts, **F64).unsqueeze(1).expand(-1, width).clone()


def test_two_rounds_by_hand():
    """Round 1: τ = (2, 4, 0), p = (1/2, 1/4, 1/4), x - y_i = (2, 2), (4, -8), (0, 0): d_i = (1, 1), (1, -2), 0;
    τ_eff = 1 + 1 + 0 = 2, Σ p_i d_i = (1/2 + 1/4, 1/2 - 1/2) = (3/4, 0), x_1 = x_0 - 2 (3/4, 0) = x_0 - (3/2, 0)
    (FedAvg would take x_0 - Σ p_i (x - y_i) = x_0 - (2, -1)).
    Round 2: τ = (3, 3, 6), p = 1/3 each, x - y_i = (3, 0), (0, 3), (6, 6): d_i = (1, 0), (0, 1), (1, 1);
    τ_eff = 4, Σ p_i d_i = (2/3, 2/3), x_2 = x_1 - (8/3, 8/3)."""
    algorithm = FedNova()
    x0 = torch.tensor([1.0, -1.0], **F64)
    head = torch.ones(2, dtype=torch.bool)
    before = steps_rows([0, 0, 0])  # the engine's start
    after = torch.stack([
        algorithm.client_update(torch.zeros(2, **F64), Context(x0, {}, {"steps": row}, head), k, LR)["steps"]
        for row, k in zip(before, (2, 4, 0))
    ])  # fmt: skip
    assert torch.equal(after, steps_rows([2, 4, 0]))
    ys = x0 - torch.tensor([[2.0, 2.0], [4.0, -8.0], [0.0, 0.0]], **F64)
    weights = torch.tensor([0.5, 0.25, 0.25], **F64)
    x1, server = algorithm.server_update(x0, {}, ys, weights, {"steps": after - before}, 3)
    torch.testing.assert_close(x1, x0 - torch.tensor([1.5, 0.0], **F64), rtol=1e-14, atol=1e-14)
    assert server == {}
    later = after + steps_rows([3, 3, 6])
    ys = x1 - torch.tensor([[3.0, 0.0], [0.0, 3.0], [6.0, 6.0]], **F64)
    x2, _ = algorithm.server_update(x1, {}, ys, torch.full((3,), 1 / 3, **F64), {"steps": later - after}, 3)
    torch.testing.assert_close(x2, x1 - torch.tensor([8 / 3, 8 / 3], **F64), rtol=1e-14, atol=1e-14)


def reference_fednova(tiny, data, weighting):
    flat, config = tiny.make_flat(), tiny.local(weighting)
    x = flat.params.detach().clone()
    counted = torch.zeros(data.n_clients, **F64)
    out = [(x, counted.clone())]
    for t in range(1, ROUNDS + 1):
        selected = list(range(data.n_clients))
        trained = [tiny.local_sgd(x, data, i, t, SEED, config, LR) for i in selected]
        p = tiny.aggregation_weights(data, selected, weighting)
        tau = [k for _, k in trained]
        tau_eff = sum(p_i * k for p_i, k in zip(p, tau))
        normalised = [(x - y) / k if k else torch.zeros_like(x) for y, k in trained]
        x = x - tau_eff * sum(p_i * d_i for p_i, d_i in zip(p, normalised))
        counted += torch.tensor(tau, **F64)
        out.append((x, counted.clone()))
    return out


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_engine_matches_the_update_rule(tiny, weighting):
    data = tiny.make_data()
    states = tiny.run_engine(FedNova(), tiny.local(weighting), ROUNDS, SEED, LR, data=data)
    expected = reference_fednova(tiny, data, weighting)
    assert states[0]["server"] == {} and set(states[0]["clients"]) == {"steps"}
    for t in range(1, ROUNDS + 1):
        x, counted = expected[t]
        tiny.assert_close(states[t]["x"], x)
        assert torch.equal(states[t]["clients"]["steps"], counted.unsqueeze(1).expand_as(states[t]["clients"]["steps"]))
    assert expected[1][1].tolist() == [4, 6, 6]  # K_i = 2·⌈n_i/3⌉: unequal, so FedNova is not FedAvg here
    plain = tiny.run_engine(FedAvg(), tiny.local(weighting), 1, SEED, LR)
    assert (states[1]["x"] - plain[1]["x"]).abs().max() > 1e-6


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_equal_step_counts_are_fedavg(tiny, weighting):
    data = tiny.make_data((6, 6, 6))  # K_i = 2·⌈6/3⌉ = 4 for all three
    nova = tiny.run_engine(FedNova(), tiny.local(weighting), ROUNDS, SEED, LR, data=data)
    plain = tiny.run_engine(FedAvg(), tiny.local(weighting), ROUNDS, SEED, LR, data=tiny.make_data((6, 6, 6)))
    for a, b in zip(nova, plain):
        tiny.assert_close(a["x"], b["x"])


def test_a_client_without_data_adds_nothing(tiny):
    """Uniform weights give the empty client p = 1/3 and τ = 0: no NaN, d = 0, and it adds 0 to τ_eff."""
    data = tiny.make_data((5, 0, 7))
    states = tiny.run_engine(FedNova(), tiny.local("uniform"), ROUNDS, SEED, LR, data=data)
    expected = reference_fednova(tiny, data, "uniform")
    for t in range(1, ROUNDS + 1):
        tiny.assert_close(states[t]["x"], expected[t][0])
    assert expected[1][1].tolist() == [4, 0, 6] and bool(torch.isfinite(states[-1]["x"]).all())


def test_a_lost_step_count_is_one_line():
    """What the server sees where a path carries no client state up (Flower today): no change for a moved model."""
    x = torch.zeros(2, **F64)
    ys = torch.tensor([[1.0, 0.0], [0.0, 0.0]], **F64)
    zeros = {"steps": steps_rows([0, 0])}
    with pytest.raises(InputError, match="no local step count reached the server") as error:
        FedNova().server_update(x, {}, ys, torch.tensor([0.5, 0.5], **F64), zeros, 2)
    assert "\n" not in str(error.value)


def test_step_counts_past_exact_float_counting_are_refused():
    x = torch.zeros(2, dtype=torch.float32)
    ctx = Context(x, {}, {"steps": torch.full((2,), 2.0**23)}, torch.ones(2, dtype=torch.bool))
    with pytest.raises(InputError, match="float64") as error:
        FedNova().client_update(x + 1, ctx, 10, LR)
    assert "\n" not in str(error.value)
    assert torch.equal(FedNova().client_update(x + 1, ctx, 0, LR)["steps"], ctx.client["steps"])


def test_config_registry_and_communication(tiny):
    assert ALGORITHMS["fednova"] is FedNova
    assert type(build_algorithm(load_config(None, ["algorithm.name=fednova"]).algorithm)) is FedNova
    with pytest.raises(InputError, match=r"^config algorithm.tau: unknown for fednova \(its parameters: none\)$"):
        build_algorithm({"name": "fednova", "tau": 2})
    flat = tiny.make_flat(body_params=True)
    assert FedNova().communication(flat.n_params, int(flat.head_mask.sum())) == 2 * flat.n_params + 1


# --- every backend ---------------------------------------------------------------------------------------------


def engine_run(backend: str, pool=None, n_rounds: int = 2):
    """Two rounds on the tiny image data (3 clients of 5, 8, 7 samples, 2 a round) with ``backend``."""
    algorithm, data = FedNova(), image_data()
    config = LocalConfig(epochs=2, batch_size=3, participation=0.67, backend=backend)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        flat = FlatModel(SPEC())
    state = init_state(flat, algorithm, data.n_clients, lr=0.1)
    if pool is not None:
        pool.setup(RunSpec(SPEC, algorithm, Method(), data, config, seed=3))
    backends = []
    for _ in range(n_rounds):
        state, record = run_round(state, flat, algorithm, data, config, 3, Method(), pool)
        backends.append(record["backend"])
    return state, backends


def test_sequential_batched_and_workers_agree():
    workers = Workers(2)
    try:
        sequential, seq_backends = engine_run("sequential")
        batched, bat_backends = engine_run("batched")
        in_workers, work_backends = engine_run("sequential", workers)
    finally:
        workers.close()
    assert (seq_backends, bat_backends, work_backends) == (["sequential"] * 2, ["batched"] * 2, ["workers"] * 2)
    assert torch.equal(in_workers.x, sequential.x)  # the same arithmetic in another process: bit for bit
    assert torch.equal(in_workers.clients["steps"], sequential.clients["steps"])
    torch.testing.assert_close(batched.x, sequential.x, rtol=1e-10, atol=1e-12)  # vmapped: another summation order
    assert torch.equal(batched.clients["steps"], sequential.clients["steps"])
    assert sorted(sequential.clients["steps"][:, 0].tolist()) != [0, 0, 0]


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_a_fleet_equals_the_runs_alone(cifar_root, tmp_path, backend):
    """FedNova beside FedAvg in one fleet (a Dirichlet split: unequal step counts), each run bit for bit alone."""
    configs = {
        name: fleet_helpers.tiny(cifar_root, 0, name, "train.rounds=3", f"train.backend='{backend}'")
        for name in ("fednova", "fedavg")
    }
    fleet_helpers.fleet([(config, tmp_path / f"fleet_{name}") for name, config in configs.items()])
    for name, config in configs.items():
        fleet_helpers.assert_same(tmp_path / f"fleet_{name}", fleet_helpers.alone(config, tmp_path / f"alone_{name}"))
    nova, plain = (torch.load(tmp_path / f"fleet_{n}" / "checkpoint.pt", weights_only=True) for n in configs)
    assert not torch.equal(nova["x"], plain["x"])


def untimed_rows(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in rows]


def test_fl_run_selects_fednova_and_resumes_its_step_counts(cifar_root, tmp_path, monkeypatch):
    args = [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{cifar_root}'",
        "--set", "data.partition='dirichlet'", "--set", "data.alpha=0.5", "--set", "data.clients=4",
        "--set", "model.name='mlp'", "--set", "train.rounds=4", "--set", "train.batch_size=16",
        "--set", "train.device='cpu'", "--set", "train.participation=0.5", "--set", "algorithm.name=fednova",
        "--quiet",
    ]  # fmt: skip
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main([*args, "--out", str(straight)]) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert run_main([*args, "--out", str(broken)]) == 2
    resume()
    assert run_main(["--resume", str(broken), "--quiet"]) == 0
    untimed = [untimed_rows(out) for out in (straight, broken)]
    assert untimed[0] == untimed[1] and [r["round"] for r in untimed[0]] == [1, 2, 3, 4]
    a, b = (torch.load(out / "checkpoint.pt", weights_only=True) for out in (straight, broken))
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["clients"]["steps"], b["clients"]["steps"])
    assert int(a["clients"]["steps"].sum()) > 0
    n_params = a["x"].numel()
    assert untimed[0][0]["communication"] == 2 * (2 * n_params + 1)  # 2 clients a round, x + y_i + τ_i each


@pytest.mark.slow
def test_flower_stops_in_one_line(cifar_root, tmp_path, capsys):
    """The Flower app carries up only the client state whose key the server broadcasts, so no τ_i would reach its
    server: the run is refused in one line naming fednova before Ray starts (``not_distributed``). Once the app
    carries step counts this test should become an equality with fl.run, as for the server optimisers."""
    pytest.importorskip("flwr.simulation")
    pytest.importorskip("ray")
    from fl.flower.__main__ import main as flower_main
    from tests.fl.test_flower import args

    assert flower_main(args(cifar_root, tmp_path / "flower", "fednova")) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("python -m fl.flower: error:")]
    assert len(errors) == 1 and "fednova" in errors[0] and "does not run through the Flower app" in errors[0]


@pytest.mark.parametrize("setting", ["train.momentum=0.9", "train.optimizer=adam"])
def test_fednova_refuses_local_steps_that_are_not_plain_sgd(setting):
    """Its τ_i normalisation is FedNova only for plain SGD steps: anything else is one line naming the key."""

    with pytest.raises(InputError, match=r"algorithm\.name: fednova assumes plain local SGD"):
        load_config(None, ["algorithm.name=fednova", setting])
    load_config(None, ["algorithm.name=fedavg", setting])  # the others take them
