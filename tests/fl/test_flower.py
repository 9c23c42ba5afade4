"""The Flower app (fl.flower) against python -m fl.run: three rounds in Flower's simulation engine give the same
server model and metrics as the one-process run, bit for bit (both with one thread per client: with more threads
the kernels' summation order differs and the two agree to float rounding, ~1e-8), for FedAvg, FedProx, SCAFFOLD and
FedDyn, with partial participation; what travels is checked against Algorithm.communication inside the run."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("flwr.simulation")
pytest.importorskip("ray")

from fl.flower.__main__ import main as flower_main
from fl.run import main as run_main


def args(root, out, algorithm):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=3", "--set", "model.name='fedcog-cnn'", "--set", "train.rounds=3",
        "--set", "train.batch_size=16", "--set", "train.device='cpu'", "--set", "train.participation=0.6",
        "--set", "train.local_steps=3", "--set", f"algorithm.name='{algorithm}'", "--out", str(out),
    ]  # fmt: skip


def rows(out, keep=("round", "communication", "clients", "test_loss", "test_accuracy")):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k in keep} for line in lines]


def same_server_model(a, b):
    a = torch.load(a / "checkpoint.pt", weights_only=True)
    b = torch.load(b / "checkpoint.pt", weights_only=True)
    return torch.equal(a["x"], b["x"]) and all(torch.equal(a["server"][k], b["server"][k]) for k in a["server"])


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "scaffold", "feddyn"])
def test_flower_simulation_equals_fl_run(cifar_root, tmp_path, algorithm):
    local, flower = tmp_path / "local", tmp_path / "flower"
    assert run_main([*args(cifar_root, local, algorithm), "--quiet"]) == 0
    assert flower_main(args(cifar_root, flower, algorithm)) == 0
    assert rows(flower) == rows(local)
    assert [r["clients"] for r in rows(flower)] == [2, 2, 2]  # partial participation
    assert same_server_model(local, flower)


METHODS = {
    # per-client hooks on the nodes: generation and distillation from round 2, the local model kept in Context.state
    "fedcog": ["method.start_round=2", "method.n_generate=12", "method.generate_steps=3", "method.kd_batch_size=5"],
    # server hooks on the server: trajectory of rounds 1-2, D_syn at round 2, fine-tuning in round 3
    "dynafed": ["method.trajectory_rounds=2", "method.segment=1", "method.inner_steps=2", "method.per_class=1",
                "method.iterations=2"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))
def test_flower_runs_the_methods_as_fl_run_does(cifar_root, tmp_path, method):
    extra = [arg for item in [f"method.name='{method}'", *METHODS[method]] for arg in ("--set", item)]
    local, flower = tmp_path / "local", tmp_path / "flower"
    assert run_main([*args(cifar_root, local, "scaffold"), *extra, "--quiet"]) == 0
    assert flower_main([*args(cifar_root, flower, "scaffold"), *extra]) == 0
    keep = ("round", "communication", "clients", "test_loss", "test_accuracy", "method")
    strip = lambda r: r | {"method": {k: v for k, v in r.get("method", {}).items() if k != "synthesis"}}  # noqa: E731
    assert [strip(r) for r in rows(flower, keep)] == [strip(r) for r in rows(local, keep)]
    assert same_server_model(local, flower)
    if method == "fedcog":  # the clients' generation losses came back from the nodes, in participant order
        assert len(rows(flower, keep)[1]["method"]["generation_loss"]) == 2


@pytest.mark.slow
def test_fedssyn_generators_train_on_the_nodes_and_the_server_deals(cifar_root, tmp_path):
    """Flower first: its nodes train the generators into the cache; fl.run then reads them from the cache and
    must deal the same sets and train to the same model."""
    cache = tmp_path / "generators"
    extra = [
        "--set", "method.name='fedssyn'", "--set", "method.generator='vae'", "--set", "method.n_tilde=8",
        "--set", "method.epochs=1", "--set", "method.rho=1.0", "--set", f"method.cache_dir='{cache}'",
        "--set", "method.generator_config={base_channels = 4, hidden_dim = 8, batch_size = 16}",
    ]  # fmt: skip
    local, flower = tmp_path / "local", tmp_path / "flower"
    assert flower_main([*args(cifar_root, flower, "fedavg"), *extra]) == 0
    trained = sorted(cache.glob("client*/generator.json"))
    assert len(trained) == 3
    assert run_main([*args(cifar_root, local, "fedavg"), *extra, "--quiet"]) == 0
    assert sorted(cache.glob("client*/generator.json")) == trained  # nothing retrained
    assert rows(flower) == rows(local)
    assert same_server_model(local, flower)
    a, b = (json.loads((run / "summary.json").read_text()) for run in (local, flower))
    assert a["synthetic_numbers_sent_once"] == b["synthetic_numbers_sent_once"] == 3 * 8 * 3 * 32 * 32
    assert a["client_sizes"] == b["client_sizes"]


def test_a_method_the_app_cannot_run_is_one_line(tmp_path, capsys):
    assert flower_main(["--set", "method.name='hfmds'", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "method.name" in err
