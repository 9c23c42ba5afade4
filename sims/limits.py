"""What a simulator refuses before any work besides memory (theory.cli.check_memory): a request whose Python-level
loop would run for days, e.g. ``--tau 1e24``, which needs no memory and would never finish; a request estimated to
take longer than :data:`MAX_SECONDS` without ``--yes``. And how a long one shows its progress (:func:`progress_bar`)."""

from __future__ import annotations

import sys

from tqdm import tqdm

from theory.errors import InputError

MAX_STEPS = 1e10  # steps of a simulator's Python loop: at 10 µs each (the smallest problems), more than a day
MAX_SECONDS = 3600.0  # a run estimated to take longer is refused unless the user says --yes
LONG_SECONDS = 60.0  # a run estimated to take longer says so and shows its progress even off a terminal


def check_steps(steps: float, what: str) -> None:
    """Refuse, in one line, a request whose loop would take more than :data:`MAX_STEPS` steps."""
    if steps > MAX_STEPS:
        raise InputError(
            f"{what} takes about {steps:.3g} steps of its loop (more than a day even at 10 µs each); ask for fewer"
        )


def duration(seconds: float) -> str:
    """``seconds`` in words: "40 s", "12 min", "3.5 h", "2.1e+03 days"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.3g} days"


def check_time(seconds: float, what: str, consent: bool) -> None:
    """Refuse, in one line, a request estimated to take more than :data:`MAX_SECONDS` unless ``consent`` (--yes)."""
    if seconds > MAX_SECONDS and not consent:
        raise InputError(
            f"{what} would take about {duration(seconds)} on one core (an estimate, within a few times); "
            f"more than {duration(MAX_SECONDS)} needs --yes, or ask for less"
        )


class _Lines:
    """A stream for tqdm off a terminal: each refresh of the bar as one line (a log gets lines, not carriage
    returns), and the bar's final erasure (blanks) dropped."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").rstrip()
        if text.strip():
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(total: float, desc: str, seconds: float, quiet: bool, unit: str = "it") -> tqdm:
    """A tqdm bar on stderr with its rate and ETA. A short run (estimated under :data:`LONG_SECONDS`) shows it on a
    terminal only, as before; a long one always, a line every 30 s off a terminal; ``quiet`` (--quiet) never."""
    long = seconds > LONG_SECONDS
    tty = sys.stderr.isatty()
    return tqdm(
        total=total, desc=desc, unit=unit, leave=False, disable=True if quiet else (False if long else None),
        file=sys.stderr if tty or not long else _Lines(sys.stderr), mininterval=0.1 if tty else 30.0,
    )  # fmt: skip


def announce(tool: str, seconds: float, quiet: bool) -> None:
    """One line on stderr before a long run (estimated over :data:`LONG_SECONDS`): how long it should take."""
    if seconds > LONG_SECONDS and not quiet:
        sys.stderr.write(
            f"{tool}: about {duration(seconds)} of work on one core (an estimate); progress below (--quiet hides it)\n"
        )
        sys.stderr.flush()
