"""Files written so that a crash or Ctrl-C never leaves half of one: into a temporary file, then renamed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """``write(tmp)`` with ``tmp`` beside ``path`` (its name + ``suffix``), then ``os.replace(tmp, path)``, atomic
    on one file system. ``suffix`` must keep what a writer appends (``np.savez`` adds ".npz": use ".tmp.npz")."""
    tmp = path.with_name(path.name + suffix)
    write(tmp)
    os.replace(tmp, path)
