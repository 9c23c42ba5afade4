"""``python -m figures``: the reproducible artefacts, their state, and building them.

    python -m figures                          # every artefact and its state at each scale
    python -m figures fig2 lemma1 --scale cpu  # build what is missing (reusing finished runs), redraw, report
    python -m figures all --scale quick
    python -m figures fig3 table1 --scale cpu --jobs 2   # independent FL runs two at a time, one thread each

Results go to ``results/figures/NAME/SCALE/`` (``--root``); results/REPORT.md's generated section is rewritten
from every saved result after a build (``--report``; ``--no-report`` to leave it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from figures.artefacts import ROOT, SCALES, find
from figures.catalogue import ARTEFACTS
from figures.flruns import set_jobs
from figures.report import regenerate
from theory.cli import ArgumentParser, format_table, guarded


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def listing(root: Path) -> str:
    rows = [
        [a.name, *(a.state(s, root) if s in a.scales else "n/a" for s in SCALES), a.title] for a in ARTEFACTS.values()
    ]
    return format_table(["artefact", *SCALES, "reproduces"], rows)


@guarded("figures")
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m figures", description="Build the paper's figures and tables.")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"artefacts: {', '.join(ARTEFACTS)}, or all")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="quick (seconds), cpu (2 cores), paper")
    parser.add_argument("--root", type=Path, default=ROOT, help=f"where results live (default {ROOT})")
    parser.add_argument("--report", type=Path, default=Path("results/REPORT.md"), help="the report to regenerate")
    parser.add_argument("--no-report", action="store_true", help="do not rewrite the report")
    parser.add_argument("--force", action="store_true", help="rebuild even what is done (finished runs are reused)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="FL runs at a time, one torch thread each")
    args = parser.parse_args(argv)
    set_jobs(args.jobs)
    if not args.names:
        print(listing(args.root))
        return 0
    names = list(ARTEFACTS) if args.names == ["all"] else args.names
    chosen = [find(name, ARTEFACTS) for name in names]
    for artefact in chosen:
        result, built = artefact.make(args.scale, args.root, args.force)
        state = "built" if built else "reused"
        print(f"{artefact.name} ({args.scale}): {state} -> {artefact.folder(args.scale, args.root)}")
        print(format_table(result["headers"], result["rows"]))
        print(result["claim"]["text"])
    if not args.no_report:
        regenerate(args.report, ARTEFACTS, args.root)
        print(f"regenerated {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
