"""fl.matmul_conv: convolutions as unfold + matrix product equal nn.Conv2d's (float64), alone and vmapped over
per-model parameters as a fleet's step evaluates them."""

from __future__ import annotations

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
