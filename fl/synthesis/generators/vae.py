"""Class-conditional β-VAE, the generator of Fedssyn's dSprites experiment (NeurIPS version appendix C, revised
version appendix A.4).

Fedssyn (Li, Esfandiari, Schmidt, Alstrøm, "Synthetic data shuffling accelerates the convergence of federated
learning under data heterogeneity") trains on each client "β-VAE with the same architecture as [Burgess et al.
2018]" (batch size 256, latent dimension 10) and generates by "extract[ing] the averaged latent representations
for each class, specifically the mean of the posterior distribution μ_c", then decoding latent codes drawn from
N(μ_c, I). This module follows that recipe:

- model: the β-VAE of Higgins et al. 2017 ("β-VAE: learning basic visual concepts with a constrained variational
  framework") with the layer pattern of Burgess et al. 2018 ("Understanding disentangling in β-VAE", appendix
  A.1: 4×4 stride-2 convolutions of 32 channels, two fully connected layers of 256, a diagonal Gaussian posterior,
  mirrored decoder). Burgess et al. use four convolutions on 64×64 images; here two take 28×28 or 32×32 images to
  H/4 × W/4. The decoder is conditioned on the class (one-hot label concatenated to z, as in the conditional VAE
  of Sohn, Lee and Yan 2015); the encoder is not, so that μ_c summarises where class c lives in latent space.
- objective: the plain β-VAE bound, loss = recon + β·KL(q(z|x) ‖ N(0, I)) per image (sums over pixels and latent
  dimensions, means over the batch). The capacity-annealed objective of Burgess et al. (γ·|KL − C|) is not
  implemented. Reconstruction is Bernoulli: binary cross-entropy with logits against the pixels scaled to
  [0, 1], as in Burgess et al. and the implementation the paper used (github.com/1Konny/Beta-VAE) for dSprites;
  decoded images are the Bernoulli means sigmoid(logits).
- sampling ("dSprites-style", appendix C): after every epoch the posterior means of the training images are
  averaged per class into the buffer ``class_means`` (saved in the state dict, with ``class_counts``); a sample
  of class c decodes z ~ N(μ_c, I) with label c. A class with no training image keeps μ_c = 0, the prior.
- under DP-SGD (``privacy``): the labels enter only the per-sample losses that DP-SGD clips and noises; μ_c and
  ``class_counts`` would be computed from the private images outside it, so they stay 0 and every class decodes
  z ~ N(0, I) (see :mod:`~fl.synthesis.generators.dp` for what ε covers).

Weights are drawn (Kaiming-normal weights, zero biases, as in the 1Konny code) from the ``torch.Generator`` given
to the first :meth:`BetaVAE.fit`, unless :meth:`BetaVAE.load_state_dict` came first; the weights torch's layers
draw at construction are replaced. A run is thus reproducible from its seed without seeding torch's global
generator.
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
from fl.synthesis.generators.gan import SAMPLE_CHUNK
from theory import _validate
from theory.errors import InputError


@dataclass(frozen=True)
class BetaVAEConfig:
    """latent_dim: dimension of z (paper and Burgess et al.: 10). beta: β, the weight of the KL term (β = 1 is
    the plain VAE). base_channels: channels of the convolutions (Burgess et al.: 32). hidden_dim: width of the
    two fully connected layers (Burgess et al.: 256). lr: Adam step size. batch_size: images per step (the paper
    uses 256 on dSprites)."""

    latent_dim: int = 10
    beta: float = 4.0
    base_channels: int = 32
    hidden_dim: int = 256
    lr: float = 1e-3
    batch_size: int = 64

    def __post_init__(self) -> None:
        for name in ("latent_dim", "base_channels", "hidden_dim", "batch_size"):
            object.__setattr__(self, name, _validate.count(f"BetaVAEConfig.{name}", getattr(self, name)))
        object.__setattr__(self, "beta", scalar("BetaVAEConfig.beta", self.beta, _validate.nonnegative))
        object.__setattr__(self, "lr", scalar("BetaVAEConfig.lr", self.lr, _validate.positive))


class BetaVAE:
    """Conditional β-VAE sampled around per-class posterior means (see the module docstring).

    ``BetaVAE((1, 28, 28), 10).fit(x, y, epochs, torch.Generator().manual_seed(0))`` trains it on uint8 images;
    ``sample(labels, generator)`` returns uint8 images of those labels. ``net`` is the torch module (``encoder``,
    ``decoder`` and the buffers ``class_means`` (K, latent_dim), ``class_counts`` (K,)).
    """

    def __init__(self, in_shape: tuple[int, int, int], n_classes: int, config: BetaVAEConfig | None = None) -> None:
        self.config = BetaVAEConfig() if config is None else config
        if not isinstance(self.config, BetaVAEConfig):
            raise InputError(f"config must be a BetaVAEConfig, got {type(self.config).__name__}")
        self.in_shape = check_in_shape(in_shape)
        self.n_classes = _validate.count("n_classes", n_classes)
        self.net = _VAENet(self.in_shape, self.n_classes, self.config)
        self._optimizer = torch.optim.Adam(self.net.parameters(), lr=self.config.lr)
        self._weights_from_seed = False  # set once weights come from fit's generator or a state dict
        self.epochs_done = 0  # passed to on_epoch, counting across fit calls

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Kaiming-normal weights and zero biases drawn from ``generator``; class means back to the prior's 0."""
        for module in self.net.modules():
            if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu", generator=generator)
                nn.init.zeros_(module.bias)
        self.net.class_means.zero_()
        self.net.class_counts.zero_()
        self._weights_from_seed = True

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        generator: torch.Generator,
        on_epoch: Callable[[int, BetaVAE], None] | None = None,
        privacy: DPConfig | None = None,
    ) -> list[dict[str, float]]:
        """Train for ``epochs`` passes over (x uint8 (n, C, H, W), y int (n,)); returns per epoch the mean per
        image of {"loss", "recon", "kl"} (loss = recon + β·kl). After each epoch the class means μ_c are recomputed
        from (x, y) and ``on_epoch(epoch, self)`` is called with epoch = :attr:`epochs_done` (1, 2, …, counting
        across fit calls and restored by load_state_dict).

        ``privacy``: train with DP-SGD (:mod:`~fl.synthesis.generators.dp`; each epoch's record adds "epsilon",
        the ε spent so far); the class means are then left at the prior's 0, since computing them from the
        private images would cost privacy outside the accountant."""
        images, labels = check_training_data(x, y, self.in_shape, self.n_classes)
        epochs = _validate.count("epochs", epochs, minimum=0)
        check_generator(generator)
        if not self._weights_from_seed:
            self.reset_parameters(generator)
        trainer = training(self.net, self._optimizer, len(labels), self.config.batch_size, privacy, generator)
        history = []
        with trainer:
            for _ in range(epochs):
                self.net.train()
                recon_sum = kl_sum = 0.0
                seen = 0  # images in this epoch's batches (n, or about n under Poisson sampling)
                for index in trainer.batches(generator):
                    pixels = (to_unit(images[index]) + 1) / 2  # Bernoulli targets in [0, 1]
                    mu, logvar = self.net.encode(pixels)
                    z = mu + torch.exp(0.5 * logvar) * torch.randn(mu.shape, generator=generator)
                    logits = self.net.decode(z, labels[index])
                    recon = F.binary_cross_entropy_with_logits(logits, pixels, reduction="sum") / len(index)
                    # KL(N(μ, σ²) ‖ N(0, I)) in closed form, summed over latent dimensions (Kingma and Welling 2014).
                    kl = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum() / len(index)
                    loss = recon + self.config.beta * kl
                    trainer.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    trainer.step()
                    recon_sum += recon.item() * len(index)
                    kl_sum += kl.item() * len(index)
                    seen += len(index)
                if not trainer.private:
                    self._update_class_means(images, labels)
                recon_mean, kl_mean = recon_sum / max(seen, 1), kl_sum / max(seen, 1)
                record = {"loss": recon_mean + self.config.beta * kl_mean, "recon": recon_mean, "kl": kl_mean}
                history.append(record | trainer.report())
                self.epochs_done += 1
                if on_epoch is not None:
                    on_epoch(self.epochs_done, self)
        self.net.eval()
        return history

    def sample(self, labels: np.ndarray, generator: torch.Generator) -> np.ndarray:
        """uint8 images (m, C, H, W): class c decodes z ~ N(μ_c, I) (Fedssyn appendix C) with label c."""
        label_tensor = check_sample_labels(labels, self.n_classes)
        check_generator(generator)
        self.net.eval()
        z = self.net.class_means[label_tensor] + torch.randn(
            len(label_tensor), self.config.latent_dim, generator=generator
        )
        images = torch.empty(len(label_tensor), *self.in_shape)
        with torch.no_grad():
            for start in range(0, len(label_tensor), SAMPLE_CHUNK):
                part = slice(start, start + SAMPLE_CHUNK)
                images[part] = torch.sigmoid(self.net.decode(z[part], label_tensor[part])) * 2 - 1
        return to_uint8(images)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Encoder and decoder weights, ``class_means`` and ``class_counts`` (as copies), and "epochs_done" as a
        0-d tensor. Optimiser moments are not saved: fit after load restarts Adam."""
        state = {key: value.detach().clone() for key, value in self.net.state_dict().items()}
        return {**state, "epochs_done": torch.tensor(self.epochs_done)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.epochs_done = load_module_state(self.net, state, "BetaVAE")
        self._weights_from_seed = True

    def _update_class_means(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """μ_c = mean of the posterior means E[z | x] over the training images of class c."""
        sums = torch.zeros(self.n_classes, self.config.latent_dim)
        with torch.no_grad():
            for start in range(0, len(labels), SAMPLE_CHUNK):
                part = slice(start, start + SAMPLE_CHUNK)
                mu, _ = self.net.encode((to_unit(images[part]) + 1) / 2)
                sums.index_add_(0, labels[part], mu)
        counts = torch.bincount(labels, minlength=self.n_classes)
        self.net.class_counts.copy_(counts)
        self.net.class_means.copy_(sums / counts.clamp(min=1).unsqueeze(1))


class _VAENet(nn.Module):
    """Encoder x -> (μ, log σ²) and label-conditioned decoder (z, y) -> pixel logits, plus the class-mean buffers."""

    def __init__(self, in_shape: tuple[int, int, int], n_classes: int, config: BetaVAEConfig) -> None:
        super().__init__()
        channels, height, width = in_shape
        c, hidden, latent = config.base_channels, config.hidden_dim, config.latent_dim
        self.n_classes = n_classes
        self.bottom = (c, height // 4, width // 4)
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, c, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c, c, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(math.prod(self.bottom), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 2 * latent),
        )
        self.decoder_fc = nn.Sequential(
            nn.Linear(latent + n_classes, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, math.prod(self.bottom)),
            nn.ReLU(),
        )
        self.decoder_conv = nn.Sequential(
            nn.ConvTranspose2d(c, c, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(c, channels, 4, stride=2, padding=1),
        )
        self.register_buffer("class_means", torch.zeros(n_classes, latent))
        self.register_buffer("class_counts", torch.zeros(n_classes, dtype=torch.int64))

    def encode(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, logvar = self.encoder(pixels).chunk(2, dim=1)
        return mu, logvar

    def decode(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.decoder_fc(torch.cat([z, F.one_hot(y, self.n_classes).to(z.dtype)], dim=1))
        return self.decoder_conv(h.view(-1, *self.bottom))
