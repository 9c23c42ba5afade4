"""``python -m lab.campaign``: a lease's scheduler (see :mod:`lab.campaign`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from lab.campaign.pack import unpack
from lab.campaign.predict import plan_table
from lab.campaign.report import watch
from lab.campaign.schedule import schedule, start
from lab.campaign.tasks import GROUPS
from theory.cli import guarded
from theory.errors import InputError


@guarded("lab.campaign")
def main(argv: Sequence[str] | None = None) -> int:
    """The commands, each refusing bad input (a damaged status or record, a bad CAMPAIGN_* variable or plan) in one
    line, exit 2; so is a folder it cannot write (a read-only OUT or store: the path and why); Ctrl-C: one line."""
    return command(list(sys.argv[1:] if argv is None else argv))


def command(argv: list[str]) -> int:
    name = argv[0] if argv else ""
    if name in ("start", "plan") and len(argv) > 1 and not argv[1].startswith("-") and argv[1] not in GROUPS:
        raise InputError(f"{name}: no group {argv[1]!r}; the groups: {', '.join(GROUPS)}")
    if name == "start" and len(argv) == 2 and argv[1] in GROUPS:
        return start(argv[1])
    if name == "watch" and len(argv) == 2 and argv[1].isdigit():
        return watch(float(argv[1]))
    if name == "unpack" and len(argv) >= 2:
        return unpack([Path(a) for a in argv[1:]])
    if name == "schedule" and len(argv) == 1:
        return schedule()
    if name == "plan":
        rest = argv[1:]
        group = rest.pop(0) if rest and rest[0] in GROUPS else "all"
        if not rest or (len(rest) == 2 and rest[0] == "--rates"):
            return plan_table(group, Path(rest[1]) if rest else None)
    print(f"usage: python -m lab.campaign start {'|'.join(GROUPS)} | watch SECONDS | unpack FILE... | "
          "plan [GROUP] [--rates FILE]",
          file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
