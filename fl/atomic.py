"""Files written so that a crash or Ctrl-C never leaves half of one: into a temporary file, fsynced, then renamed;
and an exclusive lock for work that two processes must not do at once in one folder."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from theory.errors import InputError
from theory.output import open_unlinked, replace_durably


def write_atomically(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """``write(tmp)`` with ``tmp`` beside ``path`` (its name + ``suffix``), fsynced, then ``os.replace(tmp, path)``
    (atomic on one file system) and the folder fsynced (:func:`theory.output.replace_durably`): a crash, Ctrl-C or a
    lost machine leaves the old file or the new one. ``suffix`` must keep what a writer appends (``np.savez`` adds
    ".npz": use ".tmp.npz")."""
    replace_durably(path, write, suffix)


@contextlib.contextmanager
def locked(lock_file: Path, busy: str | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_file`` (created with its folder; the OS releases it when the process
    dies). Without ``busy`` a second process locking the same file waits, then finds the first's results. With it
    the second does not wait: it gets an InputError naming ``busy`` (what is locked) and the holder's pid, so two
    processes never write one run folder at once."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open_unlinked(lock_file, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if busy else 0))
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise InputError(f"{busy} is in use by another process (pid {holder}); wait for it or stop it") from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        yield
