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


def _handlers() -> tuple:
    import signal

    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


SESSION_HANDLERS: list[tuple] = []  # SIGINT's and SIGTERM's handlers as the session began
LAST_TEST: list[str] = ["the session's start"]


def pytest_sessionstart(session):
    SESSION_HANDLERS.append(_handlers())


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A fixture of any scope, and its teardown below, leaves SIGINT and SIGTERM as it found them: the autouse
    fixture further down sees only what a test does between its own setup and teardown, and a module- or
    session-scoped fixture that ran a CLI in-process could otherwise leave a handler that makes a later test's
    Ctrl-C (``_thread.interrupt_main``) land nowhere. Such a fixture fails the test it was set up for, by name;
    a teardown that does so fails the next test (``signal_handlers``)."""
    before = _handlers()
    yield
    if _handlers() != before:
        import signal

        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
        pytest.fail(f"fixture {fixturedef.argname} ({fixturedef.scope} scope) left its own signal handler installed")


@pytest.fixture(autouse=True)
def signal_handlers(request):
    """Every test leaves SIGINT and SIGTERM as it found them: code run in-process that installs its own handler and
    fails to put the old one back would change how a later test's Ctrl-C lands (``_thread.interrupt_main`` does
    nothing where SIGINT is not Python's handler). The test fails on such a leak, then the handlers are restored.
    A test that starts with other handlers than the session began with fails too, naming the test before it (whose
    fixtures' teardown, or a wider fixture's, changed them)."""
    import signal

    if SESSION_HANDLERS and _handlers() != SESSION_HANDLERS[0]:
        signal.signal(signal.SIGINT, SESSION_HANDLERS[0][0])
        signal.signal(signal.SIGTERM, SESSION_HANDLERS[0][1])
        pytest.fail(f"a SIGINT or SIGTERM handler was changed after {LAST_TEST[0]} ended (a fixture's teardown)")
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    LAST_TEST[0] = request.node.nodeid
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
