"""Live curves: sinks the run loop hands each round's metrics row to, after the row is written.

:class:`TensorBoard` writes every number of the row (``test_accuracy``, ``test_loss``, ``communication``, the
estimates as ``estimates/zeta2``, ``estimates/sigma2_hat``, ..., a method's numbers as ``method/...``) plus
``seconds_per_round`` as TensorBoard scalars at step = round, through ``torch.utils.tensorboard`` (the
``tensorboard`` package: ``pip install 'shufflefl[tensorboard]'``). A sink only reads rows: nothing it does
changes a run's numbers. A resumed run purges the events of the rounds it computes again (TensorBoard's
``purge_step``), so the curves hold each round once; a run that gets a folder only when resumed (``fl.run --resume
RUN --tensorboard DIR``) writes its earlier rows there first.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from pathlib import Path

from theory.errors import InputError
from theory.output import write_text_atomically

EXTRA = "the TensorBoard sink needs the tensorboard package: pip install 'shufflefl[tensorboard]'"
OWNER = ".shufflefl-curves"  # in a curves folder: the run whose curves it holds (its run folder)


def curves_folder(text: str) -> Path:
    """argparse type of ``--tensorboard DIR``: a folder's name; an empty one (the working directory) refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder for the event files (an empty name is the working directory)")
    return Path(text)


def require_tensorboard() -> None:
    """One line naming the extra where ``tensorboard`` is not installed."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise InputError(EXTRA) from None


def scalars(row: dict, prefix: str = "") -> Iterable[tuple[str, float]]:
    """(tag, value) of every finite number of a metrics row, nested tables as ``table/key`` (round and the
    cumulative ``seconds`` left out: the step is the round, :class:`TensorBoard` writes seconds per round)."""
    for key, value in row.items():
        if not prefix and key in ("round", "seconds"):
            continue
        if isinstance(value, dict):
            yield from scalars(value, f"{prefix}{key}/")
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            yield f"{prefix}{key}", float(value)


class TensorBoard:
    """Event files in ``folder`` for the rows to come; ``earlier``: the rows of the rounds before (a resumed run's),
    written first where ``folder`` holds no events yet, else the events from the next round on are purged (from
    round 1 on: a run started anew). ``owner``: the run the curves are of (its run folder), kept in the folder
    (:data:`OWNER`): a folder holding another run's curves is refused in one line, so two runs' curves never join,
    and so is one holding events that no run of ours marked, unless they are ``earlier``'s."""

    def __init__(self, folder: Path, earlier: list[dict] = (), owner: str | None = None) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        backfill = not has_events(folder)
        if owner is not None:
            claim(folder, owner, backfill or bool(earlier))
        folder.mkdir(parents=True, exist_ok=True)
        if owner is not None and not (folder / OWNER).is_file():
            write_text_atomically(folder / OWNER, owner + "\n")
        first = int(earlier[-1]["round"]) + 1 if earlier else 1
        self.writer = SummaryWriter(str(folder), purge_step=None if backfill else first)
        self.seconds = 0.0
        for row in earlier:
            if backfill:
                self.write(row)
            self.seconds = row.get("seconds", self.seconds)

    def write(self, row: dict) -> None:
        step = int(row["round"])
        for tag, value in scalars(row):
            self.writer.add_scalar(tag, value, step)
        if isinstance(row.get("seconds"), int | float):
            self.writer.add_scalar("seconds_per_round", row["seconds"] - self.seconds, step)
            self.seconds = row["seconds"]
        self.writer.flush()  # live: a reader sees the round now, not at the writer's next timed flush

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def has_events(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("events.out.tfevents.*"))


def claim(folder: Path, owner: str, unmarked_ok: bool) -> None:
    """Refuse (one line) the curves folder ``folder`` for the run ``owner`` where its :data:`OWNER` mark names
    another run, or where it holds events without a mark and not ``unmarked_ok`` (a resumed run's own folder
    written before marks were kept)."""
    mark = folder / OWNER
    try:
        held = mark.read_text().strip() if mark.is_file() and not mark.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        held = "unreadable"
    if held is not None and held != owner:
        raise InputError(f"--tensorboard {folder}: holds the curves of another run ({held}); give {owner} a folder "
                         "of its own")  # fmt: skip
    if held is None and not unmarked_ok and has_events(folder):
        raise InputError(f"--tensorboard {folder}: holds event files of another run; give {owner} a folder of its own")


def replay(rows: list[dict], folder: Path, owner: str | None = None) -> None:
    """The rows of a finished run (``owner``: its folder) into ``folder`` (a sweep's curves of a run it reuses),
    unless it holds events."""
    if has_events(folder):
        if owner is not None:
            claim(folder, owner, unmarked_ok=True)
        return
    with TensorBoard(folder, rows, owner):
        pass
