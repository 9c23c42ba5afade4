"""The :class:`Dataset`: a labelled train/test split as uint8 images (n, C, H, W) and int64 labels (n,), whoever
read it (:mod:`fl.data.datasets` from the published files, :mod:`fl.data.custom` from your own arrays)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fl.data.formats import DataError

MIN_TEST = 5  # test images a run's accuracy needs at least: on fewer it moves in steps of over 20 points


def empty_problem(y_train: np.ndarray, y_test: np.ndarray) -> str | None:
    """Why files of a dataset's names are no copy of it whatever their format says, or None: no training image, or
    no test image.

    >>> empty_problem(np.zeros(0, int), np.zeros(5, int))
    'no training images'
    """
    if not len(y_train):
        return "no training images"
    if not len(y_test):
        return "no test images"
    return None


def content_problem(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> str | None:
    """Why these images and labels cannot give a result a run may report, or None: no training image, fewer than
    :data:`MIN_TEST` test images, fewer than two classes among the training labels (an accuracy of 1.0 by
    construction), or a channel of one value over every training image (nothing to learn there, and normalising
    it divides by zero: every model trained on it is NaN, whatever its step size).

    >>> x = np.zeros((4, 1, 2, 2), np.uint8)
    >>> content_problem(x, np.array([0, 1, 0, 1]), np.zeros((10, 1, 2, 2), np.uint8), np.zeros(10, int))
    'channel 0 of every training image is 0 (a constant channel: nothing to learn, and normalising it divides by 0)'
    """
    problem = empty_problem(y_train, y_test)
    if problem:
        return problem
    if len(y_test) < MIN_TEST:
        return f"{len(y_test)} test image(s), fewer than the {MIN_TEST} an accuracy needs"
    classes = np.unique(y_train)
    if len(classes) < 2:
        return f"every training label is {int(classes[0])} (one class: an accuracy of 1.0 by construction)"
    flat = x_train.reshape(len(x_train), x_train.shape[1], -1)
    for channel in range(flat.shape[1]):
        values = flat[:, channel]
        if values.min() == values.max():
            return (f"channel {channel} of every training image is {int(values.min())} (a constant channel: nothing "
                    "to learn, and normalising it divides by 0)")  # fmt: skip
    return None


@dataclass(frozen=True)
class Dataset:
    """A labelled train/test split; ``source`` is the folder it was read from; ``client_ids``: the client of every
    training sample where the data name them (an npz's, :mod:`fl.data.custom`; the ``natural`` partition)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    source: Path
    client_ids: np.ndarray | None = None
    files: tuple[tuple[str, int, str], ...] = ()  # every file read: (name, bytes, sha256)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one image (C, H, W)."""
        return tuple(self.x_train.shape[1:])

    def subsample(self, n_train: int, n_test: int, rng: np.random.Generator) -> Dataset:
        """A uniformly drawn subset of ``n_train`` training and ``n_test`` test images (0: keep that split whole),
        order kept. Its ``name`` says so (``fmnist-sub2000x500``), so caches keyed by the name and indices (the
        Fedssyn generators) never mix a subset with the full set.

        >>> d = Dataset("toy", np.zeros((10, 1, 2, 2), np.uint8), np.arange(10) % 2, np.zeros((4, 1, 2, 2), np.uint8),
        ...             np.arange(4) % 2, 2, Path("."))
        >>> small = d.subsample(6, 0, np.random.default_rng(0))
        >>> small.name, len(small.y_train), len(small.y_test)
        ('toy-sub6x0', 6, 4)
        """
        if not n_train and not n_test:
            return self
        for what, n, total in (("data.subsample", n_train, len(self.y_train)), ("data.test_subsample", n_test,
                                                                               len(self.y_test))):  # fmt: skip
            if n > total:
                raise DataError(f"{what} = {n} exceeds the {total} images of {self.name}")

        def pick(n: int, total: int) -> np.ndarray:
            return np.sort(rng.choice(total, n, replace=False)) if n else np.arange(total)

        train, test = pick(n_train, len(self.y_train)), pick(n_test, len(self.y_test))
        return Dataset(
            f"{self.name}-sub{n_train}x{n_test}", self.x_train[train], self.y_train[train], self.x_test[test],
            self.y_test[test], self.n_classes, self.source,
            None if self.client_ids is None else self.client_ids[train], self.files,
        )  # fmt: skip

    def check_usable(self) -> Dataset:
        """This dataset, or a one-line DataError naming it where it cannot give a result
        (:func:`content_problem`)."""
        problem = content_problem(self.x_train, self.y_train, self.x_test, self.y_test)
        if problem:
            raise DataError(f"data.dataset {self.name} (from {self.source}): {problem}")
        return self

    def record(self) -> dict:
        """What a run's provenance.json keeps of the data it read: the name, folder and sample counts, every file
        read (name, bytes, sha256) and ``sha256``, a digest of the arrays themselves (what a resume compares)."""
        digest = hashlib.sha256()
        for array in (self.x_train, self.y_train, self.x_test, self.y_test, self.client_ids):
            if array is not None:
                array = np.ascontiguousarray(array)
                digest.update(f"{array.dtype.str}{array.shape}".encode())
                digest.update(array.data)
        return {
            "dataset": self.name, "folder": str(self.source), "train": len(self.y_train), "test": len(self.y_test),
            "files": [{"name": name, "bytes": size, "sha256": sha} for name, size, sha in self.files],
            "sha256": digest.hexdigest(),
        }  # fmt: skip

    def describe(self) -> str:
        counts = np.bincount(self.y_train, minlength=self.n_classes)
        return (
            f"{self.name}: {len(self.y_train)} train / {len(self.y_test)} test images of shape {self.shape}, "
            f"{self.n_classes} classes (train per class {counts.min()}-{counts.max()}), from {self.source}"
        )
