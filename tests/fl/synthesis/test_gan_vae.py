"""Conditional GAN and β-VAE generators (fl.synthesis.generators.gan / .vae): sample shapes and dtypes, parameter
counts against closed forms from the documented layer sizes, input guards, learning on a two-class toy set (class 0
dark, class 1 bright), the per-class posterior means μ_c of the β-VAE against an independent computation, state-dict
round trips through torch.save / torch.load(weights_only=True), on_epoch, seed determinism, and the DP GAN's
uniform fake labels."""

import io
import math

import numpy as np
import pytest
import torch

from fl.synthesis.generators.gan import CGAN, CGANConfig
from fl.synthesis.generators.vae import BetaVAE, BetaVAEConfig
from theory.errors import InputError

SHAPES = [(1, 28, 28), (3, 32, 32)]
KINDS = ["gan", "vae"]
# Narrow networks keep the training tests fast on two CPU cores; the default widths are used where nothing trains.
SMALL = {
    "gan": CGANConfig(latent_dim=16, base_channels=8, batch_size=16),
    "vae": BetaVAEConfig(base_channels=16, hidden_dim=64, batch_size=16),
}


def make(kind, in_shape, n_classes=2, config=None):
    config = SMALL[kind] if config is None else config
    return (CGAN if kind == "gan" else BetaVAE)(in_shape, n_classes, config)


def seeded(seed):
    return torch.Generator().manual_seed(seed)


def toy_data(in_shape, n=64, seed=0):
    """n uint8 images, half class 0 with pixels in [0, 50), half class 1 with pixels in [205, 256)."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.array([0, 1], dtype=np.int64), n // 2)
    dark = rng.integers(0, 50, (n, *in_shape))
    bright = rng.integers(205, 256, (n, *in_shape))
    return np.where(y[:, None, None, None] == 0, dark, bright).astype(np.uint8), y


def shape_id(shape):
    return "x".join(map(str, shape))


per_kind_shape = pytest.mark.parametrize(
    "kind, in_shape", [pytest.param(k, s, id=f"{k}-{shape_id(s)}") for k in KINDS for s in SHAPES]
)


# -- shapes and sizes ------------------------------------------------------------------------------------------------


@per_kind_shape
def test_sample_shape_and_dtype_default_config(kind, in_shape):
    model = make(kind, in_shape, n_classes=10, config=CGANConfig() if kind == "gan" else BetaVAEConfig())
    images = model.sample(np.array([0, 3, 9, 9, 1]), seeded(0))
    assert images.dtype == np.uint8
    assert images.shape == (5, *in_shape)
    empty = model.sample(np.array([], dtype=np.int64), seeded(0))
    assert empty.dtype == np.uint8 and empty.shape == (0, *in_shape)


@per_kind_shape
def test_sample_after_fit_shape_and_dtype(kind, in_shape):
    x, y = toy_data(in_shape, n=8)
    model = make(kind, in_shape)
    model.fit(x, y, 1, seeded(0))
    images = model.sample([1, 0, 1], seeded(1))
    assert images.dtype == np.uint8 and images.shape == (3, *in_shape)


def gan_parameters(in_shape, k, latent, c):
    """Closed form from the layer list in gan.py's docstring (BatchNorm: scale and shift)."""
    channels, height, width = in_shape
    start = 4 * c * (height // 4) * (width // 4)
    generator = (
        k * latent  # label embedding
        + 2 * latent * start  # linear, no bias
        + 2 * 4 * c  # BatchNorm
        + 4 * c * 2 * c * 16
        + 2 * 2 * c  # convT 4x4 + BatchNorm
        + 2 * c * c * 16
        + 2 * c  # convT 4x4 + BatchNorm
        + c * channels * 9
        + channels  # conv 3x3 to the image
    )
    discriminator = (
        channels * c * 16
        + c
        + c * 2 * c * 16
        + 2 * c
        + 2 * c * 4 * c * 9
        + 4 * c
        + 4 * c
        + 1  # linear head
        + k * 4 * c  # projection embedding
    )
    return generator, discriminator


def vae_parameters(in_shape, k, latent, c, hidden):
    channels, height, width = in_shape
    bottom = c * (height // 4) * (width // 4)
    encoder = channels * c * 16 + c + c * c * 16 + c + bottom * hidden + hidden + hidden * hidden + hidden
    encoder += hidden * 2 * latent + 2 * latent
    decoder = (latent + k) * hidden + hidden + hidden * hidden + hidden + hidden * bottom + bottom
    decoder += c * c * 16 + c + c * channels * 16 + channels
    return encoder, decoder


@pytest.mark.parametrize("in_shape", SHAPES, ids=shape_id)
def test_parameter_counts_match_closed_forms(in_shape):
    gan = CGAN(in_shape, 10)
    count = {name: sum(p.numel() for p in net.parameters()) for name, net in gan.nets.items()}
    assert (count["generator"], count["discriminator"]) == gan_parameters(in_shape, 10, 64, 32)
    vae = BetaVAE(in_shape, 10)
    encoder = sum(p.numel() for p in vae.net.encoder.parameters())
    decoder = sum(p.numel() for name, p in vae.net.named_parameters() if name.startswith("decoder"))
    assert (encoder, decoder) == vae_parameters(in_shape, 10, 10, 32, 256)
    assert encoder + decoder == sum(p.numel() for p in vae.net.parameters())


# -- input guards ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("labels", [[-1], [2], [0, 5]], ids=["negative", "equal-to-n_classes", "above"])
def test_labels_out_of_range_raise(kind, labels):
    model = make(kind, (1, 28, 28))
    with pytest.raises(InputError, match="labels"):
        model.sample(np.array(labels), seeded(0))
    x = toy_data((1, 28, 28), n=4)[0][: len(labels)]
    with pytest.raises(InputError, match="y must lie"):
        model.fit(x, np.array(labels), 1, seeded(0))


@pytest.mark.parametrize("kind", KINDS)
def test_malformed_labels_raise(kind):
    model = make(kind, (1, 28, 28))
    with pytest.raises(InputError, match="integers"):
        model.sample(np.array([0.5, 1.0]), seeded(0))
    with pytest.raises(InputError, match="1-D"):
        model.sample(np.zeros((2, 2), dtype=np.int64), seeded(0))


@pytest.mark.parametrize(
    "config_cls, kwargs",
    [
        (CGANConfig, {"latent_dim": 0}),
        (CGANConfig, {"base_channels": -1}),
        (CGANConfig, {"lr": 0.0}),
        (CGANConfig, {"lr": float("nan")}),
        (CGANConfig, {"batch_size": 1.5}),
        (CGANConfig, {"betas": (1.0, 0.999)}),
        (CGANConfig, {"betas": (0.5,)}),
        (CGANConfig, {"betas": (-0.1, 0.9)}),
        (BetaVAEConfig, {"latent_dim": 0}),
        (BetaVAEConfig, {"beta": -1.0}),
        (BetaVAEConfig, {"beta": float("inf")}),
        (BetaVAEConfig, {"lr": -1e-3}),
        (BetaVAEConfig, {"lr": [1e-3, 1e-4]}),
        (BetaVAEConfig, {"batch_size": 0}),
        (BetaVAEConfig, {"hidden_dim": 0}),
        (BetaVAEConfig, {"base_channels": 0}),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "-".join(f"{k}={v[k]}" for k in v),
)
def test_bad_config_raises_one_line(config_cls, kwargs):
    with pytest.raises(InputError) as info:
        config_cls(**kwargs)
    message = str(info.value)
    assert "\n" not in message and next(iter(kwargs)) in message


def test_config_normalises_types():
    assert CGANConfig(betas=[0.0, 0.9], latent_dim=8.0).betas == (0.0, 0.9)
    assert isinstance(CGANConfig(latent_dim=8.0).latent_dim, int)
    assert BetaVAEConfig(beta=0).beta == 0.0  # β = 0 (a plain autoencoder) is allowed


@pytest.mark.parametrize("kind", KINDS)
def test_bad_constructor_arguments_raise(kind):
    cls, config_cls = (CGAN, BetaVAEConfig) if kind == "gan" else (BetaVAE, CGANConfig)
    with pytest.raises(InputError, match="multiples of 4"):
        cls((1, 30, 30), 2)
    with pytest.raises(InputError, match="in_shape"):
        cls((28, 28), 2)
    with pytest.raises(InputError, match="n_classes"):
        cls((1, 28, 28), 0)
    with pytest.raises(InputError, match="config"):
        cls((1, 28, 28), 2, config_cls())


@pytest.mark.parametrize("kind", KINDS)
def test_bad_fit_arguments_raise(kind):
    model = make(kind, (1, 28, 28))
    x, y = toy_data((1, 28, 28), n=4)
    with pytest.raises(InputError, match="uint8"):
        model.fit(x.astype(np.float32), y, 1, seeded(0))
    with pytest.raises(InputError, match="shape"):
        model.fit(x[:, :, :-4, :-4], y, 1, seeded(0))
    with pytest.raises(InputError, match="at least one"):
        model.fit(x[:0], y[:0], 1, seeded(0))
    with pytest.raises(InputError, match="one label per image"):
        model.fit(x, y[:-1], 1, seeded(0))
    with pytest.raises(InputError, match="epochs"):
        model.fit(x, y, -1, seeded(0))
    with pytest.raises(InputError, match=r"torch\.Generator"):
        model.fit(x, y, 1, 0)
    with pytest.raises(InputError, match=r"torch\.Generator"):
        model.sample([0], np.random.default_rng(0))


# -- learning --------------------------------------------------------------------------------------------------------


def test_vae_learns_and_class_means_separate_dark_from_bright():
    """Seed 0, 10 epochs of 8 steps at the default widths: loss 645 -> 271 and sample means 29 vs 216 (out of 255)
    when written; the margins below (loss x0.7, 100 grey levels) would fail if either the decoder's label or μ_c
    did not carry the class."""
    in_shape = (1, 28, 28)
    x, y = toy_data(in_shape)
    model = BetaVAE(in_shape, 2, BetaVAEConfig(batch_size=8))
    history = model.fit(x, y, 10, seeded(0))
    assert set(history[0]) == {"loss", "recon", "kl"}
    for epoch in history:
        assert math.isclose(epoch["loss"], epoch["recon"] + 4.0 * epoch["kl"], rel_tol=1e-9)
    assert history[-1]["loss"] < 0.7 * history[0]["loss"]
    images = model.sample(np.repeat([0, 1], 50), seeded(1)).astype(np.float64)
    assert images[50:].mean() - images[:50].mean() > 100

    # μ_c against an independent computation: the encoder's posterior means averaged per class.
    with torch.no_grad():
        mu, _ = model.net.encode(torch.from_numpy(x).float() / 255)
    expected = torch.stack([mu[torch.from_numpy(y) == c].mean(0) for c in (0, 1)])
    torch.testing.assert_close(model.net.class_means, expected, rtol=1e-5, atol=1e-5)
    assert model.net.class_counts.tolist() == [32, 32]


def test_vae_class_without_images_samples_from_the_prior():
    x, y = toy_data((1, 28, 28), n=8)
    model = make("vae", (1, 28, 28), n_classes=3)
    model.fit(x, y, 1, seeded(0))
    assert model.net.class_counts.tolist() == [4, 4, 0]
    assert torch.equal(model.net.class_means[2], torch.zeros(model.config.latent_dim))
    assert model.sample([2, 2], seeded(0)).shape == (2, 1, 28, 28)


@pytest.mark.parametrize("in_shape", SHAPES, ids=shape_id)
def test_gan_losses_finite_generator_changes_and_follows_the_label(in_shape):
    """Seed 0, 8 epochs of 8 steps at lr 1e-3 (DCGAN's 2e-4 barely moves the N(0, 0.02) initial weights in 64
    steps): sample means 27 vs 227 (1x28x28) and 77 vs 224 (3x32x32) when written, and above an 80 grey-level gap
    for seeds 0-3; an unconditional or untrained generator would give no gap."""
    x, y = toy_data(in_shape)
    model = make("gan", in_shape, config=CGANConfig(latent_dim=16, base_channels=8, lr=1e-3, batch_size=8))
    labels = np.repeat([0, 1], 50)
    model.fit(x, y, 0, seeded(0))  # zero epochs: only the seeded initialisation
    before = model.sample(labels, seeded(1)).astype(np.float64)
    history = model.fit(x, y, 8, seeded(0))
    after = model.sample(labels, seeded(1)).astype(np.float64)
    assert len(history) == 8 and set(history[0]) == {"d_loss", "g_loss"}
    assert all(math.isfinite(v) for epoch in history for v in epoch.values())
    assert np.abs(after - before).mean() > 10
    assert after[50:].mean() - after[:50].mean() > 50


def test_gan_fake_labels_under_dp_are_uniform_fixed_size_and_from_the_generator():
    """The DP GAN's conditioning labels: batch_size int64 labels in [0, K), reproducible from the generator, and
    uniform: 600 draws of 16 over K = 3 classes, each class's share within 0.03 of 1/3 (sd 0.0068, so 4.4 sd)."""
    model = make("gan", (1, 28, 28), n_classes=3)
    draws = [model.fake_labels(seeded(4)) for _ in range(2)]
    assert draws[0].dtype == torch.int64 and draws[0].shape == (16,) and torch.equal(draws[0], draws[1])
    generator = seeded(5)
    many = torch.cat([model.fake_labels(generator) for _ in range(600)])
    shares = torch.bincount(many, minlength=3).double() / len(many)
    assert len(shares) == 3 and (shares - 1 / 3).abs().max() < 0.03


# -- state, callbacks, determinism -----------------------------------------------------------------------------------


@per_kind_shape
def test_state_dict_round_trip_gives_identical_samples(kind, in_shape):
    x, y = toy_data(in_shape, n=16)
    model = make(kind, in_shape)
    model.fit(x, y, 2, seeded(0))
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert all(isinstance(value, torch.Tensor) for value in state.values())

    restored = make(kind, in_shape)
    restored.load_state_dict(state)
    labels = np.array([0, 1, 1, 0, 1])
    expected = model.sample(labels, seeded(7))
    assert np.array_equal(restored.sample(labels, seeded(7)), expected)
    assert restored.epochs_done == 2
    restored.fit(x, y, 0, seeded(3))  # a loaded model is not re-initialised by fit
    assert np.array_equal(restored.sample(labels, seeded(7)), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_load_state_dict_mismatch_raises_one_line(kind):
    state = make(kind, (1, 28, 28), n_classes=2).state_dict()
    with pytest.raises(InputError) as info:
        make(kind, (1, 28, 28), n_classes=3).load_state_dict(state)
    assert "\n" not in str(info.value)
    with pytest.raises(InputError):
        make(kind, (1, 28, 28)).load_state_dict({k: v for k, v in state.items() if k != "epochs_done"})


@pytest.mark.parametrize("kind", KINDS)
def test_on_epoch_called_once_per_epoch_counting_across_fits(kind):
    x, y = toy_data((1, 28, 28), n=8)
    model = make(kind, (1, 28, 28))
    calls = []

    def record(epoch, fitted):
        assert fitted is model
        calls.append((epoch, fitted.state_dict()["epochs_done"].item()))

    model.fit(x, y, 3, seeded(0), on_epoch=record)
    assert calls == [(1, 1), (2, 2), (3, 3)]
    model.fit(x, y, 2, seeded(1), on_epoch=record)
    assert [epoch for epoch, _ in calls] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_losses_and_samples_different_seed_differs(kind):
    x, y = toy_data((1, 28, 28), n=32)

    def run(seed):
        model = make(kind, (1, 28, 28))
        history = model.fit(x, y, 2, seeded(seed))
        return history, model.sample([0, 1, 0, 1], seeded(5))

    first, second, other = run(0), run(0), run(1)
    assert first[0] == second[0]
    assert np.array_equal(first[1], second[1])
    assert first[0] != other[0]


@pytest.mark.parametrize("kind", KINDS)
def test_fit_and_sample_leave_the_global_generator_alone(kind):
    x, y = toy_data((1, 28, 28), n=8)
    model = make(kind, (1, 28, 28))
    state = torch.get_rng_state()
    model.fit(x, y, 1, seeded(0))
    model.sample([0, 1], seeded(1))
    assert torch.equal(torch.get_rng_state(), state)
