"""DP-SGD for the generators (Abadi et al. 2016, "Deep learning with differential privacy") through Opacus.

The revised Fedssyn paper (Sec. 6, after Dockhorn et al. 2022) trains each client's DDPM with DP-SGD, noise
multiplier 1.906 and clipping threshold 1.0, with Opacus. Here every trainable generator can do the same:

- per-sample gradients: :class:`opacus.GradSampleModule` hooks on the network that sees the private images
  (the DDPM's U-Net, the β-VAE's encoder and decoder, the GAN's discriminator);
- each step: every per-sample gradient clipped to norm ``max_grad_norm`` C, summed, Gaussian noise
  N(0, (σ_DP·C)²) added (drawn from the run's ``torch.Generator``), divided by the expected batch size
  (:class:`opacus.optimizers.DPOptimizer` around the generator's own Adam/AdamW);
- batches are Poisson-sampled, each image independently with rate q = B/n, ⌈n/B⌉ steps an epoch, as the RDP
  accountant assumes (a shuffled fixed-size batch would not match its analysis);
- the privacy spent, ε for the given δ, from Opacus's RDP accountant after every epoch.

An empty Poisson batch (probability (1-q)^n, about e^{-B}) is skipped but still counted by the accountant.
Anything computed from the private images outside DP-SGD would cost privacy too: the β-VAE's per-class latent
means are therefore not used under DP (it samples its conditional decoder from the prior N(0, I)).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from fl.synthesis.generators.base import PlainTraining, scalar
from theory import _validate
from theory.errors import InputError


@dataclass(frozen=True)
class DPConfig:
    """noise_multiplier: σ_DP, noise std over the clipping norm (revised paper: 1.906). max_grad_norm: C, the
    per-sample clipping threshold (1.0). delta: δ of (ε, δ)-DP (Dockhorn et al. 2022 use 1e-5)."""

    noise_multiplier: float = 1.906
    max_grad_norm: float = 1.0
    delta: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "max_grad_norm"):
            object.__setattr__(self, name, scalar(f"DPConfig.{name}", getattr(self, name), _validate.positive))
        delta = scalar("DPConfig.delta", self.delta, _validate.positive)
        if delta >= 1:
            raise InputError(f"DPConfig.delta must lie in (0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", delta)


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
        """ε spent so far for the configured δ (RDP accountant); 0 before the first step."""
        if not self.accountant.history:
            return 0.0
        return float(self.accountant.get_epsilon(self.config.delta))

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
