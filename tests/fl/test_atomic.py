"""fl.atomic: a file is replaced whole or not at all; a lock makes a second worker wait for the first."""

from __future__ import annotations

import threading
import time

import pytest

from fl.atomic import locked
from theory.output import replace_durably


def test_replace_durably_leaves_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        replace_durably(path, fail)
    assert path.read_text() == "old"
    replace_durably(path, lambda tmp: tmp.write_text("new"))
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary


def test_a_second_holder_waits_for_the_first(tmp_path):
    """Two separate opens of one lock file conflict under flock, so two threads behave as two processes would."""
    lock, events = tmp_path / "runs" / "abc.lock", []  # its folder is created on the way
    first_has_it = threading.Event()

    def first():
        with locked(lock):
            first_has_it.set()
            time.sleep(0.3)
            events.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    first_has_it.wait(5)
    with locked(lock):
        events.append("second")
    thread.join()
    assert events == ["first done", "second"]


def test_a_busy_lock_refuses_a_second_owner_at_once_and_names_the_first(tmp_path):
    """locked(busy=...) never waits: while one open holds the lock, another gets an InputError with the holder's
    pid; after the first lets go, the next owner gets it."""
    import os

    from fl.atomic import locked
    from theory.errors import InputError

    lock = tmp_path / "run" / ".running"
    with locked(lock, busy="run directory run"):
        with pytest.raises(InputError, match=f"run directory run is in use by another process \\(pid {os.getpid()}\\)"):
            with locked(lock, busy="run directory run"):
                pass
    with locked(lock, busy="run directory run"):
        assert lock.read_text() == str(os.getpid())
