"""Command-line plumbing shared by every shufflefl CLI: one-line errors with exit code 2, plain-text tables."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from theory.errors import InputError


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error prints one line (no usage block) and exits with 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def guarded(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorate a CLI ``main``: an InputError becomes one line on stderr and exit code 2 (Ctrl-C: 130).

    ``prog`` is the module name the user typed after ``python -m``.
    """

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(argv: Sequence[str] | None = None) -> int:
            try:
                return main(argv)
            except InputError as error:
                sys.stderr.write(f"python -m {prog}: error: {error}\n")
                return 2
            except KeyboardInterrupt:
                sys.stderr.write(f"python -m {prog}: interrupted\n")
                return 130

        return wrapper

    return decorate


def format_number(value: object) -> str:
    """Numbers in 4 significant digits, booleans as yes/no, everything else as str."""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | int | np.number):
        return f"{float(value):.4g}"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with right-aligned columns."""
    cells = [list(headers)] + [[format_number(v) for v in row] for row in rows]
    widths = [max(len(row[j]) for row in cells) for j in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def make_dir(path: Path, what: str = "output folder") -> Path:
    """Create ``path`` (and its parents); an OS error becomes a one-line InputError naming it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot create {what} {path}: {error.strerror}") from None
    return path
