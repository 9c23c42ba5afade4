"""Is a copy of a dataset whole, and is it the published one?

- :func:`idx_problem`, :func:`tail_problem`: why a file found in a data root cannot be whole (a wrong magic, a
  header whose shape the file's size or gzip trailer contradicts, a pickle or JSON file cut short), from its first
  and last bytes only, so that ``python -m fl.data list`` and the search of :func:`fl.data.datasets.locate` skip a
  damaged copy (and say so) instead of letting it shadow a whole one further down the roots.
- :func:`read_published_idx`: an MNIST / Fashion-MNIST IDX file read and checked against the md5 its publisher
  gives: the ``.gz`` file's (what ``fetch`` downloads, :data:`fl.data.sources.SOURCES`) or its contents'
  (:data:`PUBLISHED_MD5`; Debian's ``dataset-fashion-mnist`` recompresses the same contents). A file that is
  neither is damaged or altered (a valid gzip of all-zero images included) and is refused.
- :func:`file_digests`: md5 and sha256 of a file, computed once per process for one (path, size, mtime, inode):
  what a run's ``provenance.json`` records of every file it read (:meth:`fl.data.Dataset.record`).
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from fl.data.formats import GZIP_MAGIC, IDX_DTYPES, DataError, gunzipped, parse_idx, read_raw
from fl.data.sources import SOURCES

# md5 of the uncompressed published files (torchvision's ``raw_data`` lists, Zalando's README); the .gz files' md5
# are fetch's (fl.data.sources.SOURCES).
PUBLISHED_MD5: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    },
    "fmnist": {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    },
}

_DIGESTS: dict[tuple, dict] = {}  # (path, size, mtime, inode, ctime) -> digests: each file hashed once per process


def _stat_key(path: Path) -> tuple:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns


def file_digests(path: Path, raw: bytes | None = None) -> dict:
    """{"bytes", "md5", "sha256"} of the file at ``path`` (``raw``: its bytes, when already read), computed once
    per process for one size, mtime and inode of it."""
    path = Path(path)
    key = _stat_key(path)
    found = _DIGESTS.get(key)
    if found is None:
        md5, sha256 = hashlib.md5(), hashlib.sha256()
        if raw is not None:
            md5.update(raw)
            sha256.update(raw)
        else:
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    md5.update(block)
                    sha256.update(block)
        found = _DIGESTS[key] = {"bytes": key[1], "md5": md5.hexdigest(), "sha256": sha256.hexdigest()}
    return found


def published_md5(dataset: str, file: str) -> tuple[set[str], str | None]:
    """(the md5 of the published ``file``.gz, fetch's; the md5 of its contents) of one IDX file of ``dataset``;
    contents None: nothing is known of it, and it is not checked."""
    gz = {
        archive.checksum.split(":", 1)[1]
        for archive in SOURCES.get(dataset, ())
        if archive.filename == f"{file}.gz" and archive.checksum.startswith("md5:")
    }
    return gz, PUBLISHED_MD5.get(dataset, {}).get(file)


def read_published_idx(path: Path, dataset: str, file: str) -> np.ndarray:
    """The IDX file ``path`` (``file``, raw or .gz, of ``dataset``) as an array, after checking it against the
    published md5 where one is known: a DataError naming the file when it is neither the published .gz nor holds
    the published contents."""
    raw = read_raw(path)
    digests = file_digests(path, raw)
    content = gunzipped(raw, path)
    gz, published = published_md5(dataset, file)
    if published is not None and digests["md5"] not in gz:
        if "content_md5" not in digests:
            digests["content_md5"] = hashlib.md5(content).hexdigest()
        if digests["content_md5"] != published:
            raise DataError(
                f"{path}: not the published {file} (its contents' md5 is {digests['content_md5']}, the published "
                f"one {published}): damaged or altered; put the published file there (python -m fl.data fetch "
                f"{dataset} into an empty --data-root)"
            )
    return parse_idx(content, path)


def published_problem(path: Path, dataset: str, file: str) -> str | None:
    """Why the IDX file ``path`` is not the published ``file`` of ``dataset`` (:func:`read_published_idx`'s
    refusal), None when it is or when nothing is known of it."""
    try:
        read_published_idx(path, dataset, file)
    except DataError as error:
        return str(error)
    return None


def idx_problem(path: Path, shape: tuple[int, ...], what: str) -> str | None:
    """Why the IDX file ``path`` cannot hold the uint8 ``shape`` (``what``: "images" or "labels"), read from its
    header, its size and (gzipped) its trailer only; None when it looks whole."""
    try:
        with path.open("rb") as handle:
            gzipped = handle.read(2) == GZIP_MAGIC
        with gzip.open(path, "rb") if gzipped else path.open("rb") as handle:
            magic = handle.read(4)
            if len(magic) < 4 or magic[:2] != b"\0\0" or magic[2] not in IDX_DTYPES:
                return f"{path}: not an IDX file (expected magic 0x0000 + type byte, got {magic.hex() or 'nothing'})"
            dims = handle.read(4 * magic[3])
            if len(dims) < 4 * magic[3]:
                return f"{path}: truncated IDX header"
        found = struct.unpack(f">{magic[3]}I", dims)
        size = 4 + len(dims) + math.prod(found) * IDX_DTYPES[magic[2]].itemsize
        if IDX_DTYPES[magic[2]] != np.uint8 or len(found) != len(shape) or found[1:] != shape[1:]:
            return f"{path}: expected uint8 {what} {shape}, got {IDX_DTYPES[magic[2]]} {found}"
        if found[0] != shape[0]:
            partial = " (a partial copy?)" if what == "images" else ""
            return f"{path}: expected {shape[0]} {what}, got {found[0]}{partial}"
        if gzipped:
            with path.open("rb") as handle:
                handle.seek(-4, os.SEEK_END)
                trailer = struct.unpack("<I", handle.read(4))[0]  # gzip's ISIZE: the contents' size mod 2^32
            if trailer != size % 2**32:
                return f"{path}: truncated or damaged gzip (its trailer says {trailer} bytes, the header {size})"
        elif path.stat().st_size != size:
            held = path.stat().st_size
            return f"{path}: truncated or padded (the IDX header says {size} bytes, the file holds {held})"
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        return f"{path}: unreadable or corrupt ({type(error).__name__}: {error})"
    return None


def tail_problem(path: Path) -> str | None:
    """Why the file ``path`` (a pickled CIFAR batch or an npm digits JSON) cannot be whole, from its ends only: a
    pickle ends in its STOP byte ".", a JSON object in "}"; a gzipped file is left to its reader."""
    try:
        with path.open("rb") as handle:
            head = handle.read(2)
            if head == GZIP_MAGIC:
                return None
            handle.seek(max(0, path.stat().st_size - 64))
            tail = handle.read().rstrip()
    except OSError as error:
        return f"{path}: unreadable ({error.strerror or error})"
    end = b"}" if path.suffix == ".json" else b"."
    if not tail.endswith(end):
        kind = "JSON" if end == b"}" else "pickle"
        return f"{path}: cut short or not a {kind} file (it does not end in {end.decode()!r})"
    return None
