"""FedAdagrad, FedYogi and FedAdam (Reddi et al. 2021, Algorithm 2) against their update equations in float64:

    Δ_t = Σ_S w_i (y_i - x_t),   m_t = β1 m_{t-1} + (1 - β1) Δ_t,
    Adagrad  v_t = v_{t-1} + Δ_t²
    Yogi     v_t = v_{t-1} - (1 - β2) Δ_t² sign(v_{t-1} - Δ_t²)
    Adam     v_t = β2 v_{t-1} + (1 - β2) Δ_t²
    x_{t+1} = x_t + η m_t / (√v_t + τ),   m_{-1} = 0,  v_{-1} = τ²

- a two-round example with its numbers worked out by hand in the comments (server_update alone);
- three engine rounds on the tiny problem against a reference written out here (local SGD from conftest);
- the config: defaults, ``algorithm.name`` selects each, bad values are one line naming the key;
- every backend gives the same run: sequential, batched, worker processes (engine level), a fleet and ``fl.run``
  with ``--set algorithm.name=...`` (resumed mid-run: the server state m, v is in the checkpoint); Flower (slow).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from fl.algorithms import ALGORITHMS, FedAdagrad, FedAdam, FedYogi
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

VARIANTS = {"fedadagrad": FedAdagrad, "fedyogi": FedYogi, "fedadam": FedAdam}
ROUNDS, SEED, LR = 3, 4, 0.3


# --- a two-round example by hand -----------------------------------------------------------------------------


def by_hand(variant: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """x_1, v_1, x_2, v_2 for η = 1, β1 = 0.5, β2 = 0.75, τ = 1 (v_{-1} = 1), x_0 = (0, 0), Δ_1 = (2, 1) and
    Δ_2 = (-1, 0.5): m_1 = 0.5 Δ_1 = (1, 0.5), Δ_1² = (4, 1); m_2 = 0.5 m_1 + 0.5 Δ_2 = (0, 0.5), Δ_2² = (1, 0.25)."""
    if variant == "fedadagrad":
        v1 = [1 + 4, 1 + 1]  # (5, 2)
        v2 = [5 + 1, 2 + 0.25]  # (6, 2.25): √ = (√6, 1.5)
    elif variant == "fedyogi":
        v1 = [1 + 0.25 * 4, 1.0]  # sign(1 - 4) = -1: v grows by (1 - β2)Δ²; sign(1 - 1) = 0: v stays
        v2 = [2 - 0.25 * 1, 1 - 0.25 * 0.25]  # sign(2 - 1) = sign(1 - 0.25) = +1: (1.75, 0.9375)
    else:
        v1 = [0.75 + 0.25 * 4, 0.75 + 0.25 * 1]  # (1.75, 1)
        v2 = [0.75 * 1.75 + 0.25 * 1, 0.75 * 1 + 0.25 * 0.25]  # (1.5625, 0.8125): √1.5625 = 1.25
    x1 = [1 / (math.sqrt(v1[0]) + 1), 0.5 / (math.sqrt(v1[1]) + 1)]
    x2 = [x1[0] + 0 / (math.sqrt(v2[0]) + 1), x1[1] + 0.5 / (math.sqrt(v2[1]) + 1)]
    return x1, v1, x2, v2


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_two_rounds_by_hand(variant):
    params = {"server_lr": 1.0, "beta1": 0.5, "tau": 1.0} | ({} if variant == "fedadagrad" else {"beta2": 0.75})
    algorithm = VARIANTS[variant](**params).check()
    f64 = {"dtype": torch.float64}
    x0 = torch.zeros(2, **f64)
    server = {"m": torch.zeros(2, **f64), "v": torch.zeros(2, **f64)}  # the engine's start
    ys = torch.tensor([[3.0, 1.0], [1.0, 1.0]], **f64)  # weights 1/2, 1/2: Δ_1 = (2, 1)
    x1, server = algorithm.server_update(x0, server, ys, torch.tensor([0.5, 0.5], **f64), {}, 2)
    spread = torch.tensor([0.5, -0.5], **f64)  # weights 1/4, 3/4: Δ_2 = 1/4 (Δ + 3e) + 3/4 (Δ - e) = Δ
    delta2 = torch.tensor([-1.0, 0.5], **f64)
    ys = torch.stack([x1 + delta2 + 3 * spread, x1 + delta2 - spread])
    x2, server2 = algorithm.server_update(x1, server, ys, torch.tensor([0.25, 0.75], **f64), {}, 2)
    hand_x1, hand_v1, hand_x2, hand_v2 = by_hand(variant)
    tol = {"rtol": 1e-12, "atol": 1e-14}
    torch.testing.assert_close(x1, torch.tensor(hand_x1, **f64), **tol)
    torch.testing.assert_close(server["v"], torch.tensor(hand_v1, **f64), **tol)
    torch.testing.assert_close(server["m"], torch.tensor([1.0, 0.5], **f64), **tol)
    torch.testing.assert_close(x2, torch.tensor(hand_x2, **f64), **tol)
    torch.testing.assert_close(server2["v"], torch.tensor(hand_v2, **f64), **tol)
    torch.testing.assert_close(server2["m"], torch.tensor([0.0, 0.5], **f64), **tol)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_zero_start_is_v_equal_tau_squared(variant):
    """The engine starts server state at zero; Algorithm 2's v_{-1} = τ² is what the first round must see."""
    algorithm = VARIANTS[variant](tau=0.1)
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    ys = x + torch.tensor([[0.3, -0.2, 0.0], [0.1, 0.4, -0.05]], dtype=torch.float64)
    weights = torch.tensor([0.4, 0.6], dtype=torch.float64)
    zero = {"m": torch.zeros_like(x), "v": torch.zeros_like(x)}
    explicit = {"m": torch.zeros_like(x), "v": torch.full_like(x, 0.1**2)}
    a, a_state = algorithm.server_update(x, zero, ys, weights, {}, 2)
    b, b_state = algorithm.server_update(x, explicit, ys, weights, {}, 2)
    assert torch.equal(a, b) and torch.equal(a_state["v"], b_state["v"]) and bool((a_state["v"] > 0).all())


# --- the engine against a reference --------------------------------------------------------------------------


def second_moment(variant: str, v: torch.Tensor, delta2: torch.Tensor, beta2: float) -> torch.Tensor:
    if variant == "fedadagrad":
        return v + delta2
    if variant == "fedyogi":
        return v - (1 - beta2) * delta2 * torch.sign(v - delta2)
    return beta2 * v + (1 - beta2) * delta2


def reference(tiny, variant, weighting, server_lr, beta1, beta2, tau):
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local(weighting)
    x = flat.params.detach().clone()
    m, v = torch.zeros_like(x), torch.full_like(x, tau**2)
    out = [(x, m, v)]
    for t in range(1, ROUNDS + 1):
        selected = list(range(data.n_clients))
        ys = [tiny.local_sgd(x, data, i, t, SEED, config, LR)[0] for i in selected]
        w = tiny.aggregation_weights(data, selected, weighting)
        delta = sum(w_i * (y_i - x) for w_i, y_i in zip(w, ys))
        m = beta1 * m + (1 - beta1) * delta
        v = second_moment(variant, v, delta**2, beta2)
        x = x + server_lr * m / (v.sqrt() + tau)
        out.append((x, m, v))
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("weighting", ["size", "uniform"])
@pytest.mark.parametrize(
    "server_lr, beta1, beta2, tau", [(0.01, 0.9, 0.99, 1e-3), (0.3, 0.5, 0.9, 0.05), (0.1, 0.0, 0.0, 1e-2)]
)
def test_engine_matches_the_equations(tiny, variant, weighting, server_lr, beta1, beta2, tau):
    params = {"server_lr": server_lr, "beta1": beta1, "tau": tau}
    params |= {} if variant == "fedadagrad" else {"beta2": beta2}
    states = tiny.run_engine(VARIANTS[variant](**params).check(), tiny.local(weighting), ROUNDS, SEED, LR)
    expected = reference(tiny, variant, weighting, server_lr, beta1, beta2, tau)
    assert set(states[0]["server"]) == {"m", "v"} and states[0]["clients"] == {}
    assert all(torch.count_nonzero(states[0]["server"][k]) == 0 for k in ("m", "v"))
    for t in range(1, ROUNDS + 1):
        x, m, v = expected[t]
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["m"], m)
        tiny.assert_close(states[t]["server"]["v"], v)
        assert states[t]["record"]["clients"] == [0, 1, 2]
    assert not torch.allclose(states[ROUNDS]["x"], states[0]["x"])


def test_the_variants_differ_from_round_one_on(tiny):
    """Same Δ_1, different v_1: the three take different first steps (and none is FedAvg's)."""
    firsts = [tiny.run_engine(cls(server_lr=0.1), tiny.local(), 1, SEED, LR)[1]["x"] for cls in VARIANTS.values()]
    assert all((a - b).abs().max() > 1e-6 for k, a in enumerate(firsts) for b in firsts[k + 1 :])


# --- the config ------------------------------------------------------------------------------------------------


def test_defaults_registry_and_communication(tiny):
    assert FedAdam() == FedAdam(server_lr=0.01, beta1=0.9, tau=1e-3, beta2=0.99)
    assert FedYogi() == FedYogi(server_lr=0.01, beta1=0.9, tau=1e-3, beta2=0.99)
    assert FedAdagrad() == FedAdagrad(server_lr=0.01, beta1=0.9, tau=1e-3)
    assert all(ALGORITHMS[name] is cls for name, cls in VARIANTS.items())
    flat = tiny.make_flat(body_params=True)
    p = flat.n_params
    assert all(cls().communication(p, int(flat.head_mask.sum())) == 2 * p for cls in VARIANTS.values())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_algorithm_name_selects_each(variant):
    config = load_config(None, [f"algorithm.name={variant}", "algorithm.server_lr=0.5", "algorithm.tau=0.01"])
    algorithm = build_algorithm(config.algorithm)
    assert type(algorithm) is VARIANTS[variant] and (algorithm.server_lr, algorithm.tau) == (0.5, 0.01)


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"name": "fedadam", "tau": -1e-3}, "algorithm.tau"),
        ({"name": "fedyogi", "tau": 0}, "algorithm.tau"),
        ({"name": "fedadagrad", "tau": 0}, "algorithm.tau"),
        ({"name": "fedadam", "server_lr": 0}, "algorithm.server_lr"),
        ({"name": "fedyogi", "server_lr": -1}, "algorithm.server_lr"),
        ({"name": "fedadam", "beta1": 1}, "algorithm.beta1"),
        ({"name": "fedadagrad", "beta1": 1.5}, "algorithm.beta1"),
        ({"name": "fedadam", "beta2": 1}, "algorithm.beta2"),
        ({"name": "fedyogi", "beta2": -0.5}, "algorithm.beta2"),
        ({"name": "fedadagrad", "beta2": 0.9}, "algorithm.beta2"),  # Adagrad has no β2
        ({"name": "fedadam", "tau": math.inf}, "algorithm.tau"),
        ({"name": "fedadam", "tau": "1e-3"}, "algorithm.tau"),
    ],
    ids=repr,
)
def test_bad_values_are_one_line_naming_the_key(spec, key):
    with pytest.raises(InputError) as error:
        build_algorithm(spec)
    message = str(error.value)
    assert message.startswith(f"config {key}:") and "\n" not in message


def test_check_refuses_what_direct_construction_let_through():
    with pytest.raises(InputError, match=r"algorithm\.tau"):
        FedAdam(tau=0.0).check()
    with pytest.raises(InputError, match=r"algorithm\.beta2"):
        FedYogi(beta2=1.0).check()


# --- every backend ---------------------------------------------------------------------------------------------


def engine_run(algorithm, backend: str, pool=None, n_rounds: int = 2):
    """Two rounds on the tiny image data (3 clients of 5, 8, 7 samples, 2 a round) with ``backend``."""
    data = image_data()
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


@pytest.fixture(scope="module")
def pool():
    workers = Workers(2)
    yield workers
    workers.close()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_sequential_batched_and_workers_agree(pool, variant):
    algorithm = build_algorithm({"name": variant, "server_lr": 0.05})
    sequential, seq_backends = engine_run(algorithm, "sequential")
    batched, bat_backends = engine_run(algorithm, "batched")
    workers, work_backends = engine_run(algorithm, "sequential", pool)
    assert (seq_backends, bat_backends, work_backends) == (["sequential"] * 2, ["batched"] * 2, ["workers"] * 2)
    assert torch.equal(workers.x, sequential.x)  # the same arithmetic in another process: bit for bit
    assert all(torch.equal(workers.server[k], sequential.server[k]) for k in ("m", "v"))
    tol = {"rtol": 1e-10, "atol": 1e-12}  # vmapped clients sum in another order
    torch.testing.assert_close(batched.x, sequential.x, **tol)
    for key in ("m", "v"):
        torch.testing.assert_close(batched.server[key], sequential.server[key], **tol)
    assert torch.count_nonzero(sequential.server["m"]) > 0


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_a_fleet_equals_the_runs_alone(cifar_root, tmp_path, backend):
    """The three variants as one fleet (their clients trained together), each run bit for bit ``fl.run``'s alone."""
    configs = {
        name: fleet_helpers.tiny(cifar_root, 0, name, "train.rounds=3", f"train.backend='{backend}'")
        for name in sorted(VARIANTS)
    }
    fleet_helpers.fleet([(config, tmp_path / f"fleet_{name}") for name, config in configs.items()])
    for name, config in configs.items():
        fleet_helpers.assert_same(tmp_path / f"fleet_{name}", fleet_helpers.alone(config, tmp_path / f"alone_{name}"))
        end = torch.load(tmp_path / f"fleet_{name}" / "checkpoint.pt", weights_only=True)
        assert set(end["server"]) == {"m", "v"} and torch.count_nonzero(end["server"]["v"]) == end["x"].numel()


def cli_args(root, out, variant, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='mlp'", "--set", "train.rounds=4",
        "--set", "train.batch_size=16", "--set", "train.device='cpu'", "--set", "train.participation=0.5",
        "--set", f"algorithm.name={variant}", "--set", "algorithm.server_lr=0.05", "--out", str(out), "--quiet",
        *extra,
    ]  # fmt: skip


def untimed_rows(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in rows]


def test_fl_run_selects_fedadam_and_resumes_its_server_state(cifar_root, tmp_path, monkeypatch):
    """``--set algorithm.name=fedadam``: a run stopped after round 2 and resumed equals the straight run, its server
    state m, v included (they travel in the checkpoint)."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main(cli_args(cifar_root, straight, "fedadam")) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert run_main(cli_args(cifar_root, broken, "fedadam")) == 2
    resume()
    assert run_main(["--resume", str(broken), "--quiet"]) == 0
    untimed = [untimed_rows(out) for out in (straight, broken)]
    assert untimed[0] == untimed[1] and [r["round"] for r in untimed[0]] == [1, 2, 3, 4]
    a, b = (torch.load(out / "checkpoint.pt", weights_only=True) for out in (straight, broken))
    assert torch.equal(a["x"], b["x"]) and set(a["server"]) == {"m", "v"}
    assert all(torch.equal(a["server"][k], b["server"][k]) for k in ("m", "v"))
    config = json.loads((straight / "config.json").read_text())
    fields = {"name": "fedadam", "server_lr": 0.05, "beta1": 0.9, "tau": 1e-3, "beta2": 0.99}
    assert config["algorithm_fields"] == fields


@pytest.mark.parametrize("variant", ["fedyogi", "fedadagrad"])
def test_fl_run_selects_the_others(cifar_root, tmp_path, variant):
    out = tmp_path / variant
    assert run_main(cli_args(cifar_root, out, variant, "--set", "train.rounds=2")) == 0
    assert [r["round"] for r in untimed_rows(out)] == [1, 2]
    assert json.loads((out / "config.json").read_text())["algorithm_fields"]["name"] == variant
    end = torch.load(out / "checkpoint.pt", weights_only=True)
    assert set(end["server"]) == {"m", "v"} and bool((end["server"]["v"] > 0).all())


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["fedadam", "fedyogi"])
def test_flower_simulation_equals_fl_run(cifar_root, tmp_path, variant):
    """Server state only (m, v never travel): the Flower app runs them unchanged, to fl.run's numbers bit for bit."""
    pytest.importorskip("flwr.simulation")
    pytest.importorskip("ray")
    from fl.flower.__main__ import main as flower_main
    from tests.fl.test_flower import args, rows, same_server_model

    extra = ["--set", "algorithm.server_lr=0.05"]
    local, flower = tmp_path / "local", tmp_path / "flower"
    assert run_main([*args(cifar_root, local, variant), *extra, "--quiet"]) == 0
    assert flower_main([*args(cifar_root, flower, variant), *extra]) == 0
    assert rows(flower) == rows(local)
    assert same_server_model(local, flower)
