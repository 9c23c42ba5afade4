"""Files written so that a crash or Ctrl-C never leaves half of one: into a temporary file, then renamed; and an
exclusive lock for work that two processes must not do at once in one folder."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path


def write_atomically(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """``write(tmp)`` with ``tmp`` beside ``path`` (its name + ``suffix``), then ``os.replace(tmp, path)``, atomic
    on one file system. ``suffix`` must keep what a writer appends (``np.savez`` adds ".npz": use ".tmp.npz")."""
    tmp = path.with_name(path.name + suffix)
    write(tmp)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_file`` (created with its folder; the OS releases it when the process
    dies): a second process locking the same file waits, then finds the first's results."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
