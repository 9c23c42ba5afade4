"""The simulators' output folders: a folder a simulator writes into is its own (theory.cli.make_dir's owner file),
and one it wrote before folders had owner files is recognised by its files."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from pathlib import Path

from theory.cli import OWNER, make_dir
from theory.errors import InputError
from theory.output import read_object


def earlier_output(out: Path, names: Collection[str], summary_keys: Collection[str]) -> bool:
    """Whether ``out`` holds what a simulator wrote before it marked its folders: no owner file, only files named
    in ``names``, and a summary.json that is a JSON object with every key of ``summary_keys``."""
    try:
        entries = list(out.iterdir())
        if (out / OWNER).exists() or not all(e.is_file() and e.name in names for e in entries):
            return False
        return set(summary_keys) <= set(read_object(out / "summary.json", "summary.json"))
    except (OSError, InputError):
        return False


def output_folder(out: Path, tool: str, overwrite: bool, names: Collection[str], summary_keys: Collection[str]) -> Path:
    """``out`` made (or taken) as ``tool``'s output folder (:func:`theory.cli.make_dir`): a non-empty folder that
    ``tool`` did not make is refused in one line unless ``overwrite``, and even then where it holds a file of one of
    ``names`` (what ``tool`` writes there: it never replaces a file it did not write), except ``tool``'s own
    output from before owner files (:func:`earlier_output`), which is taken as its own."""
    earlier = earlier_output(out, names, summary_keys)
    return make_dir(out, "output folder", tool=tool, overwrite=overwrite, writes=names, earlier=earlier)


def drop_own(out: Path, names: Collection[str]) -> None:
    """Remove the files ``names`` from ``out``, the tool's own folder (:func:`output_folder` took it; one the tool
    did not make it takes only where it holds none of these names): outputs of an earlier run this run does not
    write again (the figures under ``--no-plot``), which would otherwise sit beside the new results as if they were
    drawn from them. A link there is removed itself, never followed."""
    for name in names:
        path = out / name
        if path.is_symlink() or path.is_file():
            path.unlink()


@contextlib.contextmanager
def kept_only_if_written(out: Path) -> Iterator[None]:
    """Around :func:`output_folder` and the run: a refusal (InputError) raised after the run, e.g. results that came
    out non-finite, leaves no folder behind where there was none before, as a refusal before any work does. Only
    the folder this call made is removed, and only while it holds nothing but its owner file."""
    existed = out.exists()
    try:
        yield
    except InputError:
        with contextlib.suppress(OSError):
            if not existed and [entry.name for entry in out.iterdir()] == [OWNER]:
                (out / OWNER).unlink()
                out.rmdir()
        raise
