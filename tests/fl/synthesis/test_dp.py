"""DP-SGD for the generators (fl.synthesis.generators.dp) and its use in Fedssyn and fl.run.

- each generator (β-VAE, conditional GAN, DDPM) fitted with ``privacy``: ε per epoch equals the configured
  accountant's value recomputed from the counts (:func:`fl.synthesis.fedssyn.epsilon_spent`), rises over the
  epochs, the Opacus hooks are gone afterwards (the network is left as built), a DP fit is reproducible from its
  seed;
- one DP-SGD step against a hand computation: per-sample gradients (one autograd call per sample) clipped to
  norm C jointly over all parameters, summed, divided by the *expected* batch size B; the Gaussian noise has
  std σ·C/B and comes from the run's torch.Generator;
- Poisson batches: ⌈n/B⌉ draws an epoch, unique in-range indices, mean size B, empty batches counted by the
  accountant, reproducible from the seed;
- the accountants: PRV (default) below RDP on the paper's setting, RDP as before, both against closed forms at q = 1;
- InputError guards (DPConfig values, spectral norm with DP); the DP β-VAE keeps its class means at the prior's 0;
- nothing released outside DP-SGD depends on the private data: neighbouring datasets (one label changed) give the
  GAN's generator the same inputs and Fedssyn the same synthetic labels; the DP GAN's per-sample gradients pair
  real j with fake j;
- ``python -m fl.run`` with the centralised baselines, "own", "fedssyn" and ``synthetic.dp`` (summary ε, δ and
  accountant), on a tiny monkeypatched dataset with a stand-in generator (as in test_fedssyn.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl.synthesis.fedssyn import FedssynConfig, epsilon_spent, synthesize
from fl.synthesis.generators.ddpm import DDPM, DDPMConfig
from fl.synthesis.generators.dp import ACCOUNTANTS, DPConfig, PrivateTraining, compute_epsilon
from fl.synthesis.generators.gan import CGAN, CGANConfig
from fl.synthesis.generators.vae import BetaVAE, BetaVAEConfig
from theory.errors import InputError

OPACUS_PARAM_ATTRS = ("grad_sample", "_forward_counter", "_current_grad_sample", "_norm_sample")


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def toy_images(n: int = 48, n_classes: int = 3, hw: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n uint8 images (1, hw, hw) whose brightness depends on the label."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    x = np.clip(40 + 80 * y[:, None, None, None] + rng.integers(-30, 31, (n, 1, hw, hw)), 0, 255)
    return x.astype(np.uint8), y.astype(np.int64)


# -- the three generators under DP-SGD -------------------------------------------------------------------------

KINDS = ("vae", "gan", "ddpm")


def build(kind: str, n_classes: int = 3, seed: int = 0):
    """A small generator of ``kind`` (weights seeded; the DDPM draws its initial weights from torch's RNG)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "vae":
            config = BetaVAEConfig(base_channels=8, hidden_dim=32, latent_dim=4, batch_size=16)
            return BetaVAE((1, 8, 8), n_classes, config)
        if kind == "gan":
            config = CGANConfig(spectral_norm=False, base_channels=8, latent_dim=8, batch_size=16)
            return CGAN((1, 8, 8), n_classes, config)
        return DDPM((1, 8, 8), n_classes, DDPMConfig.tiny(timesteps=10, batch_size=16))


def private_net(model) -> nn.Module:
    """The network DP-SGD wraps: the one that sees the private images."""
    if isinstance(model, BetaVAE):
        return model.net
    if isinstance(model, CGAN):
        return model.nets["discriminator"]
    return model.model


def all_nets(model) -> nn.Module:
    return {BetaVAE: lambda m: m.net, CGAN: lambda m: m.nets, DDPM: lambda m: m.model}[type(model)](model)


def assert_no_opacus_left(net: nn.Module) -> None:
    for name, module in net.named_modules():
        assert not module._forward_hooks and not module._backward_hooks and not module._forward_pre_hooks, name
        assert not hasattr(module, "autograd_grad_sample_hooks"), name
        assert not hasattr(module, "ft_compute_sample_grad"), name
    for name, param in net.named_parameters():
        for attr in OPACUS_PARAM_ATTRS:
            assert getattr(param, attr, None) is None, f"{name}.{attr}"


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in all_nets(model).state_dict().items()}


@pytest.mark.parametrize("kind", KINDS)
def test_dp_fit_reports_accountant_epsilon_and_leaves_no_hooks(kind):
    x, y = toy_images()
    model = build(kind)
    keys_before = set(all_nets(model).state_dict())
    seen = []
    history = model.fit(x, y, 2, seeded(0), on_epoch=lambda e, m: seen.append(e), privacy=DPConfig())
    assert seen == [1, 2] and len(history) == 2
    eps = [record["epsilon"] for record in history]
    assert all(math.isfinite(e) and e > 0 for e in eps)
    assert eps[0] < eps[1]
    for epoch, e in enumerate(eps, start=1):
        assert e == pytest.approx(epsilon_spent(DPConfig(), len(y), 16, epoch), rel=1e-9)
    assert all(math.isfinite(v) for record in history for v in record.values())

    samples = model.sample(np.array([0, 1, 2, 2, 0]), seeded(1))
    assert samples.shape == (5, 1, 8, 8) and samples.dtype == np.uint8

    # The network is left as built: no hooks, no per-sample attributes, same state-dict keys (no "_module.").
    assert_no_opacus_left(all_nets(model))
    assert set(all_nets(model).state_dict()) == keys_before
    # A plain fit afterwards trains normally (no "epsilon"), and changes the weights.
    before = weights(model)
    plain = model.fit(x, y, 1, seeded(2))
    assert "epsilon" not in plain[0] and math.isfinite(next(iter(plain[0].values())))
    assert any(not torch.equal(before[k], v) for k, v in weights(model).items())
    assert all(getattr(p, "grad_sample", None) is None for p in all_nets(model).parameters())
    # A second DP fit can wrap the same network again; ε is that of the new call.
    again = model.fit(x, y, 1, seeded(3), privacy=DPConfig())
    assert again[0]["epsilon"] == pytest.approx(epsilon_spent(DPConfig(), len(y), 16, 1), rel=1e-9)
    assert_no_opacus_left(all_nets(model))


@pytest.mark.parametrize("kind", KINDS)
def test_dp_fit_is_reproducible_from_the_seed(kind):
    """The Poisson batches and the DP noise come from fit's generator: same seed, same weights; another seed
    (another noise draw) differs."""
    x, y = toy_images(n=32)
    runs = []
    for seed in (5, 5, 6):
        model = build(kind)
        model.fit(x, y, 1, seeded(seed), privacy=DPConfig(noise_multiplier=2.0))
        runs.append(weights(model))
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])
    assert any(not torch.equal(runs[0][k], runs[2][k]) for k in runs[0])


def test_dp_touches_only_the_private_network_of_the_gan_and_its_generator_still_learns():
    """DP-SGD wraps only the discriminator; the generator's own optimiser still updates the generator."""
    x, y = toy_images(n=32)
    model = build("gan")
    model.reset_parameters(seeded(0))
    before = weights(model)
    model.fit(x, y, 1, seeded(0), privacy=DPConfig())
    after = weights(model)
    changed = {k.split(".")[0] for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"generator", "discriminator"}


# -- one DP-SGD step by hand ------------------------------------------------------------------------------------


def per_sample_grads(module: nn.Module, loss_of, xs: torch.Tensor, ts: torch.Tensor) -> list[torch.Tensor]:
    """The gradient of sample j's own loss, flattened over all parameters, by one autograd call per sample."""
    params = list(module.parameters())
    out = []
    for xj, tj in zip(xs, ts):
        grads = torch.autograd.grad(loss_of(module(xj[None]), tj[None]).sum(), params)
        out.append(torch.cat([g.reshape(-1) for g in grads]))
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dp_step_is_per_sample_clipping_summed_over_expected_batch_size(dtype):
    torch.manual_seed(0)
    module = nn.Linear(5, 3).to(dtype)
    xs = torch.randn(7, 5, dtype=dtype)
    ts = torch.randn(7, 3, dtype=dtype) * 3
    ts[0] *= 20  # sample norms spread well apart: some clipped, some not

    def loss_of(out, target):  # per-sample loss ½‖Wx + b − t‖²
        return 0.5 * (out - target).pow(2).sum(dim=1)

    grads = per_sample_grads(module, loss_of, xs, ts)
    norms = torch.stack([g.norm() for g in grads]).double()
    ordered = norms.sort().values
    clip = float((ordered[3] * ordered[4]).sqrt())  # between the 4th and 5th norm: 4 kept whole, 3 clipped
    factors = torch.clamp(clip / norms, max=1.0)
    assert (factors == 1).sum() == 4 and (factors < 0.99).sum() == 3

    n, batch_size, lr = 20, 4, 1.0  # the 7-sample batch is not the expected size 4: B divides, not the batch length
    expected_update = -lr * sum(f.to(dtype) * g for f, g in zip(factors, grads)) / batch_size
    start = torch.cat([p.detach().reshape(-1).clone() for p in module.parameters()])

    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    config = DPConfig(noise_multiplier=1e-12, max_grad_norm=clip)
    with PrivateTraining(module, optimizer, n, batch_size, config, seeded(0)) as private:
        assert private.batch_size == batch_size and private.steps_per_epoch == 5
        private.optimizer.zero_grad()
        loss_of(private.module(xs), ts).mean().backward()
        private.step()
    update = torch.cat([p.detach().reshape(-1) for p in module.parameters()]) - start
    tol = dict(rtol=1e-5, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(update, expected_update, **tol)
    # Without clipping it would be the plain mean gradient scaled by 7/4: clearly different.
    assert not torch.allclose(update, -lr * torch.stack(grads).sum(0) / batch_size, rtol=1e-2)
    assert private.accountant.history == [(1e-12, batch_size / n, 1)]
    assert_no_opacus_left(module)


def noise_only_update(seed: int, sigma: float, clip: float, batch_size: int) -> torch.Tensor:
    """The parameter change of one DP-SGD step whose per-sample gradients are all zero: pure noise."""
    module = nn.Linear(200, 10)
    start = torch.cat([p.detach().reshape(-1).clone() for p in module.parameters()])
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    with PrivateTraining(module, optimizer, 100, batch_size, DPConfig(sigma, clip), seeded(seed)) as private:
        private.optimizer.zero_grad()
        (0.0 * private.module(torch.randn(6, 200))).sum().backward()
        private.step()
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]) - start


def test_dp_noise_has_std_sigma_c_over_b_and_comes_from_the_generator():
    sigma, clip, batch_size = 1.5, 0.4, 8
    update = noise_only_update(0, sigma, clip, batch_size).double()
    expected_std = sigma * clip / batch_size
    assert len(update) == 2010
    assert update.std().item() == pytest.approx(expected_std, rel=0.08)  # sampling SE ≈ 1.6%
    assert abs(update.mean().item()) < 5 * expected_std / math.sqrt(len(update))
    torch.testing.assert_close(noise_only_update(0, sigma, clip, batch_size), noise_only_update(0, sigma, clip, 8))
    assert not torch.equal(noise_only_update(0, sigma, clip, batch_size), noise_only_update(1, sigma, clip, 8))


# -- Poisson batches --------------------------------------------------------------------------------------------


def trainer(n: int, batch_size: int, config: DPConfig | None = None) -> PrivateTraining:
    module = nn.Linear(3, 1)
    return PrivateTraining(
        module, torch.optim.SGD(module.parameters(), lr=0.1), n, batch_size, config or DPConfig(), seeded(0)
    )


def test_poisson_batches_counts_ranges_and_mean_size():
    n, batch_size, epochs = 50, 8, 300
    with trainer(n, batch_size) as private:
        assert private.steps_per_epoch == math.ceil(n / batch_size) == 7
        assert private.sample_rate == batch_size / n
        generator = seeded(11)
        sizes, per_epoch = [], []
        for _ in range(epochs):
            batches = list(private.batches(generator))
            per_epoch.append(len(batches))
            for index in batches:
                assert index.dtype == torch.int64 and index.ndim == 1 and len(index) > 0
                assert len(torch.unique(index)) == len(index)
                assert 0 <= int(index.min()) and int(index.max()) < n
                sizes.append(len(index))
        empties = sum(steps for _, _, steps in private.accountant.history)
    assert sum(per_epoch) + empties == epochs * 7
    assert max(per_epoch) == 7  # empties have probability (1 - q)^n ≈ 2e-4
    q = batch_size / n
    standard_error = math.sqrt(n * q * (1 - q) / len(sizes))
    assert abs(np.mean(sizes) - batch_size) < 5 * standard_error
    assert np.var(sizes) == pytest.approx(n * q * (1 - q), rel=0.15)  # Binomial(n, q), not a fixed size


def test_poisson_batches_are_reproducible_from_the_generator():
    with trainer(30, 5) as private:
        first = [list(private.batches(seeded(7))) for _ in range(2)]
        other = list(private.batches(seeded(8)))
    assert all(torch.equal(a, b) for a, b in zip(first[0], first[1])) and len(first[0]) == len(first[1])
    assert len(other) != len(first[0]) or any(not torch.equal(a, b) for a, b in zip(first[0], other))


def test_empty_poisson_batches_are_skipped_but_counted_by_the_accountant():
    """B = 1 of n = 20: q = 0.05, a draw is empty with probability 0.95^20 ≈ 0.36; ε must still match ⌈n/B⌉ steps
    an epoch."""
    n, epochs = 20, 6
    config = DPConfig(noise_multiplier=1.2)
    x = torch.randn(n, 3)
    with trainer(n, 1, config) as private:
        generator = seeded(3)
        taken = 0
        for _ in range(epochs):
            for index in private.batches(generator):
                private.optimizer.zero_grad()
                private.module(x[index]).pow(2).mean().backward()
                private.step()
                taken += 1
        steps = sum(s for _, _, s in private.accountant.history)
        epsilon = private.epsilon()
    assert steps == epochs * n and 0 < taken < steps  # some empty batches were skipped
    assert epsilon == pytest.approx(epsilon_spent(config, n, 1, epochs), rel=1e-9)


def test_batch_size_above_n_takes_everything_once_per_epoch():
    with trainer(6, 50) as private:
        assert private.batch_size == 6 and private.sample_rate == 1.0 and private.steps_per_epoch == 1
        (index,) = list(private.batches(seeded(0)))
        assert index.tolist() == list(range(6))
        assert private.epsilon() == 0.0
    assert epsilon_spent(DPConfig(), 6, 50, 3) == pytest.approx(epsilon_spent(DPConfig(), 6, 6, 3), rel=1e-12)


def test_epsilon_spent_grows_with_epochs_and_falls_with_noise_and_delta():
    base = epsilon_spent(DPConfig(), 1000, 100, 5)
    assert 0 < base < epsilon_spent(DPConfig(), 1000, 100, 10)
    assert epsilon_spent(DPConfig(noise_multiplier=4.0), 1000, 100, 5) < base
    assert epsilon_spent(DPConfig(delta=1e-3), 1000, 100, 5) < base
    assert epsilon_spent(DPConfig(), 1000, 10, 5) < base  # smaller q: privacy amplification by sampling


# -- input guards -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"noise_multiplier": 0.0},
        {"noise_multiplier": -1.0},
        {"noise_multiplier": float("nan")},
        {"noise_multiplier": float("inf")},
        {"max_grad_norm": 0.0},
        {"max_grad_norm": -0.5},
        {"max_grad_norm": float("nan")},
        {"delta": 0.0},
        {"delta": -1e-5},
        {"delta": 1.0},
        {"delta": 2.0},
        {"delta": float("nan")},
        {"noise_multiplier": "big"},
        {"max_grad_norm": [1.0, 2.0]},
        {"accountant": "gdp"},
        {"accountant": None},
    ],
)
def test_bad_dp_config_is_input_error(kwargs):
    with pytest.raises(InputError):
        DPConfig(**kwargs)


def test_dp_config_values_are_plain_floats():
    config = DPConfig(noise_multiplier=np.float32(1.5), max_grad_norm=2, delta=np.float64(1e-6))
    assert all(type(v) is float for v in (config.noise_multiplier, config.max_grad_norm, config.delta))


def test_privacy_must_be_a_dp_config():
    module = nn.Linear(2, 1)
    with pytest.raises(InputError):
        PrivateTraining(module, torch.optim.SGD(module.parameters(), lr=0.1), 10, 2, {"noise_multiplier": 1}, seeded(0))
    x, y = toy_images(n=8)
    with pytest.raises(InputError):
        build("vae").fit(x, y, 1, seeded(0), privacy=1.0)


def test_gan_with_spectral_norm_and_dp_is_input_error():
    x, y = toy_images(n=8)
    model = CGAN((1, 8, 8), 3, CGANConfig(base_channels=8, latent_dim=8, batch_size=4))
    assert model.config.spectral_norm
    with pytest.raises(InputError, match="spectral_norm"):
        model.fit(x, y, 1, seeded(0), privacy=DPConfig())
    assert model.epochs_done == 0
    assert_no_opacus_left(model.nets)


# -- the DP β-VAE keeps class means at the prior --------------------------------------------------------------


def test_dp_vae_does_not_compute_class_means_from_private_data():
    x, y = toy_images(n=48)
    private = build("vae")
    private.fit(x, y, 1, seeded(0), privacy=DPConfig())
    assert torch.count_nonzero(private.net.class_means) == 0
    assert torch.count_nonzero(private.net.class_counts) == 0
    plain = build("vae")
    plain.fit(x, y, 1, seeded(0))
    assert torch.count_nonzero(plain.net.class_means) > 0
    assert plain.net.class_counts.tolist() == [16, 16, 16]


# -- nothing released outside DP-SGD depends on the private data -----------------------------------------------


def generator_inputs(x: np.ndarray, y: np.ndarray, privacy: DPConfig | None) -> list[tuple[torch.Tensor, ...]]:
    """The (z, labels) of every forward of the GAN's generator network during a 2-epoch fit from seed 0."""
    model = build("gan")
    seen = []
    handle = model.nets["generator"].register_forward_pre_hook(
        lambda module, args: seen.append(tuple(a.detach().clone() for a in args))
    )
    try:
        model.fit(x, y, 2, seeded(0), privacy=privacy)
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("private", [True, False])
def test_gan_generator_inputs_do_not_depend_on_the_private_labels_under_dp(private):
    """Neighbouring datasets, one label changed (sample 5: class 2 -> 0), same seed. Under DP the generator network
    sees exactly the same (z, labels) at every step, ``batch_size`` = 16 fakes each time, whatever the Poisson
    batch's size: its training step, its BatchNorm statistics and its inputs are independent of the private
    labels (only the DP discriminator's feedback differs). Without DP the fakes use the real batch's labels, so
    the inputs differ: the test can fail."""
    x, y = toy_images(n=32)
    neighbour = y.copy()
    neighbour[5] = (neighbour[5] + 1) % 3
    privacy = DPConfig() if private else None
    first, second = generator_inputs(x, y, privacy), generator_inputs(x, neighbour, privacy)
    same = len(first) == len(second) and all(
        torch.equal(a, b) for step_a, step_b in zip(first, second) for a, b in zip(step_a, step_b)
    )
    if private:
        assert same and len(first) > 0
        assert all(len(labels) == 16 for _, labels in first)
        assert len({tuple(labels.tolist()) for _, labels in first}) > 1  # fresh draws each step
    else:
        assert not same


def test_dp_gan_per_sample_gradient_is_real_j_plus_fake_j():
    """Opacus sums the discriminator's two forward passes (m real images, B = 16 fakes) row by row; with the loss
    normalised by max(m, B) row j of every parameter's per-sample gradient must be exactly the gradient of
    softplus(−D(real_j)) + softplus(D(fake_j)) (one term where a row has only one). Checked by one autograd call
    per row at every step of a DP fit, for steps with m < B and m > B."""
    x, y = toy_images(n=32)
    model = build("gan")
    d_net = model.nets["discriminator"]
    forwards, sizes = [], []
    handle = d_net.register_forward_pre_hook(lambda module, args: forwards.append(tuple(a.detach() for a in args)))
    real_step = PrivateTraining.step

    def checked_step(self):
        (real, y_real), (fake, y_fake) = forwards[-2], forwards[-1]
        sizes.append((len(real), len(fake)))
        params = [p for p in d_net.parameters() if p.requires_grad]
        with self.pause():
            for j in range(max(len(real), len(fake))):
                loss = torch.zeros(())
                if j < len(real):
                    loss = loss + F.softplus(-d_net(real[j : j + 1], y_real[j : j + 1])).sum()
                if j < len(fake):
                    loss = loss + F.softplus(d_net(fake[j : j + 1], y_fake[j : j + 1])).sum()
                for param, grad in zip(params, torch.autograd.grad(loss, params)):
                    torch.testing.assert_close(param.grad_sample[j], grad, rtol=1e-4, atol=1e-6)
        real_step(self)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(PrivateTraining, "step", checked_step)
            model.fit(x, y, 3, seeded(0), privacy=DPConfig())
    finally:
        handle.remove()
    assert all(fakes == 16 for _, fakes in sizes) and len(sizes) == 6
    assert any(real < 16 for real, _ in sizes) and any(real > 16 for real, _ in sizes)


# -- Fedssyn and fl.run -----------------------------------------------------------------------------------------


def test_synthesize_under_dp_passes_privacy_and_records_epsilon(fake_generator, tmp_path, tiny_dataset):
    data = tiny_dataset(n_per_class=20)
    original = [np.arange(0, 30), np.arange(30, 80)]
    config = FedssynConfig(n_tilde=4, epochs=3, rho=0.5, dp=True, dp_noise_multiplier=1.1, dp_delta=1e-4)
    _, infos = synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    assert fake_generator.privacy_seen == [DPConfig(1.1, 1.0, 1e-4)] * 2
    for info, subset in zip(infos, (15, 25)):
        assert info["subset"] == subset and info["dp_delta"] == 1e-4
        expected = [epsilon_spent(DPConfig(1.1, 1.0, 1e-4), subset, 4, e) for e in (1, 2, 3)]
        np.testing.assert_allclose(info["epsilon"], expected, rtol=1e-12)
        assert all("epsilon" not in record for record in info["losses"])
    # Without dp the generator gets no privacy and nothing reports ε.
    _, plain = synthesize(data, original, FedssynConfig(n_tilde=4, epochs=3), 0,
                          tmp_path, log=lambda s: None)  # fmt: skip
    assert fake_generator.privacy_seen[2:] == [None, None] and all("epsilon" not in info for info in plain)


def test_cached_generator_reports_epsilon_for_the_current_accountant(fake_generator, tmp_path, tiny_dataset):
    """The accountant is not in the cache key: switching it reuses the trained generator and its samples (one
    fit) and recomputes ε from the counts."""
    data = tiny_dataset(n_per_class=20)
    original = [np.arange(80)]
    reported = {}
    for accountant in ("rdp", "prv"):
        config = FedssynConfig(n_tilde=4, epochs=2, dp=True, dp_accountant=accountant)
        _, (info,) = synthesize(data, original, config, 0, tmp_path, print)
        assert info["dp_accountant"] == accountant
        reported[accountant] = info["epsilon"]
    assert fake_generator.fits == 1 and info["cached"]
    for accountant, epsilons in reported.items():
        expected = [epsilon_spent(DPConfig(accountant=accountant), 60, 4, e) for e in (1, 2)]
        assert epsilons == expected
    assert reported["prv"][-1] < reported["rdp"][-1]


def test_cached_generator_reports_epsilon_for_the_current_delta(fake_generator, tmp_path, tiny_dataset):
    data = tiny_dataset(n_per_class=20)
    original = [np.arange(80)]
    for delta in (1e-5, 1e-2):
        config = FedssynConfig(n_tilde=4, epochs=2, dp=True, dp_delta=delta)
        _, (info,) = synthesize(data, original, config, 0, tmp_path, print)
    assert info["dp_delta"] == 1e-2
    assert info["epsilon"][-1] == pytest.approx(epsilon_spent(DPConfig(delta=1e-2), info["subset"], 4, 2))


def run_fl(tiny_dataset, tmp_path, monkeypatch, name: str, *settings: str) -> dict:
    """python -m fl.run on the tiny dataset (4 classes x 20 images, 10% local validation), 4 clients split by
    class, MLP, 2 rounds; returns the summary."""
    import fl.experiment as experiment_module
    import fl.run as run_module

    monkeypatch.setattr(experiment_module, "load", lambda dataset, root=None: tiny_dataset(n_per_class=20))
    out = tmp_path / name
    args = [
        "--set", "data.partition='split-by-class'", "--set", "data.clients=4", "--set", "model.name='mlp'",
        "--set", "train.rounds=2", "--set", "train.device='cpu'", "--set", "train.batch_size=16",
        "--set", f"synthetic.cache_dir='{tmp_path / 'cache'}'", "--out", str(out), "--quiet",
    ]  # fmt: skip
    for setting in settings:
        args += ["--set", setting]
    assert run_module.main(args) == 0
    return json.loads((out / "summary.json").read_text())


N_CLIENTS, N_I = 4, 18  # 20 images per class and client, round(0.1 * 20) = 2 held out for validation


def test_fl_run_central_real_is_one_client_holding_every_d_i(fake_generator, tmp_path, monkeypatch, tiny_dataset):
    summary = run_fl(tiny_dataset, tmp_path, monkeypatch, "central-real", "synthetic.method='central-real'")
    assert summary["client_sizes"] == [N_CLIENTS * N_I]
    assert summary["p_realised"] == [0.0] and summary["synthetic_numbers_sent_once"] == 0
    assert fake_generator.privacy_seen == []  # no generator is trained
    baseline = run_fl(tiny_dataset, tmp_path, monkeypatch, "none", "synthetic.method='none'")
    assert baseline["client_sizes"] == [N_I] * N_CLIENTS
    assert sum(baseline["client_sizes"]) == summary["client_sizes"][0]


def test_fl_run_central_synthetic_is_one_client_of_synthetic_data_only(
    fake_generator, tmp_path, monkeypatch, tiny_dataset
):
    n_tilde = 5
    summary = run_fl(
        tiny_dataset, tmp_path, monkeypatch, "central-synthetic", "synthetic.method='central-synthetic'",
        f"synthetic.n_tilde={n_tilde}", "synthetic.epochs=1",
    )  # fmt: skip
    assert summary["client_sizes"] == [N_CLIENTS * n_tilde]
    assert summary["p_realised"] == [1.0]
    assert summary["synthetic_numbers_sent_once"] == N_CLIENTS * n_tilde * 64
    assert len(summary["synthetic"]) == N_CLIENTS and "dp_epsilon" not in summary


@pytest.mark.parametrize("method", ["own", "fedssyn"])
def test_fl_run_own_and_fedssyn_keep_n_clients(fake_generator, tmp_path, monkeypatch, method, tiny_dataset):
    n_tilde = 6
    summary = run_fl(
        tiny_dataset, tmp_path, monkeypatch, method, f"synthetic.method='{method}'", f"synthetic.n_tilde={n_tilde}",
        "synthetic.epochs=1",
    )  # fmt: skip
    assert summary["client_sizes"] == [N_I + n_tilde] * N_CLIENTS
    np.testing.assert_allclose(summary["p_realised"], [n_tilde / (N_I + n_tilde)] * N_CLIENTS)


def test_fl_run_with_dp_reports_the_largest_client_epsilon_at_the_sample_epoch(
    fake_generator, tmp_path, monkeypatch, tiny_dataset
):
    n_tilde, rho = 6, 0.75
    summary = run_fl(
        tiny_dataset, tmp_path, monkeypatch, "dp", "synthetic.method='fedssyn'", f"synthetic.n_tilde={n_tilde}",
        "synthetic.epochs=3", "synthetic.sample_epoch=2", f"synthetic.rho={rho}", "synthetic.dp=true",
        "synthetic.dp_delta=1e-4", "data.partition='iid'", "data.clients=3",
    )  # fmt: skip
    assert fake_generator.privacy_seen == [DPConfig(delta=1e-4)] * 3
    # iid over 3 clients: 27, 27, 26 images; 3 held out each for validation: D_i of 24, 24, 23.
    real_sizes = [size - n_tilde for size in summary["client_sizes"]]
    assert sorted(real_sizes) == [23, 24, 24]
    subsets = [max(1, round(rho * n)) for n in real_sizes]
    assert [info["subset"] for info in summary["synthetic"]] == subsets
    expected = max(epsilon_spent(DPConfig(delta=1e-4), s, 4, 2) for s in subsets)
    assert summary["dp_epsilon"] == pytest.approx(expected, rel=1e-12)
    assert summary["dp_epsilon"] < epsilon_spent(DPConfig(delta=1e-4), min(subsets), 4, 3)  # not the last epoch
    assert summary["dp_delta"] == 1e-4 and summary["dp_accountant"] == "prv"
    assert all("epsilon" not in info for info in summary["synthetic"])
    rdp = run_fl(
        tiny_dataset, tmp_path, monkeypatch, "dp-rdp", "synthetic.method='fedssyn'", f"synthetic.n_tilde={n_tilde}",
        "synthetic.epochs=3", "synthetic.sample_epoch=2", f"synthetic.rho={rho}", "synthetic.dp=true",
        "synthetic.dp_delta=1e-4", "data.partition='iid'", "data.clients=3", "synthetic.dp_accountant='rdp'",
    )  # fmt: skip
    assert len(fake_generator.privacy_seen) == 3  # the cached generators: no new fit
    assert rdp["dp_accountant"] == "rdp"
    expected = max(epsilon_spent(DPConfig(delta=1e-4, accountant="rdp"), s, 4, 2) for s in subsets)
    assert rdp["dp_epsilon"] == pytest.approx(expected, rel=1e-12) and rdp["dp_epsilon"] > summary["dp_epsilon"]


@pytest.mark.parametrize("sigma, epochs, delta", [(1.906, 10, 1e-5), (1.0, 1, 1e-5), (4.0, 100, 1e-6)])
def test_full_batch_epsilon_matches_the_gaussian_mechanism_closed_form(sigma, epochs, delta):
    """With B = n (q = 1) DP-SGD is the Gaussian mechanism composed T times: RDP T·α/(2σ²) (Mironov 2017), turned
    into (ε, δ) by Balle et al. 2020's conversion ε = rdp − (log δ + log α)/(α − 1) + log((α − 1)/α), minimised
    over a fine α grid. Opacus minimises over its own coarser grid, so it may only be slightly larger."""
    alpha = np.linspace(1.01, 256, 200_001)
    rdp = epochs * alpha / (2 * sigma**2)
    closed_form = np.min(rdp - (np.log(delta) + np.log(alpha)) / (alpha - 1) + np.log((alpha - 1) / alpha))
    epsilon = epsilon_spent(DPConfig(sigma, 1.0, delta, accountant="rdp"), 64, 64, epochs)
    assert closed_form <= epsilon <= closed_form * 1.001


def exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ: the root of δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Balle and Wang 2018, Theorem 8;
    Dong, Roth and Su 2022, Corollary 2.13). T Gaussian steps of noise σ (sensitivity 1) are μ-GDP, μ = √T/σ."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(excess, 0.0, 100.0, xtol=1e-12)


@pytest.mark.parametrize("sigma, epochs, delta", [(1.906, 10, 1e-5), (1.0, 1, 1e-5), (4.0, 100, 1e-6)])
def test_full_batch_prv_epsilon_is_the_exact_gaussian_mechanism(sigma, epochs, delta):
    """With B = n (q = 1) the PRV accountant composes T Gaussian mechanisms numerically; it returns an upper bound
    (its estimate plus eps_error 0.01, so within 0.02 of the exact ε; measured 0.0104 above the exact 7.960, 4.377,
    14.451), below RDP's conversion."""
    exact = exact_gaussian_epsilon(math.sqrt(epochs) / sigma, delta)
    prv = epsilon_spent(DPConfig(sigma, 1.0, delta, accountant="prv"), 64, 64, epochs)
    assert exact <= prv <= exact + 0.02
    assert prv < epsilon_spent(DPConfig(sigma, 1.0, delta, accountant="rdp"), 64, 64, epochs)


def test_prv_is_tighter_than_rdp_and_rdp_is_the_value_reported_before():
    """q = 0.1, 30 steps (n = 1000, B = 100, 3 epochs), σ = 1.906, δ = 1e-5: RDP gives 1.569, exactly what the RDP
    accountant gave before the accountant became a setting; PRV 1.398, 10.8% less (the docstrings state 6-16% on
    our settings). Also the default is PRV, and :class:`PrivateTraining` reports the same numbers."""
    from opacus.accountants import RDPAccountant

    before = RDPAccountant()
    before.history = [(1.906, 0.1, 30)]
    rdp = epsilon_spent(DPConfig(accountant="rdp"), 1000, 100, 3)
    prv = epsilon_spent(DPConfig(accountant="prv"), 1000, 100, 3)
    assert rdp == float(before.get_epsilon(1e-5)) == pytest.approx(1.5685, abs=1e-4)
    assert prv == pytest.approx(1.398, abs=0.01)
    assert 0.84 <= prv / rdp <= 0.94
    assert DPConfig().accountant == ACCOUNTANTS[0] == "prv" == FedssynConfig().dp_accountant
    assert epsilon_spent(DPConfig(), 1000, 100, 3) == prv
    for accountant, expected in (("prv", prv), ("rdp", rdp)):
        with trainer(1000, 100, DPConfig(accountant=accountant)) as private:
            private.accountant.history = [(1.906, 0.1, 30)]
            assert private.epsilon() == expected


@pytest.mark.parametrize(
    "sigma, q, steps",
    [(1.906, 0.1, 30), (1.906, 0.1, 300), (1.906, 64 / 540, 90), (1.906, 0.05, 20), (1.906, 16 / 48, 3)],
)
def test_prv_saves_6_to_16_percent_on_our_settings(sigma, q, steps):
    """The range the docstrings state: the paper's σ, δ = 1e-5, the q and step counts of our configs and tests
    (e.g. 64 of ~540 images for 10 epochs: configs/fedssyn_mnist_vae_dp.toml)."""
    ratio = compute_epsilon("prv", sigma, q, steps, 1e-5) / compute_epsilon("rdp", sigma, q, steps, 1e-5)
    assert 0.84 <= ratio <= 0.94


def test_compute_epsilon_unknown_accountant_and_no_steps():
    with pytest.raises(InputError, match="accountant must be one of prv, rdp"):
        compute_epsilon("gdp", 1.0, 0.1, 10, 1e-5)
    assert compute_epsilon("prv", 1.0, 0.1, 0, 1e-5) == 0.0
