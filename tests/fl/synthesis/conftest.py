"""The stand-in generator and tiny dataset shared by the Fedssyn protocol tests (test_fedssyn.py, test_dp.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
import torch

import fl.synthesis.fedssyn as fedssyn
from fl.data import Dataset


class MeanImage:
    """A stand-in generator: 'trains' by recording per-class mean images; samples them exactly. Records the
    calls: ``fits``, ``epochs_asked`` (epochs of each fit), ``privacy_seen`` (the privacy argument of each fit)."""

    fits = 0
    epochs_asked: ClassVar[list[int]] = []
    privacy_seen: ClassVar[list] = []

    def __init__(self, in_shape, n_classes, config=None):
        self.means = torch.zeros(n_classes, *in_shape)
        self.epochs_done = 0
        self.config = SimpleNamespace(batch_size=4)  # train_generator reads it to report ε under DP

    def fit(self, x, y, epochs, generator, on_epoch=None, privacy=None):
        MeanImage.fits += 1
        MeanImage.epochs_asked.append(epochs)
        MeanImage.privacy_seen.append(privacy)
        for c in np.unique(y):
            self.means[c] = torch.as_tensor(x[y == c]).float().mean(0)
        for _ in range(epochs):
            self.epochs_done += 1  # counts across fit calls and checkpoints, like the real generators
            if on_epoch is not None:
                on_epoch(self.epochs_done, self)
        return [{"loss": 1.0 / e} for e in range(1, epochs + 1)]

    def sample(self, labels, generator, steps=None):
        return self.means[torch.as_tensor(labels)].round().to(torch.uint8).numpy()

    def state_dict(self):
        return {"means": self.means, "epochs_done": torch.tensor(self.epochs_done)}

    def load_state_dict(self, state):
        self.means, self.epochs_done = state["means"], int(state["epochs_done"])


@pytest.fixture()
def fake_generator(monkeypatch):
    """Every generator the protocol builds is a :class:`MeanImage` (returned, with its call records reset)."""
    monkeypatch.setattr(fedssyn, "build_generator", lambda name, shape, n, overrides, device="cpu": MeanImage(shape, n))
    MeanImage.fits = 0
    MeanImage.epochs_asked = []
    MeanImage.privacy_seen = []
    return MeanImage


def make_tiny_dataset(n_per_class=30, n_classes=4, seed=0):
    """4 classes of 8x8 images whose brightness is 60·class plus noise; the first 20 double as the test set."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n_classes), n_per_class)
    x = (y[:, None, None, None] * 60 + rng.integers(0, 20, (len(y), 1, 8, 8))).astype(np.uint8)
    return Dataset("tiny", x, y, x[:20], y[:20], n_classes, source=None)


@pytest.fixture()
def tiny_dataset():
    """:func:`make_tiny_dataset` (call it with the sizes a test needs)."""
    return make_tiny_dataset
