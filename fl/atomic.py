"""An exclusive lock for work that two processes must not do at once in one folder. (Files are written whole by
:func:`theory.output.replace_durably`: into a temporary file, fsynced, then renamed.)"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from theory.errors import InputError
from theory.output import open_unlinked


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


def check_free(lock_file: Path, busy: str) -> None:
    """Refuse (one line, as :func:`locked` with ``busy``) a lock that another process holds now, taking nothing:
    ``lock_file`` is opened for reading (never created, never through a symbolic link), tried and let go at once.
    A missing lock file is free."""
    try:
        fd = os.open(lock_file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    except OSError as error:
        raise InputError(f"{busy}: its lock {lock_file.name} cannot be opened ({error.strerror})") from None
    with os.fdopen(fd) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock.read().strip() or "unknown"
            raise InputError(f"{busy} is in use by another process (pid {holder}); wait for it or stop it") from None
        fcntl.flock(lock, fcntl.LOCK_UN)
