"""examples/: the template method (noisy copies) and algorithm (damped prox) run through fl.run, the batched
backend and a Flower loopback deployment; the algorithm's update equations are checked written out by hand; and
the commands of docs/guides/extending.md run in tests/test_docs.py."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fl.algorithms import Context
from fl.run import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the examples import as the README runs them: from the repository's root

from examples.damped_prox import DampedProx  # noqa: E402
from examples.toy_data import toy  # noqa: E402

METHOD = "examples.noisy_copies:NoisyCopies"
ALGORITHM = "examples.damped_prox:DampedProx"


@pytest.fixture()
def toy_npz(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = tmp_path / "toy.npz"
    np.savez(path, **toy(clients=2))
    return path


def args(npz: Path, out: Path, *sets: str) -> list[str]:
    pairs = [f"data.dataset='npz:{npz}'", "data.partition='natural'", "data.clients=2", "model.name='mlp'",
             "train.rounds=2", "train.batch_size=16", "train.device='cpu'", "train.workers=1",
             f"method.name='{METHOD}'", "method.sigma=30.0", f"algorithm.name='{ALGORITHM}'", "algorithm.mu=0.1",
             "algorithm.server_lr=0.8", *sets]  # fmt: skip
    return [a for s in pairs for a in ("--set", s)] + ["--out", str(out), "--quiet"]


def rows(out: Path, keep=("round", "communication", "clients", "test_loss", "test_accuracy")) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k in keep} for line in lines]


def test_damped_prox_follows_its_equations_written_out():
    algorithm = DampedProx(mu=0.3, server_lr=0.5)
    x, w = torch.tensor([1.0, -2.0], dtype=torch.float64), torch.tensor([0.5, 0.0], dtype=torch.float64)
    ctx = Context(x, {}, {}, torch.zeros(2, dtype=torch.bool))
    assert torch.allclose(algorithm.correction(w, ctx), torch.tensor([-0.15, 0.6], dtype=torch.float64))
    ys, weights = torch.tensor([[3.0, 0.0], [1.0, 2.0]], dtype=torch.float64), torch.tensor([0.25, 0.75]).double()
    new_x, _ = algorithm.server_update(x, {}, ys, weights, {}, 2)
    assert torch.allclose(new_x, x + 0.5 * (torch.tensor([1.5, 1.5], dtype=torch.float64) - x))  # x + η_g(Σwy - x)
    assert DampedProx(mu=0).correction(w, ctx) is None


def test_the_templates_run_sequential_and_batched(toy_npz, tmp_path):
    sequential, batched = tmp_path / "sequential", tmp_path / "batched"
    assert main(args(toy_npz, sequential, "train.backend='sequential'")) == 0
    assert main(args(toy_npz, batched, "train.backend='batched'")) == 0
    backends = {json.loads(line)["backend"] for line in (batched / "metrics.jsonl").read_text().splitlines()}
    assert backends == {"batched"}  # no LocalTask, a vmap-safe correction: nothing falls back
    for a, b in zip(rows(sequential), rows(batched), strict=True):
        assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-4) and a["communication"] == b["communication"]
    summary = json.loads((sequential / "summary.json").read_text())
    assert summary["noisy_copies"] == 2 * 90  # one copy of each D_i: 100 images a client less its 10% validation
    recorded = json.loads((sequential / "provenance.json").read_text())["plugins"]
    assert {recorded[k]["spec"] for k in ("method.name", "algorithm.name")} == {METHOD, ALGORITHM}


def test_a_bad_template_key_is_one_line(toy_npz, tmp_path, capsys):
    assert main(args(toy_npz, tmp_path / "a", "method.sigma=-1.0")) == 2
    assert main(args(toy_npz, tmp_path / "b", "algorithm.server_lr=3.0")) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "method.sigma" in err[0] and "algorithm.server_lr" in err[1]


@pytest.mark.slow
def test_the_templates_run_through_a_flower_loopback_as_fl_run(toy_npz, tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    if not shutil.which("flower-superlink") or not shutil.which("flwr"):
        pytest.skip("the Flower command-line tools are not installed")
    from fl.flower.loopback import Loopback

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    local, deployed = tmp_path / "local", tmp_path / "deployed"
    assert main(args(toy_npz, local)) == 0
    sets = args(toy_npz, local)[1:-3:2]
    with Loopback(2, tmp_path / "flower") as link:
        link.run({"config": "", "set": ";".join(sets), "out": str(deployed), "timeout": 120},
                 deployed / "summary.json", 300)  # fmt: skip
    assert rows(deployed) == rows(local) and len(rows(local)) == 2
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (local, deployed))
    assert torch.equal(a["x"], b["x"])
