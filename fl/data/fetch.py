"""Download the canonical archives of a dataset, verify their checksums, unpack them into a data root.

Only ``python -m fl.data fetch NAME`` calls this; nothing downloads implicitly. Where the network refuses, the
error says which URL to fetch by hand, where to put the file and its checksum; a file already in place (and
matching its checksum) is used without downloading, so placing it by hand and re-running finishes the job.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from fl.data.datasets import LAYOUTS, canonical_name, copy_problem, default_download_root, published_copy_problem
from fl.data.formats import DataError
from fl.data.sources import SOURCES, Archive
from theory.output import replace_durably


def file_checksum(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _matches(path: Path, checksum: str) -> bool:
    algorithm, expected = checksum.split(":")
    return path.is_file() and file_checksum(path, algorithm) == expected


def _download(archive: Archive, dest: Path, timeout: float) -> None:
    """Stream ``archive.url`` to ``dest`` atomically (a temp file renamed when complete and verified)."""
    manual = f"download {archive.url} yourself, put it at {dest} ({archive.checksum}) and run this command again"
    tmp_path: Path | None = None
    try:
        with urllib.request.urlopen(archive.url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", delete=False) as tmp:
                tmp_path = Path(tmp.name)
                with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                    for block in iter(lambda: response.read(1 << 20), b""):
                        tmp.write(block)
                        bar.update(len(block))
    except BaseException as error:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)  # never leave a partial download behind
        if not isinstance(error, urllib.error.URLError | OSError | ValueError):
            raise
        reason = getattr(error, "reason", error)
        raise DataError(f"could not download {archive.url} ({reason}); {manual}") from None
    assert tmp_path is not None
    if not _matches(tmp_path, archive.checksum):
        tmp_path.unlink()
        raise DataError(f"{archive.url}: checksum mismatch (expected {archive.checksum}); {manual}")
    tmp_path.replace(dest)


def extract_data(tar: tarfile.TarFile, root: Path, path: Path) -> None:
    """``tar.extractall(root, filter="data")`` where Python has extraction filters (3.12, and 3.8-3.11 from their
    mid-2023 security releases, e.g. 3.10.12); before that the same refusals by hand, checked for every member before
    anything is written: no absolute name, no member outside ``root`` (``..``, or a folder on disk that links out),
    no link, device or other special file. Regular files and folders only, written with default permissions."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(root, filter="data")
        return
    base = root.resolve()
    members = tar.getmembers()
    for member in members:
        target = (base / member.name).resolve()
        if Path(member.name).is_absolute() or (target != base and base not in target.parents):
            raise DataError(f"{path}: member {member.name!r} would land outside {root}; not unpacked")
        if not (member.isfile() or member.isdir()):
            raise DataError(f"{path}: member {member.name!r} is a link or special file; not unpacked")
    for member in members:
        target = base / member.name
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        assert source is not None  # isfile() members always have data
        with source:  # through a temporary file renamed over ``target``: a link planted there is never followed
            replace_durably(target, lambda tmp, source=source: _copy_into(source, tmp))


def _copy_into(source, tmp: Path) -> None:
    with open(tmp, "wb") as sink:
        shutil.copyfileobj(source, sink)


def _unpack(archive: Archive, path: Path, folder: Path, root: Path) -> None:
    try:
        with tarfile.open(path) as tar:
            if archive.unpack == "tar":
                extract_data(tar, root, path)  # the archive's own top folder is the dataset folder
                return
            pattern = re.compile(archive.unpack or "")
            members = [m for m in tar.getmembers() if m.isfile() and pattern.search(m.name)]
            if not members:
                raise DataError(f"{path}: no member matches {archive.unpack}")
            for member in members:
                source = tar.extractfile(member)
                assert source is not None  # isfile() members always have data
                target = folder / Path(member.name).name  # replaced whole: a link planted there is never followed
                with source:
                    replace_durably(target, lambda tmp, source=source: _copy_into(source, tmp))
    except (tarfile.TarError, OSError, EOFError) as error:
        raise DataError(f"{path}: cannot unpack ({error})") from None


def fetch(name: str, data_root: str | Path | None = None, timeout: float = 60.0) -> Path:
    """Download (if needed), verify and unpack dataset ``name`` under the download root; return its folder."""
    key = canonical_name(name)
    layout = LAYOUTS[key]
    root = default_download_root(data_root)
    folder = root / layout.subdirs[0]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create {folder} ({error.strerror}); pass a writable --data-root") from None
    if all((folder / f).is_file() or (folder / f"{f}.gz").is_file() for f in layout.files):
        problem = copy_problem(layout, folder) or published_copy_problem(key, folder)
        if problem is None:
            return folder  # already complete, and whole
        raise DataError(f"{problem}; fetch replaces no file it did not write: move {folder} away and run it again")
    for archive in SOURCES[key]:
        dest = (folder if archive.unpack is None else root) / archive.filename
        if dest.exists() and not _matches(dest, archive.checksum):
            raise DataError(
                f"{dest} is there but is not the published file ({archive.checksum}); fetch replaces no file it did "
                "not write: move it away (or put the published file there) and run it again"
            )
        downloaded = not dest.exists()
        if downloaded:
            _download(archive, dest, timeout)
        if archive.unpack is not None:
            _unpack(archive, dest, folder, root)
            if downloaded:
                dest.unlink()  # a file put there by hand stays
    return folder
