"""Class-conditional DCGAN, the GAN variant of Fedssyn's local generator (Fig. 4(c) of the paper).

Fedssyn (Li, Esfandiari, Schmidt, Alstrøm, "Synthetic data shuffling accelerates the convergence of federated
learning under data heterogeneity") trains a class-conditional generator on each client's ρ·n_i images and
compares DDPM with GAN-based generators in Fig. 4(c) (NDA, Sinha et al. 2021; DiffAugment GANs, Zhao et al. 2020;
StyleGAN2-ADA, Karras et al. 2020) without giving their architectures. This module is a compact stand-in:

- generator: a DCGAN (Radford, Metz and Chintala 2016, "Unsupervised representation learning with deep
  convolutional generative adversarial networks") conditioned as in Mirza and Osindero 2014 ("Conditional
  generative adversarial nets"): a learned label embedding is concatenated to z ~ N(0, I), a linear layer maps
  the pair to 4c feature maps of size H/4 × W/4, two stride-2 transposed convolutions (BatchNorm + ReLU) upsample
  to H × W, and a 3×3 convolution with tanh gives the image in [-1, 1]. Works for 28×28 (7 → 14 → 28) and
  32×32 (8 → 16 → 32), any H, W divisible by 4.
- discriminator: three convolutions with LeakyReLU(0.2) and spectral normalisation (Miyato, Kataoka, Koyama and
  Yoshida 2018, "Spectral normalization for generative adversarial networks") instead of BatchNorm, global sum
  pooling to a feature h, and the projection head of Miyato and Koyama 2018 ("cGANs with projection
  discriminator"): logit = w·h + b + ⟨embed(y), h⟩.
- loss: the non-saturating GAN loss of Goodfellow et al. 2014, d_loss = softplus(-D(x, y)) + softplus(D(G(z, y), y)),
  g_loss = softplus(-D(G(z, y), y)); the fake images of a step use the labels of that step's real batch, so the
  generator sees the client's class frequencies. Adam(lr, betas) for both networks, one D step then one G step.
- under DP-SGD (``privacy``), the generator must not see the private labels nor the Poisson batch's size, which
  would reach its weights (and its BatchNorm statistics) outside the accountant: a step's fakes are then
  ``batch_size`` images with labels drawn uniformly over the classes and z from the run's ``torch.Generator``,
  independent of the private data, used by both the D step and the G step. The discriminator's per-sample
  gradient j is still that of (real j, fake j) (Opacus sums the two forward passes row by row; a row without a
  real image or without a fake holds only the other), clipped as one.

Weights are drawn (DCGAN initialisation: N(0, 0.02) for convolutions and linear layers, N(1, 0.02) for
BatchNorm scales) from the ``torch.Generator`` given to the first :meth:`CGAN.fit`, unless
:meth:`CGAN.load_state_dict` came first; the weights torch's layers draw at construction are replaced. A run is
thus reproducible from its seed without seeding torch's global generator. :meth:`CGAN.sample` runs the generator
in eval mode (BatchNorm running statistics), so a sample does not depend on the other images drawn with it.

The input checks and batching (:func:`~fl.synthesis.generators.base.check_training_data` and the others) live in
:mod:`fl.synthesis.generators.base`, shared with :mod:`fl.synthesis.generators.vae`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl.synthesis.generators.base import (
    check_generator,
    check_in_shape,
    check_sample_labels,
    check_training_data,
    load_module_state,
    scalar,
    to_uint8,
    to_unit,
)
from fl.synthesis.generators.dp import DPConfig, training
from theory import _validate
from theory.errors import InputError

# Images decoded per forward pass in ``sample`` (bounds memory; the result does not depend on it).
SAMPLE_CHUNK = 1024


@dataclass(frozen=True)
class CGANConfig:
    """latent_dim: dimension of z ~ N(0, I) (and of the generator's label embedding). base_channels: c, the
    width of the last generator block and of the first discriminator convolution (the others use 2c and 4c).
    lr, betas: Adam's step size and (β1, β2) for both networks (DCGAN: 2e-4, (0.5, 0.999)). batch_size: real
    images per step (the same number of fakes is drawn). spectral_norm: spectrally normalised discriminator
    layers (off for DP-SGD: Opacus cannot compute per-sample gradients through their power-iteration buffers)."""

    latent_dim: int = 64
    base_channels: int = 32
    lr: float = 2e-4
    betas: tuple[float, float] = (0.5, 0.999)
    batch_size: int = 64
    spectral_norm: bool = True

    def __post_init__(self) -> None:
        for name in ("latent_dim", "base_channels", "batch_size"):
            object.__setattr__(self, name, _validate.count(f"CGANConfig.{name}", getattr(self, name)))
        object.__setattr__(self, "lr", scalar("CGANConfig.lr", self.lr, _validate.positive))
        betas = _validate.as_float_array("CGANConfig.betas", self.betas)
        if betas.shape != (2,) or not ((betas >= 0) & (betas < 1)).all():
            raise InputError(f"CGANConfig.betas must be two numbers in [0, 1), got {self.betas!r}")
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        if not isinstance(self.spectral_norm, bool):
            raise InputError(f"CGANConfig.spectral_norm must be true or false, got {self.spectral_norm!r}")


class CGAN:
    """Conditional DCGAN with a projection discriminator (see the module docstring).

    ``CGAN((1, 28, 28), 10).fit(x, y, epochs, torch.Generator().manual_seed(0))`` trains it on uint8 images;
    ``sample(labels, generator)`` returns uint8 images of those labels. ``nets["generator"]`` and
    ``nets["discriminator"]`` are the two torch modules.
    """

    def __init__(self, in_shape: tuple[int, int, int], n_classes: int, config: CGANConfig | None = None) -> None:
        self.config = CGANConfig() if config is None else config
        if not isinstance(self.config, CGANConfig):
            raise InputError(f"config must be a CGANConfig, got {type(self.config).__name__}")
        self.in_shape = check_in_shape(in_shape)
        self.n_classes = _validate.count("n_classes", n_classes)
        c = self.config.base_channels
        self.nets = nn.ModuleDict(
            {
                "generator": _Generator(self.in_shape, self.n_classes, self.config.latent_dim, c),
                "discriminator": _ProjectionDiscriminator(self.in_shape, self.n_classes, c, self.config.spectral_norm),
            }
        )
        betas = self.config.betas
        self._g_optimizer = torch.optim.Adam(self.nets["generator"].parameters(), lr=self.config.lr, betas=betas)
        self._d_optimizer = torch.optim.Adam(self.nets["discriminator"].parameters(), lr=self.config.lr, betas=betas)
        self._weights_from_seed = False  # set once weights come from fit's generator or a state dict
        self.epochs_done = 0  # passed to on_epoch, counting across fit calls

    def reset_parameters(self, generator: torch.Generator) -> None:
        """DCGAN initialisation from ``generator``: N(0, 0.02) weights, N(1, 0.02) BatchNorm scales, zero biases;
        the generator's label embedding N(0, 1) like z; fresh spectral-norm vectors and BatchNorm statistics."""
        for module in self.nets.modules():
            if isinstance(module, nn.Embedding):
                std = 1.0 if module is self.nets["generator"].embed else 0.02
                nn.init.normal_(module.weight, 0.0, std, generator=generator)
            elif isinstance(module, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                nn.init.normal_(module.weight, 0.0, 0.02, generator=generator)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.normal_(module.weight, 1.0, 0.02, generator=generator)
                module.reset_running_stats()
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, _SpectralNormMixin):
                module.reset_spectral_vectors(generator)
        self._weights_from_seed = True

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        generator: torch.Generator,
        on_epoch: Callable[[int, CGAN], None] | None = None,
        privacy: DPConfig | None = None,
    ) -> list[dict[str, float]]:
        """Train for ``epochs`` passes over (x uint8 (n, C, H, W), y int (n,)); returns per epoch the mean
        {"d_loss", "g_loss"} over the real images, and calls ``on_epoch(epoch, self)`` after each epoch with
        epoch = :attr:`epochs_done` (1, 2, …, counting across fit calls and restored by load_state_dict).

        ``privacy``: DP-SGD on the discriminator, the only network that sees the private images (as in DP-GAN,
        Xie et al. 2018); the generator's updates are post-processing, as its fakes are ``batch_size`` images of
        uniformly drawn labels (:meth:`fake_labels`), not the real batch's. Per-sample gradients need
        ``spectral_norm = False``. Each epoch's record adds "epsilon", the ε spent in this call."""
        images, labels = check_training_data(x, y, self.in_shape, self.n_classes)
        epochs = _validate.count("epochs", epochs, minimum=0)
        check_generator(generator)
        if privacy is not None and self.config.spectral_norm:
            raise InputError("CGAN with DP-SGD needs CGANConfig(spectral_norm=False) (Opacus cannot handle it)")
        if not self._weights_from_seed:
            self.reset_parameters(generator)
        g_net, d_net = self.nets["generator"], self.nets["discriminator"]
        trainer = training(d_net, self._d_optimizer, len(labels), self.config.batch_size, privacy, generator)
        history = []
        try:
            with trainer:
                for _ in range(epochs):
                    self.nets.train()
                    d_sum = g_sum = 0.0
                    seen = 0
                    for index in trainer.batches(generator):
                        real, y_batch = to_unit(images[index]), labels[index]
                        y_fake = self.fake_labels(generator) if trainer.private else y_batch
                        z = torch.randn(len(y_fake), self.config.latent_dim, generator=generator)
                        fake = g_net(z, y_fake)

                        d_real, d_fake = F.softplus(-d_net(real, y_batch)), F.softplus(d_net(fake.detach(), y_fake))
                        d_loss = d_real.mean() + d_fake.mean()
                        trainer.optimizer.zero_grad(set_to_none=True)
                        if trainer.private:
                            # Opacus scales a "mean" loss by its longest forward batch: with this normalisation
                            # the per-sample gradient of row j is exactly that of real j plus fake j (then clipped).
                            rows = max(len(d_real), len(d_fake))
                            ((d_real.sum() + d_fake.sum()) / rows).backward()
                        else:
                            d_loss.backward()
                        trainer.step()

                        # Non-saturating generator loss: maximise log D(G(z)) rather than minimise log(1 - D(G(z))).
                        with trainer.pause():
                            g_loss = F.softplus(-d_net(fake, y_fake)).mean()
                            self._g_optimizer.zero_grad(set_to_none=True)
                            g_loss.backward()
                        self._g_optimizer.step()

                        d_sum += d_loss.item() * len(index)
                        g_sum += g_loss.item() * len(index)
                        seen += len(index)
                    history.append({"d_loss": d_sum / max(seen, 1), "g_loss": g_sum / max(seen, 1)} | trainer.report())
                    self.epochs_done += 1
                    if on_epoch is not None:
                        on_epoch(self.epochs_done, self)
        finally:
            self.nets.eval()
        return history

    def fake_labels(self, generator: torch.Generator) -> torch.Tensor:
        """The conditioning labels of a training step's fakes under DP: ``batch_size`` labels drawn uniformly over
        the classes from ``generator``, whatever the private batch (its labels, its Poisson size)."""
        return torch.randint(self.n_classes, (self.config.batch_size,), generator=generator)

    def sample(self, labels: np.ndarray, generator: torch.Generator) -> np.ndarray:
        """uint8 images (m, C, H, W) of the given labels; z ~ N(0, I) drawn from ``generator``."""
        label_tensor = check_sample_labels(labels, self.n_classes)
        check_generator(generator)
        g_net = self.nets["generator"].eval()
        z = torch.randn(len(label_tensor), self.config.latent_dim, generator=generator)
        images = torch.empty(len(label_tensor), *self.in_shape)
        with torch.no_grad():
            for start in range(0, len(label_tensor), SAMPLE_CHUNK):
                part = slice(start, start + SAMPLE_CHUNK)
                images[part] = g_net(z[part], label_tensor[part])
        return to_uint8(images)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Both networks' weights and buffers (BatchNorm statistics, spectral-norm vectors), as copies, and
        "epochs_done" as a 0-d tensor. Optimiser moments are not saved: fit after load restarts Adam."""
        state = {key: value.detach().clone() for key, value in self.nets.state_dict().items()}
        return {**state, "epochs_done": torch.tensor(self.epochs_done)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.epochs_done = load_module_state(self.nets, state, "CGAN")
        self._weights_from_seed = True


class _Generator(nn.Module):
    """(z, y) -> image in [-1, 1]: [z, embed(y)] -> linear -> 4c × H/4 × W/4 -> 2 × (BN, ReLU, convT ↑2) -> BN,
    ReLU, 3×3 conv, tanh."""

    def __init__(self, in_shape: tuple[int, int, int], n_classes: int, latent_dim: int, c: int) -> None:
        super().__init__()
        channels, height, width = in_shape
        self.start = (4 * c, height // 4, width // 4)
        self.embed = nn.Embedding(n_classes, latent_dim)
        self.project = nn.Linear(2 * latent_dim, math.prod(self.start), bias=False)  # BatchNorm follows
        self.body = nn.Sequential(
            nn.BatchNorm2d(4 * c),
            nn.ReLU(),
            nn.ConvTranspose2d(4 * c, 2 * c, 4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * c),
            nn.ReLU(),
            nn.ConvTranspose2d(2 * c, c, 4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, channels, 3, padding=1),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.project(torch.cat([z, self.embed(y)], dim=1))
        return self.body(h.view(-1, *self.start))


class _ProjectionDiscriminator(nn.Module):
    """(x, y) -> logit: 3 spectrally normalised convs (LeakyReLU 0.2), sum pooling to h, w·h + b + ⟨embed(y), h⟩."""

    def __init__(self, in_shape: tuple[int, int, int], n_classes: int, c: int, spectral_norm: bool = True) -> None:
        super().__init__()
        conv, linear, embedding = (
            (_SNConv2d, _SNLinear, _SNEmbedding) if spectral_norm else (nn.Conv2d, nn.Linear, nn.Embedding)
        )
        self.body = nn.Sequential(
            conv(in_shape[0], c, 4, stride=2, padding=1),
            nn.LeakyReLU(0.2),
            conv(c, 2 * c, 4, stride=2, padding=1),
            nn.LeakyReLU(0.2),
            conv(2 * c, 4 * c, 3, padding=1),
            nn.LeakyReLU(0.2),
        )
        self.linear = linear(4 * c, 1)
        self.embed = embedding(n_classes, 4 * c)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.body(x).sum(dim=(2, 3))
        return self.linear(h).squeeze(1) + (self.embed(y) * h).sum(dim=1)


class _SpectralNormMixin:
    """W / σ(W) with σ(W) = uᵀ W v estimated by one power iteration per training-mode forward (Miyato et al.
    2018, Algorithm 1). u and v are buffers (saved in the state dict and used as they are in eval mode);
    they are drawn from a ``torch.Generator`` in :meth:`reset_spectral_vectors`, never from the global one."""

    weight: torch.Tensor
    training: bool

    def _init_spectral_buffers(self) -> None:
        rows, cols = self.weight.shape[0], self.weight[0].numel()
        self.register_buffer("sn_u", F.normalize(torch.ones(rows), dim=0))
        self.register_buffer("sn_v", F.normalize(torch.ones(cols), dim=0))

    def reset_spectral_vectors(self, generator: torch.Generator, iterations: int = 15) -> None:
        with torch.no_grad():
            self.sn_u.copy_(F.normalize(torch.randn(self.sn_u.shape, generator=generator), dim=0))
            for _ in range(iterations):
                self._power_iteration()

    def _power_iteration(self) -> None:
        matrix = self.weight.detach().flatten(1)
        self.sn_v.copy_(F.normalize(matrix.t() @ self.sn_u, dim=0, eps=1e-12))
        self.sn_u.copy_(F.normalize(matrix @ self.sn_v, dim=0, eps=1e-12))

    def normalised_weight(self) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self._power_iteration()
        # Clones: the buffers change in place at the next forward, possibly before this graph's backward.
        u, v = self.sn_u.clone(), self.sn_v.clone()
        sigma = u @ (self.weight.flatten(1) @ v)
        return self.weight / sigma


class _SNConv2d(_SpectralNormMixin, nn.Conv2d):
    def __init__(self, *args: int, **kwargs: int) -> None:
        super().__init__(*args, **kwargs)
        self._init_spectral_buffers()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, self.normalised_weight(), self.bias)


class _SNLinear(_SpectralNormMixin, nn.Linear):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self._init_spectral_buffers()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.normalised_weight(), self.bias)


class _SNEmbedding(_SpectralNormMixin, nn.Embedding):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self._init_spectral_buffers()

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return F.embedding(y, self.normalised_weight())
