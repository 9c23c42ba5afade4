"""The engine on CUDA (marker ``gpu``; every test here skips without a CUDA device): every algorithm's rounds,
sequential and batched, against the CPU in float64; the estimators; a DDPM's training step and sampling; a run
interrupted and resumed through ``python -m fl.run --device cuda``; DynaFed's fast matching path (TF32,
channels-last, CUDA graphs) against the CPU's reference path; the batched rounds with their steps replayed as a
CUDA graph (fl/graphs.py) against the eager rounds, bit for bit.

Tolerances: float64 rounds on CUDA agree with the CPU to 1e-9 (the same arithmetic, different summation order in
the kernels); the estimators to 1e-6 relative; a resumed CUDA run repeats the uninterrupted one to 1e-6 in the
model (cuDNN may pick different kernels in a new process; the MLP used here has none). DynaFed's D_syn on CUDA in
float64 (channels-last and CUDA graphs; TF32 does not touch float64) agrees with the CPU reference path's to 1e-9;
in float32 with TF32, one matching iteration's loss agrees with the float64 CPU reference to 1e-3 and its gradient
in X to 5e-2 (relative norms) with a cosine above 0.999: on the CPU, float32 alone puts that gradient 2.1e-3 from
float64 and TF32's rounding of the forward convolutions' operands (emulated) 7.1e-3 (cosine 0.99997; ConvNet-3 of
width 32, 150 images, s' = 20, a trajectory of SGD on Fashion-MNIST).
"""

from __future__ import annotations

import itertools
import json
import warnings

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
def test_cuda_graphs_change_no_number(name, monkeypatch):
    """The batched rounds with their steps recorded as a CUDA graph and replayed (fl/graphs.py) equal the eager
    rounds bit for bit on CUDA: the replayed kernels are the eager ones. A capture that failed would warn (and
    run eagerly): here it is an error."""
    from tests.fl.test_fleet import use_graphs  # train.graphs for the calls that follow

    use_graphs(monkeypatch, "off")
    eager = rounds("cuda", name, "batched")
    use_graphs(monkeypatch, "on")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graphed = rounds("cuda", name, "batched")
    assert torch.equal(graphed.x, eager.x)
    for key, value in eager.clients.items():
        assert torch.equal(graphed.clients[key], value)


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


def test_hfmds_inversions_together_on_cuda_equal_the_cpus_one_by_one():
    """HFMDs' syntheses on CUDA invert every client at once (fl.methods.hfmds.inversion_parts); in float64 each
    client's x̂ equals the CPU's inversion of that client alone to 1e-9."""
    from fl.methods.hfmds import invert, invert_together
    from fl.models import build_model

    torch.manual_seed(0)
    model = build_model("hfmds-cnn", (1, 28, 28), 10).double()
    clients = []
    for k, n in enumerate((17, 30)):
        g = torch.Generator().manual_seed(k)
        x, y = torch.randn(n, 1, 28, 28, generator=g, dtype=torch.float64), torch.randint(0, 10, (n,), generator=g)
        clients.append((x, y, torch.randn(n, model.feature_dim, generator=g, dtype=torch.float64), k))
    alone = [invert(model, x, y, p, 0.5, 4, 0.02, torch.Generator().manual_seed(10 + k))[0] for x, y, p, k in clients]
    on_cuda = [(x.cuda(), y.cuda(), p.cuda(),
                torch.randn(x.shape, generator=torch.Generator().manual_seed(10 + k), dtype=torch.float64).cuda())
               for x, y, p, k in clients]  # fmt: skip
    together = invert_together(model.cuda(), on_cuda, 0.5, 4, 0.02)
    for (x_hat, _), expected in zip(together, alone):
        torch.testing.assert_close(x_hat.cpu(), expected, rtol=1e-9, atol=1e-9)


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


def test_dynafed_fast_matching_on_cuda_gives_the_cpu_reference_d_syn():
    """float64, five outer iterations (Adam on X, y and α, DSA, the segment draws): the fast path on CUDA with
    channels-last and CUDA graphs (which really ran: no note that they were dropped) against the reference path on
    the CPU."""
    import dataclasses

    from fl.methods.dynafed import DynaFed
    from tests.fl.methods.test_dynafed_fast import convnet, server_round

    method = DynaFed(trajectory_rounds=6, segment=3, inner_steps=3, per_class=2, iterations=5, log_every=1,
                     inner_lr_lr=1e-3)  # fmt: skip
    out = {}
    for device, path in (("cpu", "reference"), ("cuda", "auto")):
        method = dataclasses.replace(method, matching=path)
        s = server_round(convnet(device=device))
        method.synthesize(s)
        out[device] = s
    assert out["cuda"].log["synthesis"]["path"] == "fast+instance_norm+channels_last+graphs"
    for key in ("x_syn", "y_syn", "alpha"):
        torch.testing.assert_close(out["cuda"].state["server"][key].cpu(), out["cpu"].state["server"][key],
                                   rtol=1e-9, atol=1e-9)  # fmt: skip


def test_a_finished_synthesis_on_cuda_hands_its_graph_pools_back():
    """Three syntheses one after another in one process (what a fleet's runs do at their synthesis round) on the
    graphed fast path: the memory CUDA reserves does not grow from one synthesis to the next
    (the H100 bench saw 43.4 GiB reserved for three fast syntheses alive together against 21.7 for one), and less
    than at the peak of a synthesis (its graph pools are given back)."""
    from fl.methods.dynafed import DynaFed
    from tests.fl.methods.test_dynafed_fast import convnet, server_round

    method = DynaFed(trajectory_rounds=6, segment=3, inner_steps=3, per_class=2, iterations=2, matching="auto")
    flat = convnet(width=16, device="cuda")
    after = []
    for seed in range(3):
        s = server_round(flat, seed=seed)
        torch.cuda.reset_peak_memory_stats()
        method.synthesize(s)
        assert s.log["synthesis"]["path"].endswith("+graphs")
        torch.cuda.synchronize()
        after.append(torch.cuda.memory_reserved())
        assert after[-1] < torch.cuda.max_memory_reserved()
    # what pools kept alive would show is growth with every synthesis; the H100 (2026-11-28) measured 4 MiB more
    # reserved after the second than after the first (2,227,175,424 and 2,231,369,728 bytes) and nothing more after
    # the third: the allocator's blocks settling, not a pool per synthesis
    assert after[2] <= after[1] + 2 * 2**20 and after[1] <= after[0] + 16 * 2**20


def test_a_stopped_ddpm_training_on_cuda_resumes_bit_for_bit(tmp_path, monkeypatch):
    """The CPU test's DDPM stopped after its second epoch and trained again, on CUDA: its resume.pt loads on the CPU
    (RNG states must be there) and its weights and moments onto the device; the same weights, EMA and set."""
    from tests.fl.synthesis.conftest import make_tiny_dataset
    from tests.fl.synthesis.test_fedssyn import test_a_stopped_ddpm_training_resumes_bit_for_bit as check

    check(tmp_path, monkeypatch, make_tiny_dataset, 12, "cuda")


def test_dynafed_fast_matching_on_cuda_in_float32_with_tf32():
    """float32 with every switch (TF32, channels-last, CUDA graphs) against the reference path in float64 on the
    CPU: one matching iteration's loss and its gradients (tolerances in the module docstring), the graphs checked
    and kept."""
    import torch.nn.functional as F

    from fl.methods.dynafed import DynaFed, FastUnroll, Matching, MatchingPath, match_loss, relative_error
    from fl.models import build_model

    shape, generator = (1, 28, 28), torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    flat = FlatModel(build_model("convnet3", shape, 10, width=16).double())
    images = torch.randn(60, *shape, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (60,), generator=generator)
    w, trajectory = flat.params.detach().clone(), []
    for _ in range(8):  # a trajectory of full-batch SGD on random images (a random walk is far worse conditioned)
        trajectory.append(w)
        w_ = w.clone().requires_grad_(True)
        loss = F.cross_entropy(torch.func.functional_call(flat.model, flat.named(w_), (images,)), labels)
        w = w - 0.1 * torch.autograd.grad(loss, w_)[0]
    trajectory = torch.stack(trajectory)
    x0 = torch.randn(50, *shape, generator=generator, dtype=torch.float64)
    results = {}
    for device, dtype in (("cpu", torch.float64), ("cuda", torch.float32)):
        model = FlatModel(build_model("convnet3", shape, 10, width=16).to(device=device, dtype=dtype))
        inputs = x0.to(device=device, dtype=dtype).requires_grad_(True)
        logits = torch.zeros(50, 10, device=device, dtype=dtype, requires_grad=True)
        lr = torch.tensor(0.04, device=device, dtype=dtype, requires_grad=True)
        fast = None if device == "cpu" else FastUnroll(model.model, model.layout, MatchingPath().on(device, dtype))
        draws = DynaFed().augmenter(torch.Generator().manual_seed(1), shape)
        matching = Matching(model.model, model.named, trajectory.to(device=device, dtype=dtype), inputs, logits, lr,
                            20, "euclidean", draws, False)  # fmt: skip
        loss = match_loss(matching, 1, [5, 2, 3], fast)
        results[device] = [v.detach().cpu().double() for v in (loss, *torch.autograd.grad(loss, (inputs, logits, lr)))]
    assert fast.describe() == "fast+instance_norm+tf32+channels_last+graphs"
    (loss, grad_x, _, _), (loss_ref, grad_x_ref, _, _) = results["cuda"], results["cpu"]
    assert relative_error(loss, loss_ref) < 1e-3
    assert relative_error(grad_x, grad_x_ref) < 5e-2
    assert float(F.cosine_similarity(grad_x.flatten(), grad_x_ref.flatten(), 0)) > 0.999


def test_the_cpu_emulation_of_tf32_is_what_cuda_computes():
    """fl.precision's emulated TF32 (operands rounded to nearest, ties away, FP32 accumulation) against CUDA's
    TF32 convolution and matrix product, forward and backward, on the same float32 operands: the emulation lies far
    closer to CUDA's TF32 than CUDA's FP32 does (were the hardware to truncate instead, the two would differ about
    as much as TF32 and FP32 do, and this fails)."""
    from fl.methods.dynafed import relative_error
    from fl.precision import arithmetic

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, 14, 14, generator=generator)
    w = torch.randn(64, 32, 3, 3, generator=generator)
    g = torch.randn(8, 64, 12, 12, generator=generator)
    a, b = torch.randn(256, 512, generator=generator), torch.randn(512, 128, generator=generator)

    def work(device: str, precision: str) -> list[torch.Tensor]:
        xs, ws = (t.to(device).requires_grad_() for t in (x, w))
        with arithmetic(precision, device):
            y = torch.nn.functional.conv2d(xs, ws)
            grads = torch.autograd.grad(y, (xs, ws), g.to(device))
            product = a.to(device) @ b.to(device)
        return [t.detach().cpu() for t in (y, *grads, product)]

    emulated, tf32, fp32 = work("cpu", "tf32"), work("cuda", "tf32"), work("cuda", "fp32")
    # TF32 permits tensor cores, it does not demand them: where cuDNN or cuBLAS chose a float32 kernel anyway, the
    # output says nothing of the emulation and is left out. On the 2026-11-27 H100 the convolution's forward gave
    # CUDA's FP32 result bit for bit, and an input gradient differed from it by 2.4e-8 (another float32 summation
    # order); TF32's rounding moves these outputs by ~3e-4. At least one output must have run in TF32
    in_tf32 = [relative_error(exact, theirs) > 1e-5 for theirs, exact in zip(tf32, fp32, strict=True)]
    assert any(in_tf32)
    for mine, theirs, exact, checked in zip(emulated, tf32, fp32, in_tf32, strict=True):
        if checked:
            assert relative_error(mine, theirs) < 0.3 * relative_error(exact, theirs)
