"""DynaFed's fast matching path (fl.methods.dynafed.FastUnroll) against the reference path, in float64 on the CPU:
the instance norm's and the CPU pool's first and second derivatives against autograd's own of ``F.group_norm`` and
``F.avg_pool2d``; the unroll's loss and gradients in X, y and α; a whole synthesis (Adam on X, y and α, DSA, the
segment draws) giving the same D_syn to 1e-10; the path's switches and the environment variable that picks them.
The CUDA side (TF32, channels-last, CUDA graphs) is tested in tests/fl/test_gpu.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl.clients import ClientSet
from fl.flat import FlatModel
from fl.methods.base import ServerRound
from fl.methods.dynafed import (
    DynaFed,
    FastUnroll,
    Matching,
    MatchingPath,
    average_pool,
    instance_norm,
    match_loss,
    relative_error,
)
from fl.models import build_model
from theory.errors import InputError

SHAPE, CLASSES = (1, 12, 12), 3


def convnet(width: int = 4, device: str = "cpu") -> FlatModel:
    torch.manual_seed(0)
    return FlatModel(build_model("convnet3", SHAPE, CLASSES, width=width).double().to(device))


def test_instance_norm_matches_group_norm_to_the_second_derivative():
    generator = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(3, 4, 5, 6, generator=generator, dtype=torch.float64) + 2).requires_grad_()
    weight = torch.randn(4, generator=generator, dtype=torch.float64).requires_grad_()
    bias = torch.randn(4, generator=generator, dtype=torch.float64).requires_grad_()
    cotangent = torch.randn(3, 4, 5, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    outputs = {}
    for name, norm in (
        ("mine", lambda *a: instance_norm(*a, 1e-5)),
        ("torch", lambda *a: F.group_norm(a[0], 4, *a[1:])),
    ):
        y = norm(x, weight, bias)
        first = torch.autograd.grad(y, (x, weight, bias), cotangent, create_graph=True)
        # a scalar of the first derivatives (as the unroll's next steps make of them), differentiated once more
        second = torch.autograd.grad(sum((g * g.detach().cos()).sum() for g in first), (x, weight, cotangent))
        outputs[name] = [y, *first, *second]
    for mine, theirs in zip(outputs["mine"], outputs["torch"], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)
    small = [t.detach()[:2, :2, :3, :3].clone().requires_grad_() for t in (x,)] + [weight[:2], bias[:2]]
    assert torch.autograd.gradgradcheck(lambda *a: instance_norm(*a, 1e-5), tuple(small))


@pytest.mark.parametrize("shape", [(2, 3, 6, 8), (2, 3, 7, 5)])
def test_the_cpu_pool_is_avg_pool2d_to_the_second_derivative(shape):
    """Even sides, and odd ones (the last row or column dropped, as avg_pool2d's floor mode does)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=generator, dtype=torch.float64, requires_grad=True)
    pool = nn.AvgPool2d(2)
    cotangent = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2, generator=generator,
                            dtype=torch.float64, requires_grad=True)  # fmt: skip
    outputs = []
    for f in (lambda v: average_pool(v, pool), lambda v: F.avg_pool2d(v, 2)):
        y = f(x)
        (first,) = torch.autograd.grad(y, x, cotangent, create_graph=True)
        (second,) = torch.autograd.grad((first * first).sum(), cotangent)
        outputs.append([y, first, second])
    for mine, theirs in zip(*outputs, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-14, atol=1e-15)
    assert torch.autograd.gradgradcheck(lambda v: average_pool(v, pool), (x,))


class TanhInForward(nn.Module):
    """A model whose forward is not head(body(x)): the fast path finds out on the numbers of its first unroll and
    calls the module through functional_call."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(144, 5))
        self.head = nn.Linear(5, CLASSES)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def trajectory_for(flat: FlatModel, generator: torch.Generator) -> torch.Tensor:
    """Six models about the flat model's parameters (float64, on the CPU, as DynaFed records them)."""
    noise = [torch.randn(flat.n_params, generator=generator, dtype=torch.float64) for _ in range(6)]
    return torch.stack([flat.params.detach().cpu().double() + 0.05 * k * n for k, n in enumerate(noise)])


@pytest.mark.parametrize(
    "model, path, layers, augment, class_mean",
    [("convnet3", "fast+instance_norm", True, "dsa", False), ("convnet3", "fast", True, "dsa", False),
     ("convnet3", "fast+instance_norm", True, "none", True), ("mlp", "fast", True, "dsa", False),
     ("tanh", "fast", False, "none", False)],
)  # fmt: skip
def test_the_fast_unroll_gives_the_reference_loss_and_gradients(model, path, layers, augment, class_mean):
    torch.manual_seed(0)
    module = {"convnet3": lambda: build_model("convnet3", SHAPE, CLASSES, width=4), "tanh": TanhInForward,
              "mlp": lambda: build_model("mlp", SHAPE, CLASSES, hidden=7)}[model]()  # fmt: skip
    flat = FlatModel(module.double())
    generator = torch.Generator().manual_seed(1)
    trajectory = trajectory_for(flat, generator)
    inputs = torch.randn(6, *SHAPE, generator=generator, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(6, CLASSES, generator=generator, dtype=torch.float64, requires_grad=True)
    lr = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    fast = FastUnroll(flat.model, flat.layout, MatchingPath.parse(path).on("cpu", torch.float64))
    results = []
    for unroll in (None, fast):
        method = DynaFed(augment=augment)
        draws = method.augmenter(torch.Generator().manual_seed(2), SHAPE)
        for t, middle in ((0, [3, 1, 2]), (1, [4])):  # twice: the second call reuses what the first set up
            matching = Matching(flat.model, flat.named, trajectory, inputs, logits, lr, 4, "euclidean", draws,
                                class_mean)  # fmt: skip
            loss = match_loss(matching, t, middle, unroll)
            results.append([loss, *torch.autograd.grad(loss, (inputs, logits, lr))])
    assert (fast.layers is not None) == layers
    assert fast.describe() == path if layers else fast.describe().startswith(f"{path} (functional_call); layers differ")
    half = len(results) // 2
    for reference, mine in zip(results[:half], results[half:], strict=True):
        for a, b in zip(mine, reference, strict=True):
            assert relative_error(a, b) < 1e-12
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def server_round(flat: FlatModel, seed: int = 4) -> ServerRound:
    """Round L of a 3-client problem on (1, 12, 12) images with the trajectory recorded (float64; the server model
    on the flat model's device)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(30, *SHAPE, generator=generator, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (30,), generator=generator)
    parts = [torch.arange(0, 10), torch.arange(10, 20), torch.arange(20, 30)]
    data = ClientSet(x, y, parts, parts, parts, [torch.empty(0, dtype=torch.int64)] * 3, x, y, CLASSES)
    state = {"server": {"trajectory": trajectory_for(flat, generator)}}
    return ServerRound(t=6, x=flat.params.detach().clone(), flat=flat, data=data, state=state, seed=seed)


@pytest.mark.parametrize("target_draw, class_mean", [("paper", False), ("code", True)])
def test_a_synthesis_on_the_fast_path_gives_the_reference_d_syn(target_draw, class_mean):
    """Five outer iterations (Adam on X, y and α; DSA in every inner step; the segment draws) on each path (the
    batched one: vmapped over one run): the same D_syn, soft labels and α to 1e-10, and the same logged losses."""
    method = DynaFed(trajectory_rounds=6, segment=3, inner_steps=3, per_class=2, iterations=5, log_every=1,
                     target_draw=target_draw, class_mean=class_mean, inner_lr_lr=1e-3)  # fmt: skip
    out = {}
    for name in ("reference", "auto", "fast", "batched"):
        method = dataclasses.replace(method, matching=name)
        s = server_round(convnet())
        method.synthesize(s)
        out[name] = s
    reference = out.pop("reference")
    assert reference.log["synthesis"]["path"] == "reference"
    assert [s.log["synthesis"]["path"] for s in out.values()] == ["fast+instance_norm", "fast", "batched (1 run)"]
    assert not torch.equal(reference.state["server"]["alpha"], torch.tensor(method.inner_lr, dtype=torch.float64))
    for fast in out.values():
        for key in ("x_syn", "y_syn", "alpha"):
            a, b = fast.state["server"][key], reference.state["server"][key]
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
            assert not torch.equal(b, torch.zeros_like(b))
        losses = [[row[1] for row in s.log["synthesis"]["loss"]] for s in (fast, reference)]
        assert losses[0] == pytest.approx(losses[1], rel=1e-10) and len(losses[0]) == 5


def test_the_matching_path_switches():
    reference = MatchingPath(False, False, False, False, False)
    assert MatchingPath.parse("auto") == MatchingPath.parse("") == MatchingPath()
    assert MatchingPath.parse("reference") == reference
    assert MatchingPath.parse("fast") == MatchingPath(True, False, False, False, False)
    assert MatchingPath.parse("fast+graphs+tf32") == MatchingPath(True, False, True, False, True)
    for bad in ("slow", "fast+tf33", "fast+tf32+tf32", "reference+graphs"):
        with pytest.raises(InputError, match=r"^config method\.matching: "):
            MatchingPath.parse(bad)
        with pytest.raises(InputError, match=r"^config method\.matching: "):
            DynaFed(matching=bad).check()
    auto = MatchingPath()
    assert auto.on("cpu", torch.float32).describe() == "fast+instance_norm"  # no CUDA switch on the CPU
    assert auto.on("cuda", torch.float64).describe() == "fast+instance_norm+channels_last+graphs"  # no TF32
    assert auto.on("cuda:0", torch.float32).describe() == "fast+instance_norm+tf32+channels_last+graphs"
    assert MatchingPath.parse("fast+instance_norm+graphs").on("cpu", torch.float32).describe() == "fast+instance_norm"
    assert MatchingPath.parse("reference").on("cuda", torch.float32) == reference
    batched = MatchingPath.parse("batched")
    assert batched.batched and not batched.fast and batched.on("cuda", torch.float32) == batched
    assert batched.describe() == "batched"


def test_a_bad_matching_path_stops_the_synthesis_with_one_line():
    with pytest.raises(InputError, match=r"^config method\.matching: 'turbo' must be"):
        DynaFed(trajectory_rounds=6, segment=3, iterations=1, matching="turbo").synthesize(server_round(convnet()))


@pytest.mark.parametrize("capture", ["works", "fails", "wrong"])
def test_the_graph_switch_is_checked_and_dropped_when_capture_fails_or_disagrees(monkeypatch, capture):
    """The CUDA-graph logic on the CPU, with ``make_graphed_callables`` replaced: a capture that works (here: the
    eager steps themselves, as a graph replays them) is used; one that raises, or whose steps compute something
    else, is dropped with a note, and the unroll is the reference's either way."""
    seen = {}

    def make_graphed_callables(callables, samples, allow_unused_input=False):
        seen["requires_grad"] = [[t.requires_grad for t in sample] for sample in samples]
        if capture == "fails":
            raise RuntimeError("operation not permitted when stream is capturing")
        if capture == "wrong":
            return tuple(lambda w, b, p, a, f=f: f(w, b, p, 2 * a) for f in callables)
        return tuple(callables)

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", make_graphed_callables)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    flat = convnet()
    generator = torch.Generator().manual_seed(1)
    trajectory = trajectory_for(flat, generator)
    inputs = torch.randn(6, *SHAPE, generator=generator, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(6, CLASSES, generator=generator, dtype=torch.float64, requires_grad=True)
    lr = torch.tensor(0.3, dtype=torch.float64)  # a fixed α: no gradient wanted
    fast = FastUnroll(flat.model, flat.layout, MatchingPath(True, True, False, False, True))
    results = []
    for unroll in (None, fast, fast):  # the second fast call replays what the first captured
        draws = DynaFed().augmenter(torch.Generator().manual_seed(2), SHAPE)
        matching = Matching(flat.model, flat.named, trajectory, inputs, logits, lr, 3, "euclidean", draws, False)
        loss = match_loss(matching, 0, [3, 1, 2], unroll)
        results.append([loss, *torch.autograd.grad(loss, (inputs, logits))])
    for mine in results[1:]:
        for a, b in zip(mine, results[0], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # w^t needs no gradient in the first step, every later step's w does; X and y do, a fixed α does not
    assert seen["requires_grad"] == [[False, True, True, False]] + [[True, True, True, False]] * 2
    assert fast.describe() == {
        "works": "fast+instance_norm+graphs",
        "fails": "fast+instance_norm; graphs off: capture failed (RuntimeError: operation not permitted when stream "
        "is capturing)",
    }.get(capture, fast.describe())
    if capture == "wrong":
        assert fast.describe().startswith("fast+instance_norm; graphs off: they differ from the eager steps by")


def test_a_finished_synthesis_gives_its_graphs_and_memory_back(monkeypatch):
    """After ``DynaFed.synthesize`` nothing of the synthesis stays alive: not its job, not its fast path, not the
    graphed steps (stand-ins here whose closures refer back to their FastUnroll, as CUDA's do), and on CUDA the
    allocator's free blocks go back to the device; D_syn, its labels and α stay in the server state."""
    import gc
    import weakref

    import fl.methods.dynafed as dynafed

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", lambda callables, samples, **kw: tuple(callables))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(MatchingPath, "on", lambda self, device, dtype, precision="auto": self)  # graphs on the CPU
    alive = []

    class Recorded(dynafed.Synthesis):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            alive.extend([weakref.ref(self), weakref.ref(self.fast)])

    monkeypatch.setattr(dynafed, "Synthesis", Recorded)
    gc.disable()  # what the collector would do some time later must not pass for what synthesize did
    try:
        s = server_round(convnet())
        DynaFed(trajectory_rounds=6, segment=3, inner_steps=2, per_class=2, iterations=2,
                matching="fast+graphs").synthesize(s)  # fmt: skip
        assert s.log["synthesis"]["path"] == "fast+graphs"  # the graphed steps were used
        assert len(alive) == 2 and all(ref() is None for ref in alive)
    finally:
        gc.enable()
    assert {"x_syn", "y_syn", "alpha"} <= set(s.state["server"])
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    dynafed.return_memory(torch.device("cpu"))
    assert emptied == []
    dynafed.return_memory(torch.device("cuda", 0))
    assert emptied == [True]
