"""The interface every class-conditional generator of Fedssyn implements (DDPM, conditional GAN, β-VAE).

A generator is trained on one client's ρ·n_i images and then asked for images of given labels:

- ``fit(x, y, epochs, generator, on_epoch)``: x uint8 (n, C, H, W), y int64 (n,); trains for ``epochs`` passes
  over the data and returns one dict of mean losses per epoch; ``on_epoch(epoch, self)`` is called after each
  epoch (used to checkpoint every epoch so that "generator epochs" is a sweep, not a retrain).
- ``sample(labels, generator)``: uint8 images (m, C, H, W) of the requested classes.
- ``state_dict()`` / ``load_state_dict(state)``: tensors only (saved with ``torch.save``, read back with
  ``weights_only=True``). A generator whose ``state_dict(with_optimizer=True)`` holds its whole training state
  (weights, averages, counters, optimiser moments) sets ``resumable = True`` (the DDPM): a stopped training then
  resumes bit for bit (:mod:`fl.synthesis.fedssyn`).

Images are scaled to [-1, 1] inside (``to_unit`` / ``to_uint8``). Randomness comes from the ``torch.Generator``
passed in; nothing global is seeded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import torch
from torch import nn

from theory import _validate
from theory.errors import InputError


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


# Input checks shared by the generators (the GAN and the β-VAE use them).


def check_in_shape(in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """(C, H, W) with H and W positive multiples of 4 (two stride-2 stages), else InputError."""
    try:
        dims = tuple(in_shape)
    except TypeError:
        raise InputError(f"in_shape must be (C, H, W), got {in_shape!r}") from None
    if len(dims) != 3:
        raise InputError(f"in_shape must be (C, H, W), got {in_shape!r}")
    channels, height, width = (_validate.count(f"in_shape {name}", v) for name, v in zip("CHW", dims))
    if height % 4 or width % 4:
        raise InputError(f"in_shape H and W must be multiples of 4 (e.g. 28 or 32), got {height}x{width}")
    return channels, height, width


def check_training_data(
    x: np.ndarray, y: np.ndarray, in_shape: tuple[int, int, int], n_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x uint8 (n, *in_shape), y integer (n,) in [0, n_classes)) with n >= 1 as torch tensors, else InputError."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != tuple(in_shape):
        expected = ", ".join(map(str, in_shape))
        raise InputError(f"x must be uint8 images of shape (n, {expected}), got {x.dtype} array of shape {x.shape}")
    if len(x) == 0:
        raise InputError("x must hold at least one image")
    if y.shape != (len(x),):
        raise InputError(f"y must be one label per image, shape ({len(x)},), got {y.shape}")
    return torch.from_numpy(np.ascontiguousarray(x)), check_sample_labels(y, n_classes, "y")


def check_sample_labels(labels: np.ndarray, n_classes: int, name: str = "labels") -> torch.Tensor:
    """A 1-D array of integers in [0, n_classes) (possibly empty) as int64, else InputError."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise InputError(f"{name} must be a 1-D array, got shape {labels.shape}")
    if labels.size == 0:
        return torch.zeros(0, dtype=torch.int64)
    if not np.issubdtype(labels.dtype, np.integer):
        raise InputError(f"{name} must be integers, got dtype {labels.dtype}")
    if labels.min() < 0 or labels.max() >= n_classes:
        raise InputError(f"{name} must lie in [0, {n_classes}), got values in [{labels.min()}, {labels.max()}]")
    return torch.from_numpy(labels.astype(np.int64))


def scalar(name: str, value: float, check: Callable[[str, float], np.ndarray]) -> float:
    """One number passing ``check`` (a :mod:`theory._validate` function, e.g. ``positive``), else InputError."""
    array = check(name, value)
    if array.ndim != 0:
        raise InputError(f"{name} must be a single number, got {value!r}")
    return float(array)


def check_generator(generator: torch.Generator) -> None:
    if not isinstance(generator, torch.Generator):
        raise InputError(f"generator must be a torch.Generator, got {type(generator).__name__}")


def minibatches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch of shuffled index batches (the last one may be smaller), the order drawn from ``generator``
    (on its device; the indices come back on the CPU)."""
    yield from torch.randperm(n, generator=generator, device=generator.device).cpu().split(batch_size)


class PlainTraining:
    """How a generator's fit steps without privacy: shuffled fixed-size batches and the optimiser's own step.

    The same interface as :class:`fl.synthesis.generators.dp.PrivateTraining` (``private``, ``optimizer``,
    :meth:`batches`, :meth:`step`, :meth:`pause`, :meth:`report`, a context manager), so a fit loop is written
    once for both; :func:`fl.synthesis.generators.dp.training` picks one."""

    private = False

    def __init__(self, optimizer: torch.optim.Optimizer, n: int, batch_size: int) -> None:
        self.optimizer, self.n, self.batch_size = optimizer, n, batch_size

    def batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        return minibatches(self.n, self.batch_size, generator)

    def step(self) -> None:
        self.optimizer.step()

    def pause(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def report(self) -> dict[str, float]:
        """What an epoch's record adds (nothing without privacy)."""
        return {}

    def __enter__(self) -> PlainTraining:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def load_module_state(module: nn.Module, state: dict[str, torch.Tensor], owner: str) -> int:
    """Load ``state`` (a ``state_dict()`` of ``owner``: the module's tensors plus "epochs_done") into ``module``,
    strictly; returns epochs_done. A mismatch is a one-line InputError."""
    if not isinstance(state, dict) or "epochs_done" not in state:
        raise InputError(f"{owner} state must be the dict of tensors that {owner}.state_dict() returns")
    tensors = {key: value for key, value in state.items() if key != "epochs_done"}
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as error:
        detail = " ".join(str(error).split())
        raise InputError(f"{owner} state does not fit this model: {detail[:400]}") from None
    return int(state["epochs_done"])
