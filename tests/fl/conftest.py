"""Fixtures shared by the fl tests."""

from __future__ import annotations

import numpy as np
import pytest

from fl.data.formats import write_pickle_batch


@pytest.fixture()
def cifar_root(tmp_path, monkeypatch):
    """A tiny CIFAR-10 in the standard layout: 5 x 40 training images and 30 test images (random pixels whose
    mean depends on the label, so a model can learn something)."""
    import fl.data.datasets as datasets

    monkeypatch.setattr(datasets, "CACHE_ROOT", tmp_path / "no-cache")
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", tmp_path / "no-system")
    monkeypatch.delenv("SHUFFLEFL_DATA", raising=False)
    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def batch(n):
        labels = rng.integers(0, 10, n)
        data = np.clip(rng.normal(100 + 12 * labels[:, None], 30, (n, 3072)), 0, 255).astype(np.uint8)
        return {"data": data, "labels": labels.tolist()}

    for i in range(1, 6):
        write_pickle_batch(folder / f"data_batch_{i}", batch(40))
    write_pickle_batch(folder / "test_batch", batch(30))
    return tmp_path / "data"


def assert_one_line_config_error(argv: list[str], key: str, capsys) -> None:
    """``python -m fl.run argv`` exits 2 with one line, "python -m fl.run: error: ...", naming ``key``."""
    from fl.run import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1 and key in err
