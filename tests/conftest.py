"""Fixtures for every test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl.data.formats import write_pickle_batch


@pytest.fixture(autouse=True)
def one_thread():
    """The fl tests use tiny models and tensors: one intra-op thread is much faster there (about 100x on a 2-core
    machine for the smallest) and does not stall when the cores are busy; the caller's setting is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def signal_handlers():
    """Every test leaves SIGINT and SIGTERM as it found them: code run in-process that installs its own handler and
    fails to put the old one back would change how a later test's Ctrl-C lands (``_thread.interrupt_main`` does
    nothing where SIGINT is not Python's handler). The test fails on such a leak, then the handlers are restored."""
    import signal

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    after = {sig: signal.getsignal(sig) for sig in before}
    for sig, handler in before.items():
        signal.signal(sig, handler)
    leaked = [signal.Signals(sig).name for sig in before if after[sig] is not before[sig]]
    assert not leaked, f"the test left its own {' and '.join(leaked)} handler installed"


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
