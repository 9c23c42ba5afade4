"""What a simulator refuses before any work besides memory (theory.cli.check_memory): a request whose Python-level
loop would run for days, e.g. ``--tau 1e24``, which needs no memory and would never finish."""

from __future__ import annotations

from theory.errors import InputError

MAX_STEPS = 1e10  # steps of a simulator's Python loop: at 10 µs each (the smallest problems), more than a day


def check_steps(steps: float, what: str) -> None:
    """Refuse, in one line, a request whose loop would take more than :data:`MAX_STEPS` steps."""
    if steps > MAX_STEPS:
        raise InputError(
            f"{what} takes about {steps:.3g} steps of its loop (more than a day even at 10 µs each); ask for fewer"
        )
