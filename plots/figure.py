"""What every drawing here ends with: legends, a title, the layout tightened, the file written, the figure closed;
and :func:`save`, the one way a figure file is written (every ``savefig`` of this package goes through it)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def save(fig: plt.Figure, path: Path, **options) -> None:
    """``fig.savefig`` into ``path`` (its format from the name's suffix; ``options``: dpi and the like) through a
    new temporary file beside it (``tempfile.mkstemp``: a fresh random name, created exclusively, so never a user's
    file nor a planted link), fsynced, then ``os.replace``: a symbolic link planted at ``path`` is replaced, never
    followed, and a crash leaves the old figure or the new one. The drawing leaf's twin of
    ``theory.output.replace_durably`` (plots imports nothing of ours); it removes no file it did not create."""
    path = Path(path)
    handle, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(handle, 0o644)
        with os.fdopen(handle, "wb") as out:
            fig.savefig(out, format=path.suffix.lstrip(".").lower() or None, **options)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename on disk too, where the OS lets a folder be synced
        folder = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def finish(fig: plt.Figure, path: Path, title: str = "", legends: tuple = ()) -> None:
    """A legend on each of ``legends`` (axes), ``title`` over the figure, then ``path`` written (120 dpi)."""
    for ax in legends:
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save(fig, path, dpi=120)
    plt.close(fig)
