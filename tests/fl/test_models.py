"""Models (fl.models): shapes, the body/head split FedPVR relies on, parameter counts against closed forms taken
from the papers' layer sizes, float64, gradient flow, deterministic init, and InputError guards."""

import itertools

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from fl.models import MLP, MODELS, VGG11, ConvNet3, FedCOGCNN, HFMDsCNN, build_model, count_parameters
from theory.errors import InputError

NAMES = ["mlp", "fedcog-cnn", "hfmds-cnn", "convnet3", "vgg11"]
SHAPES = [(1, 28, 28), (3, 32, 32)]
N_CLASSES = [10, 100]
# Small VGG so that the whole grid stays fast on two CPU cores; full width is only built for the counts.
KWARGS = {"vgg11": {"width_scale": 0.125}}


def shape_id(shape):
    return "x".join(map(str, shape))


grid = pytest.mark.parametrize(
    "name, in_shape, n_classes",
    [pytest.param(m, s, k, id=f"{m}-{shape_id(s)}-{k}") for m in NAMES for s in SHAPES for k in N_CLASSES],
)
per_shape = pytest.mark.parametrize(
    "name, in_shape", [pytest.param(m, s, id=f"{m}-{shape_id(s)}") for m in NAMES for s in SHAPES]
)


def make(name, in_shape, n_classes=10, seed=0, **kwargs):
    torch.manual_seed(seed)
    return build_model(name, in_shape, n_classes, **{**KWARGS.get(name, {}), **kwargs})


def batch(in_shape, n=2, dtype=torch.float32, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, *in_shape, generator=generator, dtype=dtype)


def linear(n_in, n_out):
    return n_in * n_out + n_out


def conv(c_in, c_out, k):
    return c_in * c_out * k * k + c_out


# ------------------------------------------------------------------------------------------------ shapes, split


def test_registry_names():
    assert list(MODELS) == NAMES
    assert [MODELS[n] for n in NAMES] == [MLP, FedCOGCNN, HFMDsCNN, ConvNet3, VGG11]


@grid
def test_forward_is_head_of_features(name, in_shape, n_classes):
    model = make(name, in_shape, n_classes).eval()
    x = batch(in_shape, n=3)
    with torch.no_grad():
        z = model.features(x)
        logits = model(x)
        assert z.shape == (3, model.feature_dim)
        assert logits.shape == (3, n_classes)
        assert logits.dtype == torch.float32
        assert torch.equal(logits, model.classifier(z))
        assert torch.equal(logits, model.head(z))
        assert torch.equal(z, model.body(x))


@grid
def test_head_and_body_partition_the_parameters(name, in_shape, n_classes):
    model = make(name, in_shape, n_classes)
    assert [child for child, _ in model.named_children()] == ["body", "head"]
    named = dict(model.named_parameters())
    head = {n for n, _ in named.items() if n.startswith("head.")}
    assert head and all(n.startswith("body.") for n in named.keys() - head)
    head_ids = {id(p) for p in model.head.parameters()}
    body_ids = {id(p) for p in model.body.parameters()}
    assert head_ids == {id(named[n]) for n in head}
    assert head_ids.isdisjoint(body_ids)
    assert head_ids | body_ids == {id(p) for p in model.parameters()}
    assert count_parameters(model) == count_parameters(model.head) + count_parameters(model.body)
    assert model.head(torch.zeros(1, model.feature_dim)).shape == (1, n_classes)


@per_shape
def test_float64_after_double(name, in_shape):
    model = make(name, in_shape).eval()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    model = model.double()
    x = batch(in_shape, dtype=torch.float64)
    z = model.features(x)
    logits = model(x)
    assert z.dtype == logits.dtype == torch.float64
    assert torch.equal(logits, model.head(z))


@per_shape
def test_gradients_reach_every_parameter(name, in_shape):
    model = make(name, in_shape)
    x, y = batch(in_shape, n=4), torch.tensor([0, 1, 2, 3])
    nn.functional.cross_entropy(model(x), y).backward()
    for param_name, p in model.named_parameters():
        assert p.grad is not None, param_name
        assert torch.isfinite(p.grad).all(), param_name
        assert p.grad.abs().sum() > 0, param_name


@per_shape
def test_init_is_reproducible_and_library_does_not_seed(name, in_shape):
    first, again = make(name, in_shape, seed=3), make(name, in_shape, seed=3)
    for (n1, p1), (n2, p2) in zip(first.state_dict().items(), again.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    torch.manual_seed(3)
    one = build_model(name, in_shape, 10, **KWARGS.get(name, {}))
    two = build_model(name, in_shape, 10, **KWARGS.get(name, {}))
    first_head_param = [next(m.head.parameters()) for m in (one, two)]
    assert not torch.equal(*first_head_param)


@pytest.mark.parametrize("name", NAMES)
def test_per_sample_gradients_with_vmap(name):
    """fl.estimators takes per-sample gradients with vmap(grad(functional_call)); the input check must allow it.
    (VGG11 must be in eval mode there: vmap refuses dropout's randomness by default.)"""
    model = make(name, (1, 28, 28)).eval()
    params = {n: p.detach() for n, p in model.named_parameters()}
    x, y = batch((1, 28, 28), n=3), torch.tensor([1, 0, 2])

    def loss(p, xi, yi):
        return nn.functional.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    nn.functional.cross_entropy(model(x[2:]), y[2:]).backward()
    for n, p in model.named_parameters():
        assert grads[n].shape == (3, *p.shape)
        torch.testing.assert_close(grads[n][2], p.grad)


# ------------------------------------------------------------------------------------------------ sizes


def test_mlp_parameter_count():
    for (c, h, w), hidden in [((1, 28, 28), 200), ((3, 32, 32), 200), ((3, 32, 32), 128)]:
        expected = linear(c * h * w, hidden) + linear(hidden, hidden) + linear(hidden, 10)
        assert count_parameters(MLP((c, h, w), 10, hidden=hidden)) == expected
    assert count_parameters(MLP((1, 28, 28), 10)) == 199_210


def test_fedcog_cnn_parameter_count():
    # conv5x5 1->6, conv5x5 6->16, FC 16*4*4=256 -> 120 -> 84 | head 84 -> 10
    mnist = 6 * 1 * 25 + 6 + 16 * 6 * 25 + 16 + 256 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10
    assert mnist == 44_426
    assert count_parameters(FedCOGCNN((1, 28, 28), 10)) == mnist
    cifar = conv(3, 6, 5) + conv(6, 16, 5) + linear(16 * 5 * 5, 120) + linear(120, 84) + linear(84, 10)
    assert count_parameters(FedCOGCNN((3, 32, 32), 10)) == cifar == 62_006
    assert count_parameters(FedCOGCNN((3, 32, 32), 10).head) == linear(84, 10)


def test_hfmds_cnn_parameter_count_and_split():
    # hfmds.txt: two 5x5 convs + 2x2 max-pools, FC layers of latent dimensions 1,600 and 512; last FC = classifier
    cifar = conv(3, 32, 5) + conv(32, 64, 5) + linear(1600, 512) + linear(512, 10)
    assert cifar == 878_538
    model = HFMDsCNN((3, 32, 32), 10)
    assert count_parameters(model) == cifar
    assert count_parameters(model.head) == linear(512, 10)
    assert model.feature_dim == 512
    fcs = [m for m in model.body if isinstance(m, nn.Linear)]
    assert [(fc.in_features, fc.out_features) for fc in fcs] == [(1600, 512)]
    mnist = HFMDsCNN((1, 28, 28), 10)
    assert [m.in_features for m in mnist.body if isinstance(m, nn.Linear)] == [1024]
    assert count_parameters(mnist) == conv(1, 32, 5) + conv(32, 64, 5) + linear(1024, 512) + linear(512, 10)


def test_convnet3_sizes():
    def expected(c, flat):
        blocks = conv(c, 128, 3) + 2 * 128 + 2 * (conv(128, 128, 3) + 2 * 128)
        return blocks + linear(flat, 10)

    cifar = ConvNet3((3, 32, 32), 10)
    assert cifar.feature_dim == 128 * 4 * 4
    assert count_parameters(cifar) == expected(3, 2048) == 320_010
    norms = [m for m in cifar.body if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 3 and all(m.num_groups == m.num_channels == 128 and m.affine for m in norms)
    padded = ConvNet3((1, 28, 28), 10)  # authors' code: first conv padded by 3 for grayscale, 28 -> 32
    assert padded.feature_dim == 2048 and count_parameters(padded) == expected(1, 2048)
    plain = ConvNet3((1, 28, 28), 10, pad_grayscale=False)
    assert plain.feature_dim == 128 * 3 * 3 == 1152 and count_parameters(plain) == expected(1, 1152)
    assert plain(batch((1, 28, 28))).shape == (2, 10)
    small = ConvNet3((3, 32, 32), 5, width=8, depth=2)
    assert small.feature_dim == 8 * 8 * 8 and small(batch((3, 32, 32))).shape == (2, 5)


def test_vgg11_full_width_structure_and_count():
    model = VGG11((3, 32, 32), 10)
    convs = [m for m in model.body if isinstance(m, nn.Conv2d)]
    assert [m.out_channels for m in convs] == [64, 128, 256, 256, 512, 512, 512, 512]
    assert len(list(model.body.parameters())) == 16  # the conv tensors FedPVR leaves uncorrected
    assert not any(isinstance(m, nn.BatchNorm2d | nn.AdaptiveAvgPool2d | nn.ZeroPad2d) for m in model.modules())
    fcs = [m for m in model.head if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in fcs] == [(512, 512), (512, 512), (512, 10)]
    assert sum(isinstance(m, nn.Dropout) and m.p == 0.5 for m in model.head) == 2
    channels = [3, 64, 128, 256, 256, 512, 512, 512, 512]
    body = sum(conv(a, b, 3) for a, b in itertools.pairwise(channels))
    assert count_parameters(model.body) == body == 9_220_480
    assert count_parameters(model) == body + 2 * linear(512, 512) + linear(512, 10) == 9_750_922
    assert count_parameters(VGG11((1, 28, 28), 10)) == 9_750_922 - conv(3, 64, 3) + conv(1, 64, 3)


def test_vgg11_small_width_and_other_sizes():
    model = VGG11((3, 32, 32), 10, width_scale=0.125).eval()
    assert model.feature_dim == 64
    assert count_parameters(model.head) == 2 * linear(64, 64) + linear(64, 10)
    assert model(batch((3, 32, 32))).shape == (2, 10)
    mnist = VGG11((1, 28, 28), 10, width_scale=0.125)
    assert isinstance(mnist.body[0], nn.ZeroPad2d) and mnist.body[0].padding == (2, 2, 2, 2)
    big = VGG11((3, 64, 48), 7, width_scale=0.125).eval()
    assert isinstance(big.body[-2], nn.AdaptiveAvgPool2d) and big.feature_dim == 64
    assert big(batch((3, 64, 48))).shape == (2, 7)
    odd = VGG11((3, 17, 40), 3, width_scale=0.0625).eval()
    assert odd.body[0].padding == (0, 0, 7, 8) and odd(batch((3, 17, 40))).shape == (2, 3)


def test_train_mode_dropout_only_in_vgg_head():
    model = make("vgg11", (3, 32, 32)).train()
    x = batch((3, 32, 32))
    z = model.features(x)
    assert torch.equal(z, model.features(x))  # no randomness in the body
    for name in ["mlp", "fedcog-cnn", "hfmds-cnn", "convnet3"]:
        model = make(name, (3, 32, 32)).train()
        assert torch.equal(model(x), model(x))


# ------------------------------------------------------------------------------------------------ errors


def test_build_model_unknown_name():
    with pytest.raises(InputError, match="unknown model 'resnet18'") as info:
        build_model("resnet18", (3, 32, 32), 10)
    message = str(info.value)
    assert "\n" not in message and all(name in message for name in NAMES)
    with pytest.raises(InputError):
        build_model(None, (3, 32, 32), 10)


def test_build_model_unknown_option():
    with pytest.raises(InputError, match="width_scale"):
        build_model("vgg11", (3, 32, 32), 10, width=3)
    assert build_model("mlp", (1, 4, 4), 3, hidden=7).feature_dim == 7


@pytest.mark.parametrize("name", ["fedcog-cnn", "hfmds-cnn", "convnet3", "vgg11"])
@pytest.mark.parametrize("in_shape", [(3, 8, 8), (3, 4, 4), (1, 32, 2)], ids=shape_id)
def test_too_small_images(name, in_shape):
    if name == "convnet3" and in_shape == (3, 8, 8):
        assert make(name, in_shape)(batch(in_shape)).shape == (2, 10)  # 8 -> 4 -> 2 -> 1 is enough
        return
    with pytest.raises(InputError, match="at least"):
        make(name, in_shape)


def test_smallest_images_that_fit():
    for model in [FedCOGCNN((1, 16, 16), 2), HFMDsCNN((1, 16, 16), 2), ConvNet3((3, 8, 8), 2)]:
        assert model(batch(model.in_shape)).shape == (2, 2)
    assert VGG11((1, 16, 16), 2, width_scale=0.0625)(batch((1, 16, 16))).shape == (2, 2)
    assert MLP((1, 1, 1), 2)(batch((1, 1, 1))).shape == (2, 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"in_shape": (3, 32), "n_classes": 10},
        {"in_shape": (3, 0, 32), "n_classes": 10},
        {"in_shape": 32, "n_classes": 10},
        {"in_shape": (3, 32, 32), "n_classes": 0},
        {"in_shape": (3, 32, 32), "n_classes": 2.5},
    ],
)
@pytest.mark.parametrize("name", NAMES)
def test_bad_shapes_and_class_counts(name, kwargs):
    with pytest.raises(InputError):
        build_model(name, **kwargs)


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("mlp", {"hidden": 0}),
        ("convnet3", {"width": 0}),
        ("convnet3", {"depth": -1}),
        ("vgg11", {"width_scale": 0}),
        ("vgg11", {"width_scale": float("nan")}),
    ],
)
def test_bad_options(name, kwargs):
    with pytest.raises(InputError):
        build_model(name, (3, 32, 32), 10, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_input_shape_at_forward(name):
    model = make(name, (3, 32, 32))
    for bad in [torch.zeros(2, 1, 32, 32), torch.zeros(2, 3, 28, 28), torch.zeros(3, 32, 32)]:
        with pytest.raises(InputError, match="expects input of shape"):
            model(bad)
