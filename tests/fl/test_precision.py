"""fl/precision.py: TF32 rounding against its bit-level definition, the CPU's TF32 emulation against products of
pre-rounded operands (forward and backward), the precision switch, and DynaFed's synthesis in each precision."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fl.flat import FlatModel
from fl.methods.dynafed import (
    DynaFed,
    MatchingPath,
    Progress,
    Synthesis,
    relative_error,
    synthesize_together,
)
from fl.models import build_model
from fl.precision import PRECISIONS, EmulatedTF32, arithmetic, check_precision, round_tf32
from tests.fl.methods.test_dynafed_fast import CLASSES, SHAPE, server_round
from theory.errors import InputError

ULP = 2.0**-10  # TF32's spacing between 1 and 2


def test_round_tf32_to_nearest_ties_away_from_zero():
    x = torch.tensor([1 + ULP / 2, 1 + ULP / 4, 1 + 3 * ULP / 2, -(1 + ULP / 2), 1 + ULP, 0.0, -0.0, 2.0**-130])
    expected = [1 + ULP, 1.0, 1 + 2 * ULP, -(1 + ULP), 1 + ULP, 0.0, -0.0, 2.0**-130]  # 2^-130: a subnormal
    assert round_tf32(x).tolist() == expected
    special = torch.tensor([float("inf"), -float("inf"), float("nan")])
    out = round_tf32(special)
    assert out[:2].tolist() == [float("inf"), -float("inf")] and out[2].isnan()
    with pytest.raises(TypeError, match="float32"):
        round_tf32(torch.ones(2, dtype=torch.float64))


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_subnormal=False, min_value=-(2.0**127), max_value=2.0**127))
def test_round_tf32_keeps_ten_mantissa_bits_within_half_an_ulp(value):
    x = torch.tensor([value], dtype=torch.float32)
    r = round_tf32(x)
    assert int(r.view(torch.int32)) & 0x1FFF == 0  # the 13 dropped bits are zero
    assert abs(float(r) - value) <= 2.0**-11 * abs(value)
    assert torch.equal(round_tf32(r), r) and torch.equal(round_tf32(-x), -r)


def test_emulated_products_take_rounded_operands_and_accumulate_in_float32():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 48, generator=generator), torch.randn(48, 16, generator=generator)
    with EmulatedTF32():
        product = a @ b
    exact = round_tf32(a).double() @ round_tf32(b).double()
    assert (product.double() - exact).abs().max() < 1e-5  # float32 accumulation only
    assert (a.double() @ b.double() - exact).abs().max() > 1e-3  # the rounding is visible at this size
    bias = torch.full((4,), 1 + ULP / 4)  # not a TF32 number: the added term is not an operand
    with EmulatedTF32():
        out = torch.addmm(bias, torch.zeros(4, 3), torch.zeros(3, 4))
    assert torch.equal(out, bias.expand(4, 4))


def test_emulated_convolutions_round_every_operand_of_the_backward():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 7, generator=generator, requires_grad=True)
    w = torch.randn(5, 3, 3, 3, generator=generator, requires_grad=True)
    g = torch.randn(2, 5, 5, 5, generator=generator)
    with EmulatedTF32():
        y = torch.nn.functional.conv2d(x, w)
        dx, dw = torch.autograd.grad(y, (x, w), g)
    rx, rw, rg = round_tf32(x.detach()), round_tf32(w.detach()), round_tf32(g)
    assert torch.equal(y, torch.nn.functional.conv2d(rx, rw))
    theirs = torch.ops.aten.convolution_backward(rg, rx, rw, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1,
                                                 (True, True, False))  # fmt: skip
    assert torch.equal(dx, theirs[0]) and torch.equal(dw, theirs[1])


def test_the_switch_runs_each_precision_and_restores_what_was_before():
    generator = torch.Generator().manual_seed(2)
    a, b = torch.randn(8, 8, generator=generator), torch.randn(8, 8, generator=generator)
    plain = a @ b
    with arithmetic("fp32", "cpu"):
        assert torch.equal(a @ b, plain) and (a @ b).dtype == torch.float32
    with arithmetic("tf32", "cpu"):
        assert torch.equal(a @ b, round_tf32(a) @ round_tf32(b))
    with arithmetic("bf16", "cpu"):
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    assert torch.equal(a @ b, torch.mm(a, b))  # no mode left behind
    for bad in ("fp16", "TF32", ""):
        with pytest.raises(InputError, match="must be one of fp32, tf32, bf16"):
            check_precision(bad, "method.precision")
        with pytest.raises(InputError):
            with arithmetic(bad, "cpu"):
                pass


def float32_round():
    torch.manual_seed(0)
    flat = FlatModel(build_model("convnet3", SHAPE, CLASSES, width=4).float())
    s = server_round(flat)
    s.state["server"]["trajectory"] = s.state["server"]["trajectory"].float()
    return s


def test_dynafed_synthesises_in_each_precision():
    """float32 D_syn: "fp32" on the CPU is "auto" bit for bit; TF32 and bf16 move it by their rounding, TF32 (10
    mantissa bits) less than bf16 (7), both less than the synthesis moved it; the log names the precision; a bad
    precision is refused by check."""
    out = {}
    for precision, iterations in (("start", 0), ("auto", 4), *((p, 4) for p in PRECISIONS)):
        method = DynaFed(trajectory_rounds=6, segment=3, inner_steps=3, per_class=2, iterations=iterations,
                         log_every=1, precision="auto" if precision == "start" else precision,
                         matching="auto")  # fmt: skip
        s = float32_round()
        method.synthesize(s)
        out[precision] = (s.state["server"]["x_syn"], s.log["synthesis"]["path"])
    assert torch.equal(out["auto"][0], out["fp32"][0])
    assert out["auto"][1] == "fast+instance_norm" and out["tf32"][1] == "fast+instance_norm; tf32"
    moved = relative_error(out["fp32"][0], out["start"][0])
    tf32, bf16 = (relative_error(out[p][0], out["fp32"][0]) for p in ("tf32", "bf16"))
    assert 0 < tf32 < bf16 < moved, (tf32, bf16, moved)
    with pytest.raises(InputError, match="precision"):
        DynaFed(precision="half").check()


def test_the_batched_synthesis_runs_in_the_precision_too():
    """The batched path (vmapped over runs) under emulated TF32: its D_syn is the fast path's in TF32 to far less
    than TF32's own effect (the grouped convolutions sum in another order), and it differs from its FP32 D_syn."""
    out = {}
    for precision in ("fp32", "tf32"):
        for path in ("auto", "batched"):
            method = DynaFed(trajectory_rounds=6, segment=3, inner_steps=3, per_class=2, iterations=4,
                             precision=precision)  # fmt: skip
            s = float32_round()
            job = Synthesis(method, s, MatchingPath.parse(path))
            synthesize_together([job]) if path == "batched" else job.run()
            job.finish(s)
            out[precision, path] = s.state["server"]["x_syn"], s.log["synthesis"]["path"]
    assert out["tf32", "batched"][1] == "batched (1 run); tf32"
    effect = relative_error(out["tf32", "batched"][0], out["fp32", "batched"][0])
    assert relative_error(out["tf32", "batched"][0], out["tf32", "auto"][0]) < effect / 10


def test_a_saved_synthesis_counts_for_its_own_precision_only():
    """The progress key: "auto" keys as before the setting existed (the method's repr without it), so a synthesis
    saved by earlier code resumes; another precision gets a key of its own."""
    trajectory = torch.zeros(3, 4)
    keys = {p: Progress(None, DynaFed(precision=p), trajectory, 0).key for p in ("auto", *PRECISIONS)}
    assert len(set(keys.values())) == 4
    method = dataclasses.replace(DynaFed(), save_every=1)  # its repr as written before the field existed:
    fields = ", ".join(f"{f.name}={getattr(method, f.name)!r}" for f in dataclasses.fields(method)
                       if f.name not in ("precision", "matching"))  # fmt: skip
    earlier = f"(DynaFed({fields}), 0)"
    assert "precision" not in earlier and earlier.endswith("class_mean=False), 0)")
    digest = hashlib.sha256(trajectory.double().numpy().tobytes())
    digest.update(earlier.encode())
    assert keys["auto"] == digest.hexdigest()


def test_the_path_leaves_tf32_and_graphs_to_the_precision_on_cuda():
    """On CUDA "auto" keeps the fast path's TF32 switch; an explicit precision drops it (fl.precision decides), and
    BF16 autocast drops the graphs; the CPU gets no CUDA switch whatever the precision."""
    auto = MatchingPath()
    assert auto.on("cuda", torch.float32, "auto").describe() == "fast+instance_norm+tf32+channels_last+graphs"
    assert auto.on("cuda", torch.float32, "fp32").describe() == "fast+instance_norm+channels_last+graphs"
    assert auto.on("cuda", torch.float32, "tf32").describe() == "fast+instance_norm+channels_last+graphs"
    assert auto.on("cuda", torch.float32, "bf16").describe() == "fast+instance_norm+channels_last"
    assert {auto.on("cpu", torch.float32, p).describe() for p in ("auto", *PRECISIONS)} == {"fast+instance_norm"}
