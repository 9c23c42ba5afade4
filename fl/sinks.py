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

import math
from collections.abc import Iterable
from pathlib import Path

from theory.errors import InputError

EXTRA = "the TensorBoard sink needs the tensorboard package: pip install 'shufflefl[tensorboard]'"


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
    written first where ``folder`` holds no events yet, else the events from the next round on are purged."""

    def __init__(self, folder: Path, earlier: list[dict] = ()) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        backfill = not has_events(folder)
        folder.mkdir(parents=True, exist_ok=True)
        first = int(earlier[-1]["round"]) + 1 if earlier else 1
        self.writer = SummaryWriter(str(folder), purge_step=None if backfill or first == 1 else first)
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


def replay(rows: list[dict], folder: Path) -> None:
    """The rows of a finished run into ``folder`` (a sweep's curves of a run it reuses), unless it holds events."""
    if has_events(folder):
        return
    with TensorBoard(folder, rows):
        pass
