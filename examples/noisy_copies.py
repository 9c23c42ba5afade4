"""A template method: every client trains on its data plus Gaussian-noised copies of it (data augmentation as a
"synthetic set"). Use it as ``method.name = "examples.noisy_copies:NoisyCopies"``.

What it shows, in the order a method meets the engine (the hooks of :mod:`fl.methods.base`):

- a frozen dataclass whose fields all have defaults: they are its ``[method]`` keys, each mapped to its meaning;
- :meth:`check` refuses a bad value in one line naming ``method.KEY`` (:func:`fl.methods.base.require`);
- :meth:`prepare_client` runs on client i with its own D_i only (``split.original[i]``), drawing from a generator
  seeded by (run seed, i), never from a global one: the same copies in ``fl.run``, the batched backend and a Flower
  node;
- :meth:`prepare_server` hands the engine the sets in "own" mode: client i trains on D_i ∪ its own copies;
- no :class:`~fl.methods.base.LocalTask`, so the batched backend can train its clients; no state kept between
  rounds (a method that keeps some replaces entries of ``state`` and never changes a stored tensor in place);
- ``not_distributed = ""``: it runs through Flower (the copies are made on each node; the Flower app sends them to
  the server and deals them back, as it does every synthetic set: a real deployment would keep them local).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fl.methods.base import Method, Setup, Split, require


@dataclass(frozen=True)
class NoisyCopies(Method):
    """copies: noisy copies of each of a client's images (m); sigma: the noise's standard deviation in pixel
    values 0-255 (x̃ = clip(x + σ·ε), ε ~ N(0, I))."""

    name: ClassVar[str] = "noisy-copies"
    not_distributed: ClassVar[str] = ""
    copies: int = 1
    sigma: float = 25.0

    def check(self) -> NoisyCopies:
        require(self.copies >= 1, "copies", "must be >= 1")
        require(self.sigma >= 0, "sigma", "must be >= 0 (pixel values)")
        return self

    def prepare_client(self, setup: Setup, split: Split, i: int) -> dict:
        rng = np.random.default_rng([setup.seed, i, 1729])  # client i's own draws: no global state
        index = np.repeat(split.original[i], self.copies)
        x = setup.dataset.x_train[index].astype(np.float32)
        x = np.clip(x + self.sigma * rng.standard_normal(x.shape, dtype=np.float32), 0, 255).round()
        return {"x": x.astype(np.uint8), "y": setup.dataset.y_train[index], "info": {"copies": len(index)}}

    def prepare_server(self, setup: Setup, split: Split, sent: list, seconds: float) -> tuple[Split, dict]:
        sets = [(s["x"], s["y"]) for s in sent]
        info = {"noisy_copies": sum(s["info"]["copies"] for s in sent), "seconds_copying": seconds}
        return Split(split.train, split.val, split.original, sets, "own"), info

    def report(self, info: dict, state: dict) -> dict:
        return info
