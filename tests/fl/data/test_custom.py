"""Your own data (fl.data.custom): an npz of uint8 images, labels and client ids runs through fl.run with the
natural partition and is recorded in provenance.json (its file hash and sizes); bad arrays are one line each."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from fl.data import load
from fl.data.custom import arrays_digest
from fl.federation import split_clients
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at
from tests.fl.test_run import same_run

IDS = (30, 10, 20)  # the clients the file names, in no order


def arrays(n: int = 120, seed: int = 0, channels: bool = False) -> dict:
    """Images whose brightness follows the label (3 classes), each sample given to one of the clients IDS."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    shape = (n, 1, 8, 8) if channels else (n, 8, 8)
    x = np.clip(rng.normal(60 + 50 * y.reshape(-1, *[1] * (len(shape) - 1)), 25, shape), 0, 255).astype(np.uint8)
    ids = np.array(IDS)[rng.integers(0, 3, n)]
    y_test = rng.integers(0, 3, 30)
    x_test = np.clip(rng.normal(60 + 50 * y_test[:, None, None], 25, (30, 8, 8)), 0, 255).astype(np.uint8)
    return {"x_train": x, "y_train": y, "client_ids": ids, "x_test": x_test, "y_test": y_test}


def sha_full(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(path, **contents):
    np.savez(path, **contents)
    return path


def args(dataset: str, out, *extra: str) -> list[str]:
    pairs = [("data.dataset", f"'{dataset}'"), ("data.partition", "'natural'"), ("data.clients", "3"),
             ("model.name", "'mlp'"), ("train.rounds", "2"), ("train.batch_size", "16"), ("train.device", "'cpu'"),
             ("train.workers", "1")]  # fmt: skip
    return [a for k, v in pairs for a in ("--set", f"{k}={v}")] + ["--out", str(out), "--quiet", *extra]


def test_an_npz_with_a_natural_split_runs_and_is_recorded(tmp_path):
    data = arrays()
    path = write(tmp_path / "mine.npz", **data)
    out = tmp_path / "run"
    assert main(args(f"npz:{path}", out)) == 0
    recorded = json.loads((out / "provenance.json").read_text())["data"]
    assert recorded["dataset"] == f"npz-{arrays_digest(data)}" and recorded["train"] == 120 and recorded["test"] == 30
    assert recorded["folder"] == str(path.resolve())
    assert recorded["files"] == [{"name": "mine.npz", "bytes": path.stat().st_size, "sha256": sha_full(path)}]
    assert json.loads((out / "summary.json").read_text())["rounds"] == 2

    dataset = load(f"npz:{path}")
    assert dataset.shape == (1, 8, 8) and dataset.n_classes == 3
    _, val, original = split_clients(dataset, "natural", 3, np.random.default_rng(0))
    for k, client in enumerate(sorted(IDS)):  # client k: the k-th smallest id, every sample of it, once
        mine = np.concatenate([val[k], original[k]])
        assert sorted(mine.tolist()) == np.flatnonzero(data["client_ids"] == client).tolist()


def test_an_npz_without_test_arrays_holds_out_a_fixed_tenth(tmp_path):
    data = arrays(channels=True)
    path = write(tmp_path / "mine.npz", **{k: data[k] for k in ("x_train", "y_train", "client_ids")})
    first, second = load(f"npz:{path}"), load(f"npz:{path}")
    assert len(first.y_test) == 12 and len(first.y_train) == 108 and len(first.client_ids) == 108
    assert np.array_equal(first.y_test, second.y_test)  # the same for every run


BAD = {
    "images not uint8": ({"x_train": lambda a: a["x_train"].astype(np.float32)}, "x_train must be uint8"),
    "labels out of range": ({"y_train": lambda a: np.where(np.arange(120) == 5, -1, a["y_train"])}, "outside 0..2"),
    "labels above n_classes": ({"n_classes": lambda a: np.array(2)}, "y_train has labels outside 0..1"),
    "fewer labels": ({"y_train": lambda a: a["y_train"][:-1]}, "y_train has 119 entries for 120 images"),
    "fewer client ids": ({"client_ids": lambda a: a["client_ids"][:7]}, "client_ids has 7 entries"),
    "float labels": ({"y_train": lambda a: a["y_train"].astype(float)}, "y_train must be a 1-d integer array"),
    "test of another shape": ({"x_test": lambda a: a["x_test"][:, :4]}, "x_test images are"),
    "test images alone": ({"y_test": None}, "x_test and y_test come together"),
    "a typo": ({"client_id": lambda a: a["client_ids"], "client_ids": None}, "unknown arrays client_id"),
    "no client ids for natural": ({"client_ids": None}, "natural needs data that name their clients"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arrays_are_one_line(tmp_path, capsys, case):
    changes, said = BAD[case]
    data = arrays()
    for key, change in changes.items():
        if change is None:
            data.pop(key)
        else:
            data[key] = change(data)
    path = write(tmp_path / "bad.npz", **data)
    assert_one_line_config_error(args(f"npz:{path}", tmp_path / "run"), said, capsys)


def test_a_missing_file_an_object_array_and_a_wrong_client_count_are_one_line(tmp_path, capsys):
    assert_one_line_config_error(args(f"npz:{tmp_path / 'none.npz'}", tmp_path / "a"), "file not found", capsys)
    data = arrays()
    pickled = write(tmp_path / "pickled.npz", **data, client_names=np.array([{"a": 1}], dtype=object))
    assert_one_line_config_error(args(f"npz:{pickled}", tmp_path / "b"), "not a plain .npz", capsys)
    path = write(tmp_path / "mine.npz", **data)
    assert_one_line_config_error(args(f"npz:{path}", tmp_path / "c", "--set", "data.clients=4"), "name 3 clients",
                                 capsys)  # fmt: skip
    assert_one_line_config_error(args("npz:", tmp_path / "d"), "npz: names a file", capsys)


def test_a_changed_npz_stops_a_resume_in_one_line(tmp_path, monkeypatch, capsys):
    path = write(tmp_path / "mine.npz", **arrays())
    out = tmp_path / "run"
    resume = interrupt_at(monkeypatch, 2)
    assert main(args(f"npz:{path}", out)) == 2
    resume()
    write(path, **arrays(seed=1))  # other images under the same name
    capsys.readouterr()
    assert main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not those the run started on" in err


def test_the_same_arrays_saved_again_resume(tmp_path, monkeypatch):
    """The same arrays written compressed (another file, the same data): the resume goes on, to the straight run."""
    path = write(tmp_path / "mine.npz", **arrays())
    straight, out = tmp_path / "straight", tmp_path / "run"
    assert main(args(f"npz:{path}", straight)) == 0
    resume = interrupt_at(monkeypatch, 2)
    assert main(args(f"npz:{path}", out)) == 2
    resume()
    np.savez_compressed(path, **arrays())
    assert main(["--resume", str(out), "--quiet"]) == 0
    same_run(straight, out)
