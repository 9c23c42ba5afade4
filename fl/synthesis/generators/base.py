"""The interface every class-conditional generator of Fedssyn implements (DDPM, conditional GAN, β-VAE).

A generator is trained on one client's ρ·n_i images and then asked for images of given labels:

- ``fit(x, y, epochs, generator, on_epoch)``: x uint8 (n, C, H, W), y int64 (n,); trains for ``epochs`` passes
  over the data and returns one dict of mean losses per epoch; ``on_epoch(epoch, self)`` is called after each
  epoch (used to checkpoint every epoch so that "generator epochs" is a sweep, not a retrain).
- ``sample(labels, generator)``: uint8 images (m, C, H, W) of the requested classes.
- ``state_dict()`` / ``load_state_dict(state)``: tensors only (saved with ``torch.save``, read back with
  ``weights_only=True``).

Images are scaled to [-1, 1] inside (``to_unit`` / ``to_uint8``). Randomness comes from the ``torch.Generator``
passed in; nothing global is seeded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch


def to_unit(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 images -> float32 in [-1, 1]."""
    x = torch.as_tensor(x)
    return x.float().div(127.5).sub(1.0)


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """float images in [-1, 1] -> uint8 (clipped)."""
    return ((x.detach().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu().numpy()


class Generator(Protocol):
    """A class-conditional image generator (see the module docstring)."""

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        generator: torch.Generator,
        on_epoch: Callable[[int, Generator], None] | None = None,
    ) -> list[dict[str, float]]: ...

    def sample(self, labels: np.ndarray, generator: torch.Generator) -> np.ndarray: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...
