"""Command-line plumbing shared by every shufflefl CLI: one-line errors with exit code 2, plain-text tables, and
SIGTERM treated as Ctrl-C (what schedulers such as SLURM send before pre-empting a job), with sections that a
signal does not cut in half (:func:`held`)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Container, Iterator, Sequence
from pathlib import Path

import numpy as np

from theory.errors import InputError, user_code_failure
from theory.output import refuse_foreign_json, refuse_link, write_text_atomically


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error prints one line (no usage block) and exits with 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


_signals = {"held": 0, "pending": False}


def _on_signal(signum, frame) -> None:
    """SIGINT and SIGTERM: KeyboardInterrupt now, or, inside :func:`held`, a request seen by :func:`stop_requested`."""
    if _signals["held"]:
        _signals["pending"] = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A section that Ctrl-C / SIGTERM does not interrupt (e.g. writing a round's metrics row and checkpoint
    together); a signal that arrives meanwhile is kept for :func:`stop_requested`."""
    _signals["held"] += 1
    try:
        yield
    finally:
        _signals["held"] -= 1


def stop_requested() -> bool:
    """Whether a signal arrived inside a :func:`held` section (and clear it)."""
    pending, _signals["pending"] = _signals["pending"], False
    return pending


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (outside :func:`held`); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signals["pending"] = False


def guarded(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorate a CLI ``main``: an InputError becomes one line on stderr and exit code 2, so does an OS error on a
    path the user gave (a folder where a file is expected, a missing or unreadable file); Ctrl-C and SIGTERM
    become KeyboardInterrupt (exit 130 unless ``main`` handles it, e.g. by saving a checkpoint).

    ``prog`` is the module name the user typed after ``python -m``.
    """

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(argv: Sequence[str] | None = None) -> int:
            try:
                with signals_as_interrupts():
                    return main(argv)
            except InputError as error:
                sys.stderr.write(f"python -m {prog}: error: {error}\n")
                return 2
            except OSError as error:  # a path error the CLI did not name more precisely
                where = f" {error.filename}" if error.filename else ""
                sys.stderr.write(f"python -m {prog}: error:{where}: {error.strerror or error}\n")
                return 2
            except KeyboardInterrupt:
                sys.stderr.write(f"python -m {prog}: interrupted\n")
                return 130
            except Exception as error:  # a plug-in's own failure is the plug-in's, in one line; ours stays a bug
                said = user_code_failure(error)
                if said is None:
                    raise
                sys.stderr.write(f"python -m {prog}: error: {said}\n")
                return 2

        return wrapper

    return decorate


def whole_number(minimum: int):
    """argparse type: a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    return parse


positive_int = whole_number(1)  # a count of runs, clients, repeats or threads
non_negative_int = whole_number(0)


def output_file_problem(path: Path, example: str = "out.json") -> str | None:
    """Why a file cannot be written at ``path`` once the work is done (None: it can), seen before any work: a
    folder there, or no writable folder to create it in."""
    if path.is_dir():
        return f"--out {path} is a folder; give a file name (e.g. {path / example})"
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return f"--out {path}: cannot create a file under {folder}"
    return None


def json_out_problem(path: Path, example: str, keys: Sequence[str], tool: str) -> str | None:
    """Why the JSON a bench writes cannot go to ``--out path`` (None: it can), seen before any work: what
    :func:`output_file_problem` says, something other than a regular file there (a device, a pipe), or a file the
    bench did not write (:func:`theory.output.refuse_foreign_json`: a JSON object without every one of ``keys``, what
    ``tool`` writes): a user's own file is never replaced; an earlier JSON of the bench is, and a link there is
    replaced by the new file, never written through."""
    problem = output_file_problem(path, example)
    if problem is None and path.exists() and not path.is_symlink() and not path.is_file():
        problem = f"--out {path}: not a regular file (a device, a pipe or a socket); give a file name"
    if problem is None:
        try:
            refuse_foreign_json(path, keys, tool, links=True)
        except InputError as error:
            problem = str(error)
    return problem


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


OWNER = ".shufflefl-output"  # in every output folder a CLI made: the name of that CLI (see make_dir)
SEED_MAX = 2**32 - 1  # seeds are whole numbers in [0, SEED_MAX] (numpy's SeedSequence and torch take them all)


def folder_owner(path: Path) -> str | None:
    """The tool whose output folder ``path`` is (what its :data:`OWNER` file names), or None without one."""
    owner = Path(path) / OWNER
    return owner.read_text(errors="replace").strip() if owner.is_file() else None


def marked_by(path: Path) -> str | None:
    """Who marked ``path`` as their output folder, as a message names it: the tool its :data:`OWNER` file names, or
    "another tool" where the mark is not one printable name in a plain file (a link there is never read); None
    where there is no mark."""
    mark = Path(path) / OWNER
    if not (mark.is_symlink() or mark.exists()):
        return None
    owner = None if mark.is_symlink() else folder_owner(path)
    return owner if owner and owner.isprintable() and len(owner) <= 60 else "another tool"


def refuse_foreign_folder(
    path: Path,
    what: str,
    tool: str,
    overwrite: bool = False,
    writes: Container[str] | None = None,
    earlier: bool = False,
) -> None:
    """A one-line InputError unless ``tool`` may write into ``path`` (nothing written here): a folder that is new,
    empty or ``tool``'s own (its :data:`OWNER` file names ``tool``; or, without one, ``earlier``: the caller
    recognised ``tool``'s output of before owner files). Any other folder is not ``tool``'s: refused where it holds
    a file of a name ``tool`` writes (``writes``; None: any name), another tool's :data:`OWNER` mark among them, even
    with ``overwrite``, since ``tool`` would replace a file it did not write; else refused unless ``overwrite``,
    which writes beside the files there. ``--overwrite`` is never offered for a folder ``tool`` did not make."""
    if not path.is_dir() or not any(path.iterdir()):
        return
    owner = folder_owner(path)
    if owner == tool or (owner is None and earlier):
        return
    named = marked_by(path)
    if named is not None:
        raise InputError(f"{what} {path} is the output folder of {named}, not one {tool} made; choose another --out")
    held = sorted(entry.name for entry in path.iterdir())
    taken = [name for name in held if name == OWNER or writes is None or name in writes]
    if taken:
        raise InputError(f"{what} {path} was not made by {tool} and holds {first_names(taken)}, which {tool} would "
                         "replace (--overwrite too); choose another --out")  # fmt: skip
    if not overwrite:
        raise InputError(f"{what} {path} is not empty and was not made by {tool} (it holds {first_names(held)}); "
                         "choose another --out")  # fmt: skip


def first_names(names: Sequence[str], shown: int = 3) -> str:
    """``a, b, c`` and, past ``shown`` names, how many more: a folder's files named in one line (a name that does
    not print, a line break in it, as Python's ascii() writes it)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(name if name.isprintable() else ascii(name) for name in names[:shown]) + more


def check_dir(
    path: Path,
    what: str = "output folder",
    tool: str | None = None,
    overwrite: bool = False,
    writes: Container[str] | None = None,
    earlier: bool = False,
) -> None:
    """What :func:`make_dir` refuses of ``path`` with ``tool``, in one line, reading only (nothing made): ``path``
    a symbolic link, or a folder ``tool`` may not write into (:func:`refuse_foreign_folder`)."""
    if tool is None:
        return
    refuse_link(path, what)
    try:
        refuse_foreign_folder(path, what, tool, overwrite, writes, earlier)
    except OSError as error:
        raise InputError(f"cannot create {what} {path}: {error.strerror}") from None


def make_dir(path: Path, what: str = "output folder", tool: str | None = None, **rules: object) -> Path:
    """Create ``path`` (and its parents); an OS error becomes a one-line InputError naming it.

    With ``tool`` (the CLI's name, e.g. "sims.quadratic") the folder becomes that tool's, where :func:`check_dir`
    lets it (``rules``: its ``overwrite``, ``writes``, ``earlier``, as :func:`refuse_foreign_folder` takes them), so
    that a CLI never writes over files it did not make and ``--overwrite`` applies to its own folders alone; ``path``
    itself a symbolic link is refused in one line (never written through), and the owner file is replaced whole,
    never through a link."""
    check_dir(path, what, tool, **rules)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if tool is not None:
            write_text_atomically(path / OWNER, tool + "\n")
    except OSError as error:
        raise InputError(f"cannot create {what} {path}: {error.strerror}") from None
    return path


def check_seed(seed: object, what: str = "seed") -> int:
    """``seed`` as an int in [0, SEED_MAX], or a one-line InputError."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= int(seed) <= SEED_MAX:
        raise InputError(f"{what} must be a whole number from 0 to {SEED_MAX}, got {seed!r}")
    return int(seed)


def seed_arg(text: str) -> int:
    """argparse type of a seed (see :func:`check_seed`)."""
    try:
        return check_seed(int(text))
    except (ValueError, InputError):
        raise argparse.ArgumentTypeError(f"a seed must be a whole number from 0 to {SEED_MAX}, got {text!r}") from None


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """argparse type of a finite float (inf and nan refused)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable of /proc/meminfo; the physical memory where that is missing)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_memory(needed: float, what: str) -> None:
    """Refuse, in one line and before any work, a request whose estimated ``needed`` bytes exceed what is free."""
    free = available_memory()
    if needed > free:
        raise InputError(
            f"{what} needs about {needed / 2**30:.3g} GiB of memory and {free / 2**30:.3g} GiB is free; ask for less"
        )
