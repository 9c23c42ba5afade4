"""DP-SGD for the generators (Abadi et al. 2016, "Deep learning with differential privacy") through Opacus.

The revised Fedssyn paper (Sec. 6, after Dockhorn et al. 2022) trains each client's DDPM with DP-SGD, noise
multiplier 1.906 and clipping threshold 1.0, with Opacus. Here every trainable generator can do the same:

- per-sample gradients: :class:`opacus.GradSampleModule` hooks on the network that sees the private images
  (the DDPM's U-Net, the β-VAE's encoder and decoder, the GAN's discriminator);
- each step: every per-sample gradient clipped to norm ``max_grad_norm`` C, summed, Gaussian noise
  N(0, (σ_DP·C)²) added (drawn from the run's ``torch.Generator``), divided by the expected batch size
  (:class:`opacus.optimizers.DPOptimizer` around the generator's own Adam/AdamW);
- batches are Poisson-sampled, each image independently with rate q = B/n, ⌈n/B⌉ steps an epoch, as the
  accountants assume (a shuffled fixed-size batch would not match their analysis);
- the privacy spent, ε for the given δ, after every epoch, from one of Opacus's accountants (:data:`ACCOUNTANTS`,
  :func:`compute_epsilon`). "prv", the default: the privacy-loss-random-variable accountant of Gopi, Lee and
  Wutschitz 2021 ("Numerical composition of differential privacy"), which composes the subsampled Gaussian
  numerically and returns an upper bound on ε (about 0.01 above the true value: eps_error 0.01). It is what
  Opacus recommends, and it gives 6-16% less than "rdp" on the settings we tried (q = 0.1, 30 steps,
  σ = 1.906, δ = 1e-5: 1.398 against 1.569). "rdp": the Rényi-DP accountant (Mironov 2017; Mironov, Talwar and
  Zhang 2019) with Balle et al. 2020's conversion, kept for comparison with the paper, whose ε come from it.
  Both analyse add/remove-one neighbouring datasets with q = B/n taken as public, as Opacus does.

What ε covers. ε bounds the privacy loss of the weights trained with DP-SGD (the DP network, and the GAN's
generator, trained only through the DP discriminator: post-processing) and so of the synthetic images a client
sends, which are drawn from those weights with fresh noise. Everything else a client sends is independent of the
private images and labels under DP (given n), so it costs nothing more:

- the GAN's generator never sees a private label or a Poisson batch size: under DP its fakes (for both the
  discriminator and the generator step) are ``batch_size`` images of labels drawn uniformly over the classes
  from the run's ``torch.Generator`` (:mod:`~fl.synthesis.generators.gan`), so its BatchNorm statistics are
  public too;
- the β-VAE's per-class latent means are computed from the private images and are not used under DP (it samples
  its conditional decoder from the prior N(0, I)), and its ``class_counts`` buffer stays 0;
- the synthetic labels follow uniform class counts, not the private subset's
  (:func:`fl.synthesis.fedssyn.synthetic_labels`);
- the DDPM's EMA weights are an average of DP-SGD iterates (post-processing).

Not covered: an empty Poisson batch (probability (1-q)^n, about e^{-B}, per step) is skipped rather than taken
as a noise-only step, which shows it was empty; it is counted by the accountant, and it adds at most
(1 + e^ε)·T·(1-q)^(n-1) to δ over T steps (below 1e-19 for B = 64, T = 10^4 and ε ≤ 10). The training losses
and the subset's class counts written to a generator's cache folder and to the run summary are computed from the
private data: they are the experimenter's diagnostics, not part of what Fedssyn sends, and not covered by ε.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from fl.synthesis.generators.base import PlainTraining, scalar
from theory import _validate
from theory.errors import InputError

# The accountants ε can come from (see the module docstring); the first is the default.
ACCOUNTANTS = ("prv", "rdp")


@dataclass(frozen=True)
class DPConfig:
    """noise_multiplier: σ_DP, noise std over the clipping norm (revised paper: 1.906). max_grad_norm: C, the
    per-sample clipping threshold (1.0). delta: δ of (ε, δ)-DP (Dockhorn et al. 2022 use 1e-5). accountant: how
    ε is computed, "prv" (tighter, Opacus's recommendation) or "rdp" (the paper's); it changes no training step."""

    noise_multiplier: float = 1.906
    max_grad_norm: float = 1.0
    delta: float = 1e-5
    accountant: str = ACCOUNTANTS[0]

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "max_grad_norm"):
            object.__setattr__(self, name, scalar(f"DPConfig.{name}", getattr(self, name), _validate.positive))
        delta = scalar("DPConfig.delta", self.delta, _validate.positive)
        if delta >= 1:
            raise InputError(f"DPConfig.delta must lie in (0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", delta)
        if self.accountant not in ACCOUNTANTS:
            raise InputError(f"DPConfig.accountant must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")


@functools.lru_cache(maxsize=4096)
def compute_epsilon(accountant: str, noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε for δ after ``steps`` Poisson-subsampled Gaussian steps (rate q = ``sample_rate``, noise σ_DP), from
    Opacus's ``accountant`` ("prv": its upper bound, within 2·eps_error = 0.02 of the true ε; "rdp"); 0 for no
    step. Cached: the PRV
    accountant takes 0.1-2 s per call and the same (σ, q, steps, δ) is asked for again (every epoch of a fit,
    then per client from the counts)."""
    from opacus.accountants import PRVAccountant, RDPAccountant

    if accountant not in ACCOUNTANTS:
        raise InputError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")
    if steps == 0:
        return 0.0
    counter = PRVAccountant() if accountant == "prv" else RDPAccountant()
    counter.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    with warnings.catch_warnings():  # the PRV's domain computation warns about log(0) at q = 1
        warnings.simplefilter("ignore")
        return float(counter.get_epsilon(delta))


class PrivateTraining:
    """DP-SGD state of one generator network: per-sample gradient hooks, the noisy optimiser, the accountant.

    ``module``: the network whose parameters ``optimizer`` updates and which sees the private images;
    ``n``: private images; ``batch_size``: B, the expected batch size. Use :meth:`batches` for an epoch's
    Poisson batches, ``optimizer.zero_grad`` / backward of the *mean* loss over the batch / :meth:`step`;
    :meth:`epsilon` is the ε spent so far. :meth:`pause` disables the hooks (e.g. the GAN's generator step
    backpropagates through the discriminator). Use it as a context manager: inside, the warnings Opacus's hooks
    raise at every backward are silenced; on leaving, the hooks are removed (the network is left as built).
    Same interface as :class:`~fl.synthesis.generators.base.PlainTraining`; :func:`training` picks one.
    """

    private = True

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        n: int,
        batch_size: int,
        config: DPConfig,
        generator: torch.Generator,
    ) -> None:
        from opacus import GradSampleModule
        from opacus.accountants import RDPAccountant
        from opacus.optimizers import DPOptimizer

        if not isinstance(config, DPConfig):
            raise InputError(f"privacy must be a DPConfig, got {type(config).__name__}")
        self.config = config
        self.n = n
        self.batch_size = min(batch_size, n)
        self.sample_rate = self.batch_size / n
        self.steps_per_epoch = math.ceil(n / self.batch_size)
        with warnings.catch_warnings():  # Opacus warns that its (non-cryptographic) RNG is not secure_mode
            warnings.simplefilter("ignore")
            try:
                self.module = GradSampleModule(module)
            except NotImplementedError as error:
                raise InputError(f"Opacus cannot train this network with DP-SGD: {error}") from None
            self.optimizer = DPOptimizer(
                optimizer,
                noise_multiplier=config.noise_multiplier,
                max_grad_norm=config.max_grad_norm,
                expected_batch_size=self.batch_size,
                generator=generator,
            )
        # Opacus's RDP accountant object only records the steps ((σ, q, count) in ``history``); ε comes from
        # :func:`compute_epsilon` with the configured accountant.
        self.accountant = RDPAccountant()

    def batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """One epoch: ⌈n/B⌉ Poisson batches (each image in with probability q = B/n), drawn from ``generator``;
        an empty batch is not yielded but is accounted for."""
        for _ in range(self.steps_per_epoch):
            draws = torch.rand(self.n, generator=generator, device=generator.device).cpu()
            index = (draws < self.sample_rate).nonzero().squeeze(1)
            if len(index):
                yield index
            else:
                self._account()

    def step(self) -> None:
        """Clip, noise and apply the gradients of the last backward; count the step."""
        self.optimizer.step()
        self._account()

    def _account(self) -> None:
        self.accountant.step(noise_multiplier=self.config.noise_multiplier, sample_rate=self.sample_rate)

    def epsilon(self) -> float:
        """ε spent so far for the configured δ, from the configured accountant; 0 before the first step."""
        if not self.accountant.history:
            return 0.0
        ((noise_multiplier, sample_rate, steps),) = self.accountant.history  # one entry: σ and q never change
        return compute_epsilon(self.config.accountant, noise_multiplier, sample_rate, steps, self.config.delta)

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Hooks off inside (a backward through this network that must not count as a private step)."""
        self.module.disable_hooks()
        try:
            yield
        finally:
            self.module.enable_hooks()

    def report(self) -> dict[str, float]:
        """What an epoch's record adds: "epsilon", the ε spent so far."""
        return {"epsilon": self.epsilon()}

    def __enter__(self) -> PrivateTraining:
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
        warnings.filterwarnings("ignore", module="opacus")
        return self

    def __exit__(self, *exc: object) -> None:
        self.module._close()
        self._warnings.__exit__(*exc)


def training(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    n: int,
    batch_size: int,
    privacy: DPConfig | None,
    generator: torch.Generator,
) -> PlainTraining | PrivateTraining:
    """The step mechanism of a generator's fit: :class:`PlainTraining` without ``privacy``, else DP-SGD."""
    if privacy is None:
        return PlainTraining(optimizer, n, batch_size)
    return PrivateTraining(module, optimizer, n, batch_size, privacy, generator)
