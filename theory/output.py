"""Writing and reading results (the simulators' and the FL runs'): JSON that survives numpy types and NaN, files
replaced whole and fsynced (a crash leaves the old file or the new one), JSON files read back without a traceback,
CSV tables; and archives read within bounds (tar headers, npz headers) before a byte of their data is."""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import hashlib
import json
import lzma
import math
import os
import secrets
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from theory.errors import InputError


def to_json(value):
    """numpy arrays and scalars as lists and numbers; NaN and inf as null (strict JSON)."""
    if isinstance(value, np.ndarray):
        return [to_json(v) for v in value.tolist()] if value.ndim else to_json(value.item())
    if isinstance(value, float | np.floating):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    return value


def fsync_path(path: Path, folder: bool = False) -> None:
    """Ask the OS to put ``path``'s data (a folder's: its entries, where the OS allows it) on disk."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if folder else 0)
    try:
        handle = os.open(path, flags)
    except OSError:
        if folder:  # a folder that cannot be opened (some systems): its file is synced, the rename may lag
            return
        raise
    try:
        os.fsync(handle)
    except OSError:
        if not folder:  # folders cannot be synced on every file system (EINVAL): nothing more to do there
            raise
    finally:
        os.close(handle)


def temporary_beside(path: Path, suffix: str = ".tmp") -> Path:
    """A new empty file beside ``path``, named ``path.name`` + ``.`` + 16 random hex digits + ``suffix`` (np.savez
    needs its ".npz"), created exclusively (O_EXCL | O_NOFOLLOW): never a file or a link that was there already,
    so never a user's file; its mode is what the umask gives a new file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(8)}{suffix}")
        try:
            os.close(os.open(tmp, flags, 0o666))
        except FileExistsError:
            continue
        return tmp


def replace_durably(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """``write(tmp)`` with ``tmp`` a new file beside ``path`` (:func:`temporary_beside`: its name, a random part,
    ``suffix``), fsync it, ``os.replace(tmp, path)`` and fsync the folder: after a crash or a lost machine ``path``
    is the old file or the new one, whole, never half of one (a crash may leave the temporary, named so that no
    user's file is taken for one). A writer that fails leaves ``path`` as it was and no ``tmp``; no file this did
    not create is ever removed."""
    path = Path(path)
    tmp = temporary_beside(path, suffix)
    try:
        write(tmp)
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent, folder=True)


def write_text_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text``, written whole and fsynced (:func:`replace_durably`)."""
    replace_durably(path, lambda tmp: tmp.write_text(text))


def write_csv(path: Path, header: Sequence[str], rows) -> None:
    """One CSV file: a header row, then the rows; written whole and fsynced (:func:`replace_durably`)."""

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)

    replace_durably(path, write)


def refuse_link(path: Path, what: str = "") -> Path:
    """``path`` itself, unless it is a symbolic link (to a file or a folder, dangling or not): then a one-line
    InputError naming it (``what``: e.g. "run directory"), so that nothing is written through it."""
    if Path(path).is_symlink():
        named = f"{what} {path}" if what else str(path)
        raise InputError(f"{named}: a symbolic link; refused (this package never writes through one)")
    return Path(path)


def open_unlinked(path: Path, mode: str = "a"):
    """``path`` opened for appending (``"a"``, text; ``"ab"``, bytes; ``"ab+"``, bytes read and append) or reading
    and writing (``"a+"``), created where missing, never through a symbolic link planted at ``path`` (O_NOFOLLOW):
    such a link is an InputError in one line, and the file it points to is left as it is."""
    flags = os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_RDWR | os.O_APPEND if "+" in mode else os.O_WRONLY | os.O_APPEND
    try:
        handle = os.open(path, flags, 0o644)
    except OSError as error:
        refuse_link(path)
        raise error
    return os.fdopen(handle, mode)


def append_line_durably(path: Path, line: str) -> None:
    """``line`` appended to the log ``path`` as one line, fsynced before returning. A torn last line (a crash while
    it was written) is ended first, so it stays one bad line its readers skip and never swallows this one."""
    with open_unlinked(path, "ab+") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell():
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
        handle.write(line.rstrip("\n").encode() + b"\n")
        handle.flush()
        os.fsync(handle.fileno())


MAX_TEXT = 64 * 2**20  # the largest record file a tool reads whole (JSON, a run's rows): ours are KB to a few MB


def read_text_bounded(path: Path, what: str, limit: int = MAX_TEXT) -> str:
    """The text of the regular file ``path``, read only after it is seen to be one of at most ``limit`` bytes: a
    FIFO, a device or a folder there, or a larger file, is a one-line InputError naming ``what`` (never a read
    that blocks or fills memory). A missing file raises FileNotFoundError, as ``read_text`` does; undecodable
    bytes raise UnicodeDecodeError."""
    handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(handle)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{path}: a folder, not a regular file: not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path}: not a regular file (a FIFO, a device or a socket), not a {what}; refused")
        if info.st_size > limit:
            raise InputError(f"{path}: {info.st_size:,} bytes, over the {limit:,} a {what} may hold (more than any "
                             f"{what}); refused before reading")  # fmt: skip
        with os.fdopen(os.dup(handle), "rb") as stream:
            data = stream.read(limit + 1)
    finally:
        os.close(handle)
    if len(data) > limit:
        raise InputError(f"{path}: more than {limit} bytes, more than any {what}; refused")
    return data.decode("utf-8")


def refuse_foreign_json(path: Path, keys: Sequence[str], tool: str, links: bool = False) -> None:
    """A one-line InputError unless ``path`` (a ``--out``) is new or a JSON object holding every one of ``keys``
    (what ``tool`` writes there): a user's own file is never replaced. A symbolic link there is refused too, or
    with ``links`` left to be replaced by the rename (never written through)."""
    if path.is_symlink():
        if links:
            return
        raise InputError(f"--out {path}: a symbolic link; refused ({tool} never writes through one)")
    if not path.exists():
        return
    try:
        found = json.loads(read_text_bounded(path, f"{tool} output", 4 * 2**20))
    except (InputError, OSError, ValueError):
        found = None
    if not (isinstance(found, dict) and all(key in found for key in keys)):
        raise InputError(
            f"--out {path}: an existing file {tool} did not write (not one of its outputs); refused, left as it is: "
            "name a new file"
        )


def read_object(path: Path, what: str) -> dict:
    """The JSON object in ``path``; a missing, unreadable, corrupt or non-object file is a one-line InputError
    naming ``what`` (e.g. "config.json of a run")."""
    try:
        value = json.loads(read_text_bounded(Path(path), what))
    except FileNotFoundError:
        raise InputError(f"{path}: no {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:  # (too deeply nested)
        raise InputError(f"{path}: {what} is unreadable or not JSON ({type(error).__name__})") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: {what} is not a JSON object")
    return value


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks of 1 MiB (the one file digest of the package)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class CappedReads:
    """The decompressed bytes of an archive for :mod:`tarfile`, each read asking at most ``cap`` bytes: what tarfile
    reads whole from a header's size (a GNU long name or link, a pax header, a member) is refused in one line before
    it is read, so a header claiming a GiB never becomes a GiB in memory. ``what``: what the archive is not when a
    read asks more (e.g. "a lease archive")."""

    def __init__(self, stream, cap: int, path: Path, what: str = "a lease archive") -> None:
        self.stream, self.cap, self.path, self.what = stream, cap, path, what

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.cap:
            said = "the rest" if size is None or size < 0 else f"{size:,} bytes"
            raise InputError(f"{self.path}: a header or member asks to read {said}, over the cap of {self.cap:,}; "
                             f"not {self.what}")  # fmt: skip
        return self.stream.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.stream.seek(offset, whence)

    def tell(self) -> int:
        return self.stream.tell()


def decompressed(path: Path):
    """``path`` opened for reading, decompressed by its first bytes (gzip, bzip2, xz; else as it is): what
    ``tarfile.open(mode="r:*")`` would read, for :class:`CappedReads`."""
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if magic[:3] == b"BZh":
        return bz2.open(path, "rb")
    if magic == b"\xfd7zXZ\x00":
        return lzma.open(path, "rb")
    return open(path, "rb")


@contextlib.contextmanager
def capped_tar(path: Path, cap: int, what: str) -> Iterator[tarfile.TarFile]:
    """The tar at ``path`` (compressed or not, :func:`decompressed`) opened for reading header by header, no read
    asking more than ``cap`` bytes (:class:`CappedReads`: InputError in one line naming ``path`` and ``what`` it is
    not). The tar errors of a damaged archive (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) are
    the caller's to word."""
    with decompressed(path) as stream, tarfile.open(fileobj=CappedReads(stream, cap, Path(path), what),
                                                     mode="r:") as archive:  # fmt: skip
        yield archive


def npz_headers(path: Path, names: Sequence[str] | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of the arrays of the ``.npz`` at ``path`` (every one, or those of ``names``, each required),
    from each member's npy header alone, before any of its data is read: a plain dtype (an object array is never
    unpickled) and a shape whose bytes are what the member holds after its header (a header claiming more than the
    file holds is refused before any allocation). InputError naming the file and the array otherwise, in one line
    (a file that is no readable .npz included)."""
    path = Path(path)
    found: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename[: -len(".npy")]: info for info in archive.infolist()
                       if info.filename.endswith(".npy")}  # fmt: skip
            wanted = tuple(members) if names is None else tuple(names)
            missing = [name for name in wanted if name not in members]
            if missing:
                raise InputError(f"{path}: no array {missing[0]!r} (holds {', '.join(sorted(members)) or 'none'})")
            for name in wanted:
                with archive.open(members[name]) as handle:
                    version = np.lib.format.read_magic(handle)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)  # fmt: skip
                    shape, _, dtype = read_header(handle)
                    header = handle.tell()
                if dtype.hasobject:
                    raise InputError(
                        f"{path}: not a plain .npz of numeric arrays ({name!r} holds Python objects: Object arrays "
                        "cannot be loaded without unpickling them, which is never done)"
                    )
                claimed = math.prod(shape) * dtype.itemsize
                if claimed != members[name].file_size - header:
                    raise InputError(
                        f"{path}: the header of array {name!r} claims {dtype} {tuple(shape)} ({claimed:,} bytes), "
                        f"the file holds {members[name].file_size - header:,}"
                    )
                found[name] = (tuple(shape), dtype)
    except InputError:
        raise
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise InputError(f"{path}: not a readable .npz ({type(error).__name__}: {error})") from None
    return found
