"""DDPM generator (fl.synthesis.generators.ddpm): the β/ᾱ schedules, the closed form of q(x_t | x_0) (Ho et al.
eq. 4) checked by Monte Carlo, both samplers against the exact denoiser of a Gaussian data distribution, training
(loss goes down, on_epoch, determinism, EMA), class conditioning, uint8 sample shapes for 1x28x28 and 3x32x32,
DDIM determinism, checkpoints through torch.save/torch.load(weights_only=True), and InputError guards."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from fl.synthesis.generators.base import to_unit
from fl.synthesis.generators.ddpm import DDPM, DDPMConfig, UNet, beta_schedule
from theory.errors import InputError


def squares(n: int = 64, hw: int = 28, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two classes of flat uint8 images: class 0 dark (~50), class 1 bright (~200), each with ±20 noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = np.where(y[:, None, None, None] == 1, 200, 50) + rng.integers(-20, 21, (n, 1, hw, hw))
    return x.astype(np.uint8), y


def build(in_shape=(1, 28, 28), n_classes=2, seed=0, **overrides) -> DDPM:
    torch.manual_seed(seed)
    return DDPM(in_shape, n_classes, DDPMConfig.tiny(**overrides))


# -- schedule and forward process -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", [DDPMConfig(), DDPMConfig.paper(), DDPMConfig.tiny()], ids=["default", "paper", "tiny"]
)
def test_alphas_cumprod_decreasing_and_small_at_T(config):
    model = DDPM((1, 28, 28), 2, config)
    ab = model.alphas_cumprod
    assert ab.shape == (config.timesteps,)
    assert torch.all(ab[1:] < ab[:-1])
    assert 0 < ab[-1] < 1e-4 and ab[0] < 1
    assert torch.allclose(ab, torch.cumprod(1 - model.betas, 0))
    assert torch.all((model.betas > 0) & (model.betas < 1))


def test_linear_schedule_is_ho_et_al():
    betas = beta_schedule(DDPMConfig())
    assert betas[0].item() == pytest.approx(1e-4) and betas[-1].item() == pytest.approx(0.02)
    assert torch.allclose(betas[1:] - betas[:-1], torch.full((999,), (0.02 - 1e-4) / 999, dtype=torch.float64))
    # Nichol & Dhariwal's cosine schedule: ᾱ_t = f(t)/f(0) (until β hits its 0.999 cap, only near t = T).
    cos = DDPMConfig(schedule="cosine")
    ab = torch.cumprod(1 - beta_schedule(cos), 0)
    t = torch.arange(1, 1001, dtype=torch.float64) / 1000
    f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2 / math.cos(0.008 / 1.008 * math.pi / 2) ** 2
    assert torch.allclose(ab[:990], f[:990], rtol=1e-10)


def test_q_sample_matches_closed_form_moments():
    """x_t over many noise draws has mean sqrt(ᾱ_t)·x_0 and variance 1 − ᾱ_t, to 5 standard errors."""
    model = DDPM((1, 4, 4), 2, DDPMConfig())
    x0 = torch.linspace(-1, 1, 16, dtype=torch.float64).reshape(1, 1, 4, 4)
    draws = 20_000
    gen = torch.Generator().manual_seed(1)
    for t in (0, 100, 500, 999):
        noise = torch.randn((draws, 1, 4, 4), generator=gen, dtype=torch.float64)
        xt = model.q_sample(x0.expand(draws, -1, -1, -1), torch.full((draws,), t), noise)
        ab = model.alphas_cumprod[t].item()
        var = 1 - ab
        mean_tol = 5 * math.sqrt(var / draws)
        var_tol = 5 * var * math.sqrt(2 / (draws - 1))
        assert torch.allclose(xt.mean(0), math.sqrt(ab) * x0[0], atol=mean_tol, rtol=0)
        assert torch.allclose(xt.var(0), torch.full_like(x0[0], var), atol=var_tol, rtol=0)


def test_q_sample_without_noise_scales_x0():
    model = DDPM((1, 4, 4), 2, DDPMConfig.tiny())
    x0 = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([0, 10, 49])
    out = model.q_sample(x0, t, torch.zeros_like(x0))
    expected = model.alphas_cumprod[t].sqrt().float().view(-1, 1, 1, 1) * x0
    assert torch.allclose(out, expected)
    assert torch.allclose(model.q_sample(x0, 10, torch.zeros_like(x0)), model.alphas_cumprod[10].sqrt().float() * x0)


# -- samplers against the exact denoiser of N(μ, s²) data -----------------------------------------------------


class GaussianOracle(nn.Module):
    """E[ε | x_t] for x_0 ~ N(μ, s²) per pixel: sqrt(1 − ᾱ)(x_t − sqrt(ᾱ)μ) / (ᾱ s² + 1 − ᾱ)."""

    def __init__(self, alphas_cumprod: torch.Tensor, mu: float, s: float) -> None:
        super().__init__()
        self.ab, self.mu, self.s = alphas_cumprod, mu, s

    def forward(self, x, t, y):
        ab = self.ab[t.cpu()].to(x.dtype).view(-1, 1, 1, 1)
        return (1 - ab).sqrt() * (x - ab.sqrt() * self.mu) / (ab * self.s**2 + 1 - ab)


@pytest.mark.parametrize(
    "variance, steps, rel",
    [("beta", None, 0.03), ("posterior", None, 0.03), ("beta", 1000, 0.03), ("beta", 50, 0.15)],
    ids=["alg2-beta", "alg2-posterior", "ddim1000", "ddim50"],
)
def test_samplers_recover_gaussian_data_with_the_exact_denoiser(variance, steps, rel):
    """With ε_θ the exact E[ε | x_t], Algorithm 2 and DDIM (η = 0) draw from N(μ, s²); DDIM's deterministic
    first-order steps shrink the spread with few steps (std 0.226 instead of 0.25 with 50 steps, 0.249 with 1000)."""
    mu, s = 0.2, 0.25
    model = DDPM((1, 64, 64), 1, DDPMConfig(variance=variance, clip_denoised=False))
    oracle = GaussianOracle(model.alphas_cumprod, mu, s)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((2, 1, 64, 64), generator=gen)
    y = torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        out = model._ancestral(oracle, x, y, gen) if steps is None else model._ddim(oracle, x, y, steps, 0.0, gen)
    # 8192 draws: the sample mean's standard error is s/90 ≈ 0.003, the std's ≈ 0.002.
    assert out.mean().item() == pytest.approx(mu, abs=0.01)
    assert out.std().item() == pytest.approx(s, rel=rel)


# -- training -------------------------------------------------------------------------------------------------


def test_fit_lowers_loss_and_calls_on_epoch_once_per_epoch():
    x, y = squares()
    model = build()
    calls = []
    history = model.fit(x, y, 4, torch.Generator().manual_seed(0), on_epoch=lambda e, m: calls.append((e, m)))
    assert [c[0] for c in calls] == [1, 2, 3, 4] and all(m is model for _, m in calls)
    assert len(history) == 4 and all(set(h) == {"loss"} and math.isfinite(h["loss"]) for h in history)
    assert history[-1]["loss"] < history[0]["loss"]
    # A second call keeps counting epochs (checkpoint names stay unique).
    model.fit(x[:8], y[:8], 1, torch.Generator().manual_seed(1), on_epoch=lambda e, m: calls.append((e, m)))
    assert calls[-1][0] == 5 and model.steps_done == 4 * 4 + 1


def test_fit_is_deterministic_given_the_generator_and_initial_weights():
    x, y = squares(16)
    runs = [build(seed=3).fit(x, y, 2, torch.Generator().manual_seed(7)) for _ in range(2)]
    assert runs[0] == runs[1]


def test_first_loss_is_the_mean_squared_noise_with_the_zero_initialised_output():
    """ε_θ ≡ 0 before training, so L_simple is the mean of ε², drawn after t from the same generator."""
    x, y = squares(8)
    model = build()
    loss = model.loss(to_unit(x), torch.as_tensor(y), torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    torch.randint(0, 50, (8,), generator=gen)
    noise = torch.randn(x.shape, generator=gen)
    assert loss.item() == pytest.approx(noise.pow(2).mean().item(), rel=1e-6)


def test_ema_update_follows_its_decay():
    x, y = squares(4)
    model = build(ema=0.5, ema_warmup=False, batch_size=4)
    before = [p.detach().clone() for p in model.model.parameters()]
    model.fit(x, y, 1, torch.Generator().manual_seed(0))
    for b, p, e in zip(before, model.model.parameters(), model.ema_model.parameters()):
        assert torch.allclose(e, 0.5 * b + 0.5 * p, atol=1e-7)
    assert not all(torch.equal(b, p) for b, p in zip(before, model.model.parameters()))


def test_class_conditioning_after_short_training():
    """Trained briefly on dark (0) / bright (1) squares, class-1 samples are brighter than class-0 samples."""
    x, y = squares(64, hw=8)
    model = build((1, 8, 8), ema=0.0)
    gen = torch.Generator().manual_seed(0)
    model.fit(x, y, 20, gen)
    images = model.sample(np.repeat([0, 1], 16), gen, steps=10).astype(float)
    assert images[16:].mean() - images[:16].mean() > 20  # ≥ 40 over ten seeds tried; the data differ by 150


# -- sampling -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("in_shape", [(1, 28, 28), (3, 32, 32)], ids=["1x28x28", "3x32x32"])
@pytest.mark.parametrize("steps", [None, 5], ids=["full-chain", "ddim5"])
def test_sample_returns_uint8_images(in_shape, steps):
    model = build(in_shape, n_classes=10, batch_size=4)
    labels = np.array([0, 3, 9, 9, 1, 2])  # two batches of 4 and 2
    out = model.sample(labels, torch.Generator().manual_seed(0), steps=steps)
    assert out.dtype == np.uint8 and out.shape == (6, *in_shape)
    empty = model.sample(np.array([], dtype=np.int64), torch.Generator())
    assert empty.shape == (0, *in_shape) and empty.dtype == np.uint8


def test_deep_unet_pads_odd_sizes_and_runs_attention():
    """Three down-samplings of 28x28 (28 -> 14 -> 7 -> odd): padded to 32 inside and cropped back."""
    config = DDPMConfig.tiny(channel_mults=(1, 2, 2), attn_levels=(2,), num_res_blocks=2, dropout=0.1)
    net = UNet(1, 3, config)
    x = torch.randn(2, 1, 28, 28)
    assert net(x, torch.tensor([0, 7]), torch.tensor([0, 2])).shape == x.shape
    torch.manual_seed(0)
    model = DDPM((1, 28, 28), 3, config)
    assert model.sample([0, 1, 2], torch.Generator().manual_seed(0), steps=3).shape == (3, 1, 28, 28)


def test_ddim_is_deterministic_given_the_seed():
    x, y = squares(16)
    model = build(ema=0.9)
    model.fit(x, y, 1, torch.Generator().manual_seed(0))
    labels = np.array([0, 1, 1, 0])
    a = model.sample(labels, torch.Generator().manual_seed(5), steps=10)
    b = model.sample(labels, torch.Generator().manual_seed(5), steps=10)
    c = model.sample(labels, torch.Generator().manual_seed(6), steps=10)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    raw = model.sample(labels, torch.Generator().manual_seed(5), steps=10, use_ema=False)
    assert not np.array_equal(a, raw)  # the EMA weights are not the trained ones


def test_steps_equal_to_T_is_the_full_chain():
    model = build()
    labels = np.array([0, 1])
    full = model.sample(labels, torch.Generator().manual_seed(2))
    assert np.array_equal(full, model.sample(labels, torch.Generator().manual_seed(2), steps=50))


# -- checkpoints ----------------------------------------------------------------------------------------------


def test_state_dict_round_trip_through_torch_load_weights_only(tmp_path):
    x, y = squares(16)
    model = build(ema=0.9)
    model.fit(x, y, 2, torch.Generator().manual_seed(0))
    torch.save(model.state_dict(with_optimizer=True), tmp_path / "ddpm.pt")
    state = torch.load(tmp_path / "ddpm.pt", weights_only=True)

    fresh = build(seed=123, ema=0.9)
    fresh.load_state_dict(state)
    rebuilt = DDPM.from_state_dict(state)
    labels = np.array([0, 1, 0])
    for steps in (None, 7):
        expected = model.sample(labels, torch.Generator().manual_seed(4), steps=steps)
        assert np.array_equal(fresh.sample(labels, torch.Generator().manual_seed(4), steps=steps), expected)
        assert np.array_equal(rebuilt.sample(labels, torch.Generator().manual_seed(4), steps=steps), expected)
    assert fresh.epochs_done == 2 and fresh.steps_done == model.steps_done
    # Training resumes identically with the optimiser state.
    more = [m.fit(x, y, 1, torch.Generator().manual_seed(9)) for m in (model, fresh)]
    assert more[0] == more[1]


def test_load_state_dict_rejects_another_architecture():
    state = build().state_dict()
    with pytest.raises(InputError, match="base_channels"):
        build(base_channels=16).load_state_dict(state)
    with pytest.raises(InputError, match="in_shape"):
        build((3, 32, 32)).load_state_dict(state)


# -- input errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"timesteps": 0},
        {"timesteps": 2.5},
        {"beta_start": 0.0},
        {"beta_end": 1.0},
        {"beta_start": 0.03, "beta_end": 0.02},
        {"beta_start": float("nan")},
        {"lr": 0.0},
        {"lr": -1e-4},
        {"batch_size": 0},
        {"ema": 1.0},
        {"ema": -0.1},
        {"schedule": "quadratic"},
        {"variance": "learned"},
        {"channel_mults": ()},
        {"channel_mults": (1, 0)},
        {"attn_levels": (2,)},
        {"base_channels": 0},
        {"dropout": 1.0},
        {"grad_clip": -1.0},
        {"ema_warmup": 1},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_bad_config_raises_input_error(overrides):
    base = dataclasses.asdict(DDPMConfig())
    with pytest.raises(InputError, match="DDPMConfig"):
        DDPMConfig(**{**base, **overrides})


@pytest.mark.parametrize(
    "labels", [[0, 2], [-1], [0.0, 1.0], [[0, 1]]], ids=["too-large", "negative", "float", "two-d"]
)
def test_sample_rejects_bad_labels(labels):
    with pytest.raises(InputError, match="labels"):
        build().sample(np.array(labels), torch.Generator())


def test_sample_and_fit_reject_bad_arguments():
    model = build()
    x, y = squares(4)
    with pytest.raises(InputError, match="steps"):
        model.sample([0], torch.Generator(), steps=51)
    with pytest.raises(InputError, match="steps"):
        model.sample([0], torch.Generator(), steps=0)
    with pytest.raises(InputError, match="uint8"):
        model.fit(x.astype(np.float32), y, 1, torch.Generator())
    with pytest.raises(InputError, match="shape"):
        model.fit(x[:, :, :14], y, 1, torch.Generator())
    with pytest.raises(InputError, match="labels"):
        model.fit(x, y[:3], 1, torch.Generator())
    with pytest.raises(InputError, match="fit y"):
        model.fit(x, y + 5, 1, torch.Generator())
    with pytest.raises(InputError, match="n_classes"):
        DDPM((1, 28, 28), 0, DDPMConfig.tiny())
    with pytest.raises(InputError, match="in_shape"):
        DDPM((28, 28), 2, DDPMConfig.tiny())
