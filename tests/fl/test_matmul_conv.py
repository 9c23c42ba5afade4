"""fl.matmul_conv: convolutions as unfold + matrix product equal nn.Conv2d's (float64), alone and vmapped over
per-model parameters as a fleet's step evaluates them."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fl.matmul_conv import MatmulConv2d, as_matmul
from fl.models import build_model

CASES = [("hfmds-cnn", (1, 28, 28), {}), ("fedcog-cnn", (1, 28, 28), {}), ("convnet3", (3, 32, 32), {"width": 8}),
         ("vgg11", (3, 32, 32), {})]  # fmt: skip


@pytest.mark.parametrize("name, shape, options", CASES)
def test_a_model_with_matmul_convolutions_gives_the_same_outputs_and_gradients(name, shape, options):
    torch.manual_seed(0)
    model = build_model(name, shape, 10, **options).double().eval()  # eval: VGG-11's dropout draws nothing
    matmul = as_matmul(model)
    assert any(type(m) is MatmulConv2d for m in matmul.modules())
    assert not any(type(m) is MatmulConv2d for m in model.modules())  # the original is left as it was
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(3, *shape, dtype=torch.float64), torch.tensor([0, 4, 9])

    def loss(m, p):
        return F.cross_entropy(functional_call(m, p, (x,)), y)

    assert torch.allclose(functional_call(matmul, params, (x,)), model(x), rtol=0, atol=1e-12)
    ours, theirs = grad(lambda p: loss(matmul, p))(params), grad(lambda p: loss(model, p))(params)
    assert all(torch.allclose(ours[k], theirs[k], rtol=1e-10, atol=1e-12) for k in params)


def test_vmapped_over_models_as_a_fleet_evaluates_them():
    torch.manual_seed(1)
    model = build_model("hfmds-cnn", (1, 28, 28), 10).double()
    matmul = as_matmul(model)
    stacked = {k: v.detach() + 0.01 * torch.randn(4, *v.shape, dtype=v.dtype) for k, v in model.named_parameters()}
    x, y = torch.randn(4, 5, 1, 28, 28, dtype=torch.float64), torch.randint(0, 10, (4, 5))

    def gradients(m):
        return vmap(grad(lambda p, xb, yb: F.cross_entropy(functional_call(m, p, (xb,)), yb)))(stacked, x, y)

    ours, theirs = gradients(matmul), gradients(model)
    assert all(torch.allclose(ours[k], theirs[k], rtol=1e-10, atol=1e-12) for k in stacked)


def test_strides_dilations_and_no_bias_and_a_refused_grouped_convolution():
    torch.manual_seed(2)
    x = torch.randn(2, 4, 11, 9, dtype=torch.float64)
    for options in ({"stride": 2, "padding": 1}, {"dilation": 2, "padding": (2, 1), "bias": False}):
        conv = nn.Conv2d(4, 6, (3, 2), **options).double()
        assert torch.allclose(as_matmul(conv)(x), conv(x), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="one group"):
        MatmulConv2d(4, 4, 3, groups=2).double()(x)


def cnn(root, seed: int, conv: str):
    from tests.fl.test_fleet import tiny

    sets = ["model.name='fedcog-cnn'", "train.backend='batched'", "train.rounds=2", f"model.conv='{conv}'"]
    return tiny(root, seed, "fedavg", *sets)


def test_a_run_with_matmul_convolutions_equals_the_torch_run_to_rounding(cifar_root, tmp_path):
    from tests.fl.test_fleet import alone, numbers

    rows_t, x_t = numbers(alone(cnn(cifar_root, 0, "torch"), tmp_path / "torch"))
    rows_m, x_m = numbers(alone(cnn(cifar_root, 0, "matmul"), tmp_path / "matmul"))
    assert not torch.equal(x_t, x_m) and torch.allclose(x_t, x_m, rtol=0, atol=1e-12)  # another summation order
    assert [r.get("test_accuracy") for r in rows_t] == [r.get("test_accuracy") for r in rows_m]
    saved = json.loads((tmp_path / "matmul" / "config.json").read_text())
    assert saved["model"]["conv"] == "matmul"


def test_a_fleet_of_matmul_runs_equals_them_alone_bit_for_bit(cifar_root, tmp_path):
    from tests.fl.test_fleet import alone, assert_same, fleet

    configs = {seed: cnn(cifar_root, seed, "matmul") for seed in (0, 1)}
    fleet([(c, tmp_path / f"fleet_{s}") for s, c in configs.items()])
    for seed, config in configs.items():
        assert_same(tmp_path / f"fleet_{seed}", alone(config, tmp_path / f"alone_{seed}"))


def test_the_setting_is_checked_and_is_part_of_a_run_s_identity_only_when_set():
    from fl.config import load_config
    from lab.records.keys import run_key
    from theory.errors import InputError

    torch_conv, matmul = load_config(None, []), load_config(None, ["model.conv='matmul'"])
    assert "conv" not in torch_conv.identity()["model"] and matmul.identity()["model"]["conv"] == "matmul"
    assert run_key(torch_conv) != run_key(matmul)
    with pytest.raises(InputError, match=r"model\.conv"):
        load_config(None, ["model.conv='fft'"])
