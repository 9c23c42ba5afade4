"""The engine on CUDA (marker ``gpu``; every test here skips without a CUDA device): every algorithm's rounds,
sequential and batched, against the CPU in float64; the estimators; a DDPM's training step and sampling; a run
interrupted and resumed through ``python -m fl.run --device cuda``.

Tolerances: float64 rounds on CUDA agree with the CPU to 1e-9 (the same arithmetic, different summation order in
the kernels); the estimators to 1e-6 relative; a resumed CUDA run repeats the uninterrupted one to 1e-6 in the
model (cuDNN may pick different kernels in a new process; the MLP used here has none).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from torch import nn

import fl.run as run_module
from fl.clients import ClientSet, LocalConfig
from fl.config import build_algorithm
from fl.engine import init_state, run_round
from fl.estimators import measure
from fl.flat import FlatModel
from tests.fl.conftest import interrupt_at

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
SIZES = (5, 8, 7, 11)
PARAMS = {"fedprox": {"mu": 0.1}, "feddyn": {"alpha": 0.1}, "fedavgm": {"beta": 0.9}}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.body(x))


def problem(device: str) -> tuple[FlatModel, ClientSet]:
    torch.manual_seed(0)
    flat = FlatModel(Net().double().to(device))
    generator = torch.Generator().manual_seed(1)
    n = sum(SIZES)
    x = torch.randn(n, 4, generator=generator, dtype=torch.float64).to(device)
    y = torch.randint(0, 3, (n,), generator=generator).to(device)
    bounds = np.cumsum((0, *SIZES))
    train = [torch.arange(a, b, device=device) for a, b in itertools.pairwise(bounds.tolist())]
    empty = [torch.empty(0, dtype=torch.long, device=device) for _ in train]
    return flat, ClientSet(x, y, train, train, train, empty, x, y, 3)


def rounds(device: str, name: str, backend: str, n_rounds: int = 2):
    flat, data = problem(device)
    algorithm = build_algorithm({"name": name, **PARAMS.get(name, {})})
    local = LocalConfig(epochs=2, batch_size=3, participation=0.75, momentum=0.5, backend=backend)
    state = init_state(flat, algorithm, data.n_clients, 0.2)
    for _ in range(n_rounds):
        state, record = run_round(state, flat, algorithm, data, local, seed=3)
    assert record["backend"] == backend
    return state


@pytest.mark.parametrize("name", ["fedavg", "fedavgm", "fedprox", "scaffold", "feddyn", "fedpvr"])
@pytest.mark.parametrize("backend", ["sequential", "batched"])
def test_every_algorithm_on_cuda_matches_the_cpu(name, backend):
    cpu, cuda = rounds("cpu", name, "sequential"), rounds("cuda", name, backend)
    torch.testing.assert_close(cuda.x.cpu(), cpu.x, rtol=1e-9, atol=1e-9)
    for key, value in cpu.clients.items():
        torch.testing.assert_close(cuda.clients[key].cpu(), value, rtol=1e-9, atol=1e-9)


def test_estimators_on_cuda_match_the_cpu():
    out = {}
    for device in ("cpu", "cuda"):
        flat, data = problem(device)
        out[device] = measure(flat, flat.params.detach().clone(), data, 4, torch.Generator().manual_seed(0))
    for key, value in out["cpu"].items():
        assert out["cuda"][key] == pytest.approx(value, rel=1e-6, abs=1e-12), key


def test_ddpm_trains_and_samples_on_cuda():
    from fl.synthesis.generators.ddpm import DDPM, DDPMConfig

    torch.manual_seed(0)
    model = DDPM((1, 28, 28), 2, DDPMConfig.tiny(), device="cuda")
    rng = np.random.default_rng(0)
    y = np.arange(32) % 2
    x = (np.where(y[:, None, None, None] == 1, 200, 50) + rng.integers(-20, 21, (32, 1, 28, 28))).astype(np.uint8)
    history = model.fit(x, y, 3, torch.Generator().manual_seed(0))
    assert all(np.isfinite(h["loss"]) for h in history) and history[-1]["loss"] < history[0]["loss"]
    assert next(model.model.parameters()).is_cuda
    images = model.sample(np.array([0, 1, 1]), torch.Generator().manual_seed(1), steps=5)
    assert images.shape == (3, 1, 28, 28) and images.dtype == np.uint8


def test_a_cuda_run_resumes(cifar_root, tmp_path, monkeypatch):
    def args(out):
        return [
            "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{cifar_root}'", "--set", "data.clients=4",
            "--set", "data.partition='iid'", "--set", "model.name='mlp'", "--set", "train.rounds=4",
            "--set", "train.checkpoint_every=1", "--set", "train.estimate_every=2",
            "--set", "algorithm.name='scaffold'", "--set", "train.participation=0.5", "--device", "cuda",
            "--out", str(out), "--quiet",
        ]  # fmt: skip

    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_module.main(args(straight)) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert run_module.main(args(broken)) == 2
    resume()
    assert run_module.main(["--resume", str(broken), "--quiet"]) == 0
    rows = [[json.loads(r) for r in (d / "metrics.jsonl").read_text().splitlines()] for d in (straight, broken)]
    assert [r["round"] for r in rows[1]] == [1, 2, 3, 4]
    for a, b in zip(*rows):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (straight, broken))
    torch.testing.assert_close(a["x"], b["x"], rtol=1e-6, atol=1e-6)


def test_hfmds_synthesis_and_resume_on_cuda(cifar_root, tmp_path, monkeypatch):
    """HFMDs' synthesis round on CUDA (its PSNR log once mixed a CPU quantile grid with CUDA pixels), resumed after
    it like the uninterrupted run (rows to 1e-6: cuDNN may pick other kernels in a new process)."""
    from tests.fl.methods.test_hfmds import hfmds_args, metrics

    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_module.main(hfmds_args(cifar_root, straight, "fedavg", "hfmds", "--device", "cuda")) == 0
    rows = metrics(straight)
    assert rows[2]["method"]["synthesis"]["pool_size"] == 10
    resume = interrupt_at(monkeypatch, 4)
    assert run_module.main(hfmds_args(cifar_root, broken, "fedavg", "hfmds", "--device", "cuda")) == 2
    resume()
    assert run_module.main(["--resume", str(broken), "--quiet"]) == 0
    for a, b in zip(rows, metrics(broken), strict=True):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)


def test_dynafed_resumed_before_round_l_on_cuda(cifar_root, tmp_path, monkeypatch):
    """DynaFed resumed before its synthesis on CUDA: the checkpoint loads the recorded trajectory onto the device,
    and recording the next round once failed there (a CUDA trajectory concatenated with a CPU row)."""
    from tests.fl.methods.test_dynafed import dynafed_args, metrics

    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_module.main(dynafed_args(cifar_root, straight, "fedavg", "--device", "cuda")) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert run_module.main(dynafed_args(cifar_root, broken, "fedavg", "--device", "cuda")) == 2
    resume()
    assert run_module.main(["--resume", str(broken), "--quiet"]) == 0
    rows = metrics(straight)
    assert [("synthesis" in r.get("method", {})) for r in rows] == [False, False, True, False, False]
    for a, b in zip(rows, metrics(broken), strict=True):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)
