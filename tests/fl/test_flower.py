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


def rows(out):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    keep = ("round", "communication", "clients", "test_loss", "test_accuracy")
    return [{k: v for k, v in json.loads(line).items() if k in keep} for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "scaffold", "feddyn"])
def test_flower_simulation_equals_fl_run(cifar_root, tmp_path, algorithm):
    local, flower = tmp_path / "local", tmp_path / "flower"
    assert run_main([*args(cifar_root, local, algorithm), "--quiet"]) == 0
    assert flower_main(args(cifar_root, flower, algorithm)) == 0
    assert rows(flower) == rows(local)
    assert [r["clients"] for r in rows(flower)] == [2, 2, 2]  # partial participation
    a = torch.load(local / "checkpoint.pt", weights_only=True)
    b = torch.load(flower / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["x"], b["x"])
    for key in a["server"]:
        assert torch.equal(a["server"][key], b["server"][key])


def test_a_method_the_app_cannot_run_is_one_line(tmp_path, capsys):
    assert flower_main(["--set", "method.name='fedcog'", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "method.name" in err
