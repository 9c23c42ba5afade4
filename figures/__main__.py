"""``python -m figures``: the reproducible artefacts, their state, and building them.

    python -m figures                          # every artefact and its state at each scale
    python -m figures fig2 lemma1 --scale cpu  # build what is missing (reusing finished runs), redraw, report
    python -m figures all --scale quick
    python -m figures fig3 table1 --scale cpu --jobs 2   # independent FL runs two at a time, one thread each
    python -m figures status --scale paper     # one line per run: done / round r of R (s per round, ETA) / not started
    SHUFFLEFL_RUNS=~/.cache/shufflefl nohup python -m figures all --scale cpu --jobs 2 &   # runs outside the tree
    python -m figures ledger add RUN_DIR...    # a run's small records into the run ledger (results/ledger)
    python -m figures ledger list
    python -m figures report                   # results/REPORT.md's generated sections, from the ledger alone
    python -m figures check                    # fails when REPORT.md differs from what the ledger gives
    python -m figures table1 --scale cpu --runs results/ledger --root /tmp/x   # one artefact from the ledger

The FL runs live in a run store (``--runs DIR`` or ``$SHUFFLEFL_RUNS``; default beside the results): keep it outside
a work tree that may be laid anew. Stopping a build at any moment (Ctrl-C, SIGTERM, a lost machine) loses at most
the round in flight; the same command resumes every run where it stopped.

Results go to ``results/figures/NAME/SCALE/`` (``--root``). A build never touches results/REPORT.md: its
generated sections come from the run ledger alone (:mod:`figures.ledger`), so a run enters the report by
``ledger add`` and ``report``. With ``--runs`` on the ledger a build reads and never trains: a missing or unfinished
run is named in its output, and a result is built anew each time (reading takes seconds, and the ledger grows), so
the table printed is always the ledger's as it is now.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from figures.artefacts import ROOT, SCALES, find, store
from figures.catalogue import ARTEFACTS, FL_ARTEFACTS, SCRIPTED
from figures.flruns import plan, progress, read_only
from figures.ledger import check_main, ledger_main
from theory.cli import ArgumentParser, format_table, guarded, positive_int
from theory.errors import InputError

SUBCOMMANDS = """\
subcommands (each has its own --help):
  status [NAME...]      one line per run of the artefacts at --scale: done, round r of R (ETA) or not started;
                        with --runs results/ledger, what the ledger holds and the hours of the runs that stopped short
  check [NAME...]       verify the run ledger (files whole and as added, summaries = metrics, no stray file), then
                        fail if results/REPORT.md's generated sections (and NAME's claims rows) differ from it
  report                rewrite results/REPORT.md's claims table and artefact blocks from the run ledger alone
  ledger add|list       copy runs' small records into the run ledger (results/ledger), or list its entries

rebuild a row from the shipped ledger and check it (offline, no run):
  python -m figures fedcog-table1 --scale paper --runs results/ledger   # the block, into results/figures
  python -m figures check fedcog-table1                                  # its block and claims row against REPORT
  python -m figures report && python -m figures check                    # every block, then verify them all
"""


STATUS_HELP = """\
usage: python -m figures status [NAME ...] [--scale {quick,cpu,paper}] [--runs STORE] [--root ROOT]

One line per run the artefacts NAME (default: all) use at --scale: done, round r of R with its estimated time left,
or not started, then the CPU-hours left. --runs names the run store ($SHUFFLEFL_RUNS, else under --root); pointed
at the run ledger (--runs results/ledger) it reports what the ledger holds: a run there that stopped short of its
last round counts the hours its remaining rounds would take at its measured speed."""


def listing(root: Path) -> str:
    rows = [
        [a.name, *(a.state(s, root) if s in a.scales else "n/a" for s in SCALES), a.title] for a in ARTEFACTS.values()
    ]
    return format_table(["artefact", *SCALES, "reproduces"], rows)


SCRIPT_RUNS = {"dynafed-table1": "dynafed_fmnist", "hfmds-fmnist": "hfmds_fmnist", "fedcog-table1": "fedcog_fmnist"}


def scripted_runs(name: str, runs: Path) -> list[tuple[str, float]]:
    """The runs of an experiment script's artefact in the run store ``runs``'s ``runs/`` (the ledger's, with --runs
    results/ledger): (a line, hours left) for each that stopped short of its last round, its hours from its own
    measured seconds per round; finished runs are counted in one line."""
    folder = runs / "runs"
    prefix = SCRIPT_RUNS.get(name)
    if prefix is None or not folder.is_dir():
        return []
    out, done = [], 0
    for run in sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(prefix)):
        if (run / "summary.json").is_file():
            done += 1
            continue
        try:
            rounds = json.loads((run / "config.json").read_text())["train"]["rounds"]
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
            reached, seconds = rows[-1]["round"], rows[-1]["seconds"] / len(rows)
        except (OSError, ValueError, KeyError, IndexError, TypeError, ZeroDivisionError):
            out.append((f"{run.name}: not started or unreadable", 0.0))
            continue
        hours = (rounds - reached) * seconds / 3600
        out.append((f"{run.name}: stopped at round {reached} of {rounds} ({seconds:.1f} s per round where it ran, "
                    f"{hours:.2f} h left)", hours))  # fmt: skip
    return [(f"{done} run(s) finished", 0.0), *out] if done or out else []


def status(names: list[str], scale: str, root: Path, runs: Path | None = None) -> str:
    """One line per run of the named artefacts at ``scale`` in the run store (``runs``, else ``$SHUFFLEFL_RUNS``,
    else ``root``; and per optional arm left out, with the reason) and the CPU-hours left (one thread per run)."""
    chosen = [find(name, ARTEFACTS) for name in (names or list(ARTEFACTS))]
    lines, seen, measured, left, unknown = [], set(), [], 0.0, 0
    for artefact in chosen:
        if scale not in artefact.scales:
            continue
        if artefact.name in SCRIPTED:
            lines.append(f"{artefact.name}: {artefact.state(scale, root)} ({artefact.scales[scale]})")
            for text, hours in scripted_runs(artefact.name, store(root, runs)):
                lines.append(f"{artefact.name} | {text}")
                left += 3600 * hours
            continue
        if artefact.name not in FL_ARTEFACTS:
            lines.append(f"{artefact.name}: {artefact.state(scale, root)} (a simulator: built in one go)")
            continue
        planned = plan(artefact, scale, root, runs)
        rows = []
        for name, label, seed, config, folder in planned.tasks:
            state = progress(config, folder)
            rows.append((name, label, seed, folder, state))
            if "seconds_per_round" in state:
                measured.append(state["seconds_per_round"])
        for name, label, seed, folder, state in rows:
            if folder in seen:
                lines.append(f"{name} | {label}, seed {seed}: shared with a run above ({folder.name})")
                continue
            seen.add(folder)
            text = f"{name} | {label}, seed {seed}: {state['state']}"
            if state["state"] == "partial":
                eta = (state["rounds"] - state["round"]) * state["seconds_per_round"]
                left += eta
                text = (
                    f"{name} | {label}, seed {seed}: round {state['round']} of {state['rounds']} "
                    f"({state['seconds_per_round']:.1f} s per round, ETA {eta / 3600:.2f} h)"
                )
            elif state["state"] == "not started":
                if measured:  # estimated from the artefact's runs measured so far
                    left += state["rounds"] * sum(measured) / len(measured)
                else:
                    unknown += 1
            lines.append(f"{text} [{folder}]")
        lines += [f"{name} | {label}: left out ({why})" for name, label, why in planned.left_out]
    estimate = f"{left / 3600:.2f} hours left at the speeds measured where the runs ran (one thread per run)"
    if unknown:
        estimate += f", plus {unknown} not-started run(s) with no measured speed yet"
    return "\n".join([*lines, estimate])


@guarded("figures")
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ledger"]:
        return ledger_main(argv[1:])
    if argv[:1] in (["check"], ["report"]):
        return check_main(argv[1:], write=argv[0] == "report")
    if argv[:1] == ["status"] and ("-h" in argv or "--help" in argv):
        print(STATUS_HELP)
        return 0
    parser = ArgumentParser(
        prog="python -m figures",
        description="Build the paper's figures and tables (NAME...), or list them and their state (no NAME).",
        epilog=SUBCOMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"artefacts: {', '.join(ARTEFACTS)}, or all")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="quick (seconds), cpu (2 cores), paper")
    parser.add_argument("--root", type=Path, default=ROOT, help=f"where results live (default {ROOT})")
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild even what is done (finished runs are reused); a build on the run ledger always rebuilds",
    )
    parser.add_argument("--jobs", type=positive_int, default=1, help="FL runs at a time, one torch thread each")
    parser.add_argument("--runs", type=Path, help="the FL run store (default $SHUFFLEFL_RUNS, else under --root)")
    parser.add_argument(
        "--rerun-sims",
        action="store_true",
        help="run the simulators (fig2, lemma1, figB2) even when --runs is a run ledger, whose summaries they read",
    )
    args = parser.parse_args(argv)
    if not args.names:
        print(listing(args.root))
        return 0
    if args.names[0] == "status":
        named = "--runs" if args.runs else "$SHUFFLEFL_RUNS" if os.environ.get("SHUFFLEFL_RUNS") else None
        where = store(args.root, args.runs)
        if named and not where.is_dir():  # else every run would read "not started", the store unnamed
            raise InputError(f"the run store {where} ({named}) is missing: no run of it can be reported")
        if not named and args.root != ROOT and not args.root.is_dir():  # a --root typed wrong, not a fresh one
            raise InputError(f"--root {args.root}: no such folder, so no run of it can be reported")
        print(status(args.names[1:], args.scale, args.root, args.runs))
        return 0
    names = [n for n, a in ARTEFACTS.items() if args.scale in a.scales] if args.names == ["all"] else args.names
    chosen = [find(name, ARTEFACTS) for name in names]
    settings = {"jobs": args.jobs, "runs": args.runs, "rerun_sims": args.rerun_sims}  # what every build is given
    # A build on the run ledger only reads it (seconds), and the ledger grows: its result is never reused, or a
    # table built before a column was ledgered would be printed as the ledger's.
    fresh = args.force or (read_only(store(args.root, args.runs)) and not args.rerun_sims)
    for artefact in chosen:
        result, built = artefact.make(artefact.context(args.scale, args.root, **settings), fresh)
        state = "built" if built else "reused"
        print(f"{artefact.name} ({args.scale}): {state} -> {artefact.folder(args.scale, args.root)}")
        print(format_table(result["headers"], result["rows"]))
        print(result["claim"]["text"])
        for note in result.get("notes", []):
            print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
