"""Your own data: ``data.dataset = "npz:PATH"`` (a numpy ``.npz`` of arrays) or a plug-in
``"package.module:function"`` that returns the same arrays as a dict (:mod:`fl.plugins`).

The arrays, checked on load (each failure one line naming the file and the array):

- ``x_train``: uint8 images, (N, C, H, W) or (N, H, W) (one channel); channels-last images, (N, H, W, C) with C
  of 1, 3 or 4 and H, W larger than C (what PIL, TensorFlow and most image files give), are refused in one line
  that names the fix, ``x.transpose(0, 3, 1, 2)``: read as (N, C, H, W) they would be H channels of W x C images;
- ``y_train``: N integer labels in 0..K-1 (K: ``n_classes`` where given, else the largest label + 1);
- ``client_ids`` (optional): N integers, the client each training sample belongs to, for the ``natural``
  partition (``data.partition = "natural"``, ``data.clients`` = the number of distinct ids; client k holds the
  k-th smallest id's samples);
- ``x_test``, ``y_test`` (optional, together): the test set, images of the training images' shape; without them
  a fixed 10% of the training samples (drawn with seed 0, the same for every run) is the test set;
- ``n_classes`` (optional): a scalar.

The file is read with ``allow_pickle=False`` (an ``.npz`` cannot run code). The dataset's name is ``npz-`` (a
plug-in's ``plugin-``) and 12 hex digits of its arrays' digest (:func:`arrays_digest`), so the caches keyed by the
name never mix two sets of arrays, and the same arrays saved again (compressed, say) are the same data; the
run's ``provenance.json`` records the file (bytes, sha256), the sizes and a digest of the arrays
(:meth:`fl.data.Dataset.record`), which a resume compares.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np

from fl.data.dataset import Dataset
from fl.data.formats import DataError, npz_arrays
from fl.data.integrity import file_digests
from fl.plugins import resolve

MAX_CLASSES = 100_000  # more than any labelled image set in use (ImageNet-21k: 21,841)
ARRAYS = ("x_train", "y_train", "client_ids", "x_test", "y_test", "n_classes")
TEST_FRACTION = 0.1  # held out as the test set when the arrays have none


def load_custom(name: str) -> Dataset:
    """The dataset ``name`` = "npz:PATH" or "package.module:function" names, checked."""
    if name.startswith("npz:"):
        return load_npz(Path(name[len("npz:") :]).expanduser())
    function = resolve(name, "data.dataset", what="a function returning a dict of arrays")
    try:
        arrays = function()
    except DataError:
        raise
    except Exception as error:
        raise DataError(f"data.dataset {name}: the function failed ({type(error).__name__}: {error})") from None
    if not isinstance(arrays, dict):
        raise DataError(f"data.dataset {name}: must return a dict of arrays ({', '.join(ARRAYS)})")
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    return from_arrays(arrays, f"plugin-{arrays_digest(arrays)}", Path(name.split(":")[0]), name)


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """12 hex digits over the arrays (name, dtype, shape, contents): what names a dataset of a user's arrays, so
    that the same arrays saved another way (an .npz compressed or not) are the same dataset."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        digest.update(key.encode() + str(arrays[key].dtype).encode() + str(arrays[key].shape).encode())
        digest.update(np.ascontiguousarray(arrays[key]).tobytes())
    return digest.hexdigest()[:12]


def load_npz(path: Path) -> Dataset:
    """The ``.npz`` at ``path`` as a Dataset (see the module docstring for its arrays)."""
    if not path.is_file():
        raise DataError(f"data.dataset npz:{path}: file not found")
    read = file_digests(path)  # recorded in provenance.json (Dataset.record), hashed once per process
    arrays = npz_arrays(path)  # every header bounded before its array is read; an object array never unpickled
    dataset = from_arrays(arrays, f"npz-{arrays_digest(arrays)}", path.resolve(), str(path))
    return replace(dataset, files=((path.name, read["bytes"], read["sha256"]),))


def _images(x: np.ndarray, what: str, where: str) -> np.ndarray:
    if x.dtype != np.uint8:
        raise DataError(f"{where}: {what} must be uint8 images (0-255), got {x.dtype}")
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or min(x.shape[1:], default=0) < 1:
        raise DataError(f"{where}: {what} must be (N, C, H, W) or (N, H, W), got shape {x.shape}")
    if channels_last(x.shape):
        raise DataError(
            f"{where}: {what} of shape {x.shape} looks channels-last (N, H, W, C) with C = {x.shape[3]}; this package "
            f"takes (N, C, H, W): save {what}.transpose(0, 3, 1, 2)"
        )
    return np.ascontiguousarray(x)


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a 4-d image array of ``shape`` is channels-last, (N, H, W, C): its last axis 1, 3 or 4 long (grey,
    RGB, RGBA) and shorter than each of the two before it. Read as (N, C, H, W), such an array would be H channels
    of W x C images, which no image set is (a 32 x 32 RGB image is (3, 32, 32), never 32 channels of 32 x 3)."""
    return len(shape) == 4 and shape[3] in (1, 3, 4) and shape[1] > shape[3] and shape[2] > shape[3]


def _labels(y: np.ndarray, n: int, what: str, where: str) -> np.ndarray:
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{where}: {what} must be a 1-d integer array, got {y.dtype} of shape {y.shape}")
    if len(y) != n:
        raise DataError(f"{where}: {what} has {len(y)} entries for {n} images")
    return y.astype(np.int64)


def from_arrays(arrays: dict[str, np.ndarray], name: str, source: Path, where: str) -> Dataset:
    """A Dataset from the arrays of an npz (or a plug-in), every check a one-line DataError naming ``where``."""
    unknown = sorted(set(arrays) - set(ARRAYS))
    if unknown:
        raise DataError(f"{where}: unknown arrays {', '.join(unknown)} (known: {', '.join(ARRAYS)})")
    missing = [k for k in ("x_train", "y_train") if k not in arrays]
    if missing:
        raise DataError(f"{where}: no {' or '.join(missing)} array")
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataError(f"{where}: x_test and y_test come together")
    x = _images(arrays["x_train"], "x_train", where)
    y = _labels(arrays["y_train"], len(x), "y_train", where)
    ids = _labels(arrays["client_ids"], len(x), "client_ids", where) if "client_ids" in arrays else None
    if "x_test" in arrays:
        x_test = _images(arrays["x_test"], "x_test", where)
        y_test = _labels(arrays["y_test"], len(x_test), "y_test", where)
        if x_test.shape[1:] != x.shape[1:]:
            raise DataError(f"{where}: x_test images are {x_test.shape[1:]}, x_train's {x.shape[1:]}")
    else:  # a fixed held-out share, the same for every run of this data
        order = np.random.default_rng(0).permutation(len(y))
        test, train = np.sort(order[: round(TEST_FRACTION * len(y))]), np.sort(order[round(TEST_FRACTION * len(y)) :])
        x, x_test, y, y_test = x[train], x[test], y[train], y[test]
        ids = ids[train] if ids is not None else None
    if not len(y):
        raise DataError(f"{where}: no training images")
    if not len(y_test):
        raise DataError(f"{where}: no test images (give x_test and y_test, or more images for the held-out share)")
    if "n_classes" in arrays:
        k = arrays["n_classes"]
        if k.ndim != 0 or not np.issubdtype(k.dtype, np.integer) or int(k) < 1:
            raise DataError(f"{where}: n_classes must be a whole number >= 1, got {k!r}")
        n_classes = int(k)
    else:
        n_classes = int(max(y.max(), y_test.max() if len(y_test) else 0)) + 1
    if n_classes > MAX_CLASSES:  # a model's head and every per-class table grow with it: refused before allocation
        said = "n_classes is" if "n_classes" in arrays else "the largest label + 1 is"
        raise DataError(f"{where}: {said} {n_classes}, over the {MAX_CLASSES} classes this package takes")
    for what, labels in (("y_train", y), ("y_test", y_test)):
        if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
            raise DataError(f"{where}: {what} has labels outside 0..{n_classes - 1} ({labels.min()}..{labels.max()})")
    return Dataset(name, x, y, x_test, y_test, n_classes, source, client_ids=ids)
