"""REPORT.md from the run ledger (:mod:`lab.records.ledger`): the ``ledger``, ``check`` and ``report`` commands.

    python -m figures ledger add RUN_DIR... [--device TEXT] [--git COMMIT] [--note TEXT]
    python -m figures ledger add --from-lease DIR [DIR...] [--runs STORE]
    python -m figures ledger add QUALITY.json | BENCH_DIR   # a quality report, a gpu-bench record
    python -m figures ledger list
    python -m figures ledger seal        # the manifest of the ledger as it is (only a ledger whose check passes)
    python -m figures check [NAME...]    # verify the ledger, rebuild the artefacts from it; fail if REPORT.md differs
    python -m figures report             # rewrite REPORT.md's generated sections from the ledger

``check`` and ``report`` first verify the ledger (:func:`verify`, :func:`lab.records.check.verify`: every file whole
and as it was added, summaries agreeing with their metrics rows, no stray or oversized file, no entry the report
rests on deleted, every entry and file as the ledger's ``manifest.json`` records it) and stop there, one line per
damaged file, when it is not whole; ``report`` then refuses a claims
row's typed "record lost" numbers where the ledger holds runs of its artefact (:func:`lost_fallbacks`).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from figures.artefacts import SCALES
from figures.catalogue import ARTEFACTS
from figures.claims import ROWS, claims_table
from figures.flruns import LEDGER_MARK, RUNS
from figures.report import BEGIN, CLAIMS_BEGIN, CLAIMS_END, END, between, own_report, section, write_sections
from fl.plugins import importing_nothing
from lab.records.check import NAMED, SIMS
from lab.records.check import verify as verify_ledger
from lab.records.lease import bring_home
from lab.records.ledger import add, entries, is_ledger, listing, seal
from theory.cli import ArgumentParser
from theory.errors import InputError

DEFAULT = Path("results/ledger")
REPORT = Path("results/REPORT.md")


BLOCK = re.compile(r"^### (\S+) \((\w+)\)", re.MULTILINE)
NAMED_RUN = re.compile(rf"`((?:{RUNS}|{NAMED})/[^`/\s]+)`")


def expected(report: Path) -> dict[str, str]:
    """Ledger entry (relative to the ledger) -> the "name (scale)" of the first block of ``report``'s generated
    artefact section that rests on it: the runs each block names, and the simulator summary of each simulator block
    rebuilt from the ledger (one with a table)."""
    text = report.read_text() if report.is_file() else ""
    found: dict[str, str] = {}
    section = between(text, BEGIN, END) or ""
    starts = list(BLOCK.finditer(section))
    for k, start in enumerate(starts):
        block = section[start.end() : starts[k + 1].start() if k + 1 < len(starts) else len(section)]
        name, scale = start.group(1), start.group(2)
        where = f"{name} ({scale})"
        for run in NAMED_RUN.findall(block):
            found.setdefault(run, where)
        rebuilt = any(line.startswith("| ") for line in block.splitlines())
        if name in SIMS and scale in SCALES and rebuilt:
            found.setdefault(f"sims/{SIMS[name]}/{scale}", where)
    return found


def verify(ledger: Path, report: Path | None = None) -> list[str]:
    """:func:`lab.records.check.verify` of ``ledger``, with ``report``: also each entry its generated blocks rest on
    and the ledger no longer holds."""
    rests_on = {e: f"{report}'s {w} block" for e, w in expected(report).items()} if report is not None else None
    return verify_ledger(ledger, rests_on)


class Damaged(InputError):
    """The ledger cannot give the report: ``lines``, one per problem, each naming the file or claims row."""

    def __init__(self, lines: Sequence[str]):
        super().__init__("; ".join(lines))
        self.lines = list(lines)


def rebuild(
    ledger: Path, names: Sequence[str] = (), evidence: dict[tuple[str, str], list[str]] | None = None
) -> dict[tuple[str, str], dict | str]:
    """Every artefact at the cpu and paper scales rebuilt from the ledger alone, into a temporary folder: (name,
    scale) -> its result, or why it could not be rebuilt. Trains nothing; the simulators are not run either (their
    summaries come from the ledger); draws nothing (each result names its figures, as a build that draws them).
    ``evidence`` (when given) gets, for each artefact that did not rebuild, the ledger entries it read that are
    there (none: the ledger holds nothing of it)."""
    if not (ledger / LEDGER_MARK).exists():
        raise InputError(f"{ledger}: not a run ledger (no {LEDGER_MARK} mark)")
    built: dict[tuple[str, str], dict | str] = {}
    with tempfile.TemporaryDirectory() as tmp, importing_nothing("the ledger's rebuild imports no plug-in"):
        for artefact in ARTEFACTS.values():
            if names and artefact.name not in names:
                continue
            for scale in ("cpu", "paper"):
                if scale not in artefact.scales:
                    continue
                if artefact.name in SIMS:
                    summary = ledger / "sims" / SIMS[artefact.name] / scale / "summary.json"
                    if not summary.exists():
                        built[artefact.name, scale] = "The simulator's summary is not in the ledger."
                        continue
                # the ledger's runs and simulator summaries (no --rerun-sims), into a temporary folder: each
                # figure's name, not its drawing
                ctx = artefact.context(scale, Path(tmp), runs=ledger, draw=False)
                try:
                    with contextlib.redirect_stdout(io.StringIO()):  # the build reads sims/ itself (catalogue)
                        built[artefact.name, scale] = artefact.make(ctx, force=True)[0]
                except InputError as error:
                    built[artefact.name, scale] = str(error).replace(str(ledger), "the ledger")
                    held = sorted(str(f.relative_to(ledger)) for f in ctx.used
                                  if f.is_relative_to(ledger) and f.exists())  # fmt: skip
                    if evidence is not None and held:
                        evidence[artefact.name, scale] = held
    return built


def lost_fallbacks(built: dict[tuple[str, str], dict | str], evidence: dict[tuple[str, str], list[str]]) -> list[str]:
    """The claims rows that would show the numbers typed into :mod:`figures.claims` ("record lost") although the
    ledger holds runs of their artefact, one line each: those numbers stand only for records lost before the ledger
    existed, never for a ledger entry deleted or damaged since."""
    lines = []
    for row in ROWS:
        artefact = getattr(row, "artefact", None)
        if getattr(row, "lost", None) is None or artefact not in evidence or isinstance(built.get(artefact), dict):
            continue
        name, scale = artefact
        lines.append(
            f"claims row {row.claim!r}: {name} ({scale}) did not rebuild although the ledger holds "
            f"{len(evidence[artefact])} of its runs ({built[artefact]}); its typed 'record lost' numbers are refused"
        )
    return lines


def sections(ledger: Path, names: Sequence[str] = ()) -> tuple[str, str]:
    """(the claims table, the artefacts' section) as the ledger gives them; :class:`Damaged` where a claims row
    would fall back to typed numbers (:func:`lost_fallbacks`)."""
    evidence: dict[tuple[str, str], list[str]] = {}
    built = rebuild(ledger, names, evidence)
    refused = lost_fallbacks(built, evidence)
    if refused:
        raise Damaged(refused)
    return claims_table(built), section(ARTEFACTS, built, ("cpu", "paper"))


def part(text: str, begin: str, end: str, names: Sequence[str]) -> str:
    """A generated section of ``text``; with ``names``, only those artefacts' blocks."""
    found = between(text, begin, end) or ""
    if not names:
        return found
    blocks, keep = [], False
    for line in found.splitlines():
        if line.startswith("### "):
            keep = line[4:].split(" (", 1)[0] in names
        if keep and not line.startswith("<!--"):
            blocks.append(line)
    return "\n".join(blocks).strip()


def claims_rows(table: str, names: Sequence[str]) -> str:
    """The claims-table rows of the artefacts ``names`` (each row's rebuild command names its artefact)."""
    wanted = tuple(f"python -m figures {name} " for name in names)
    return "\n".join(line for line in table.splitlines() if line.startswith("| ") and any(w in line for w in wanted))


def check(ledger: Path, report: Path, names: Sequence[str] = ()) -> list[str]:
    """The differences (unified diff lines) between ``report``'s generated sections and what the ledger gives."""
    claims, artefacts = sections(ledger, names)
    text = report.read_text() if report.exists() else ""
    pairs = [(part(text, BEGIN, END, names), part(artefacts, BEGIN, END, names))]
    old_claims = between(text, CLAIMS_BEGIN, CLAIMS_END) or ""
    pairs.append((claims_rows(old_claims, names), claims_rows(claims, names)) if names else (old_claims, claims))
    diff = []
    for old, new in pairs:
        diff += difflib.unified_diff(old.splitlines(), new.splitlines(), str(report), "the ledger", lineterm="")
    return diff


def parser_for(prog: str, what: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=what)
    parser.add_argument("--ledger", type=Path, default=DEFAULT, help=f"the run ledger (default {DEFAULT})")
    return parser


def ledger_main(argv: Sequence[str]) -> int:
    parser = ArgumentParser(prog="python -m figures ledger", description="Add runs to the run ledger, or list it.")
    sub = parser.add_subparsers(dest="command", required=True)
    adding = sub.add_parser("add", help="copy runs' small records into the ledger")
    adding.add_argument("--ledger", type=Path, default=DEFAULT, help=f"the run ledger (default {DEFAULT})")
    adding.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR",
                        help="run folders ('.' inside one), quality reports, gpu-bench records")  # fmt: skip
    adding.add_argument("--device", help="where the runs ran, when their provenance does not say (e.g. 'NVIDIA H200')")
    adding.add_argument("--git", help="the commit the runs ran at, when their provenance does not say it right")
    adding.add_argument("--note", help="one line kept with each entry")
    lease = "with --from-lease: the run store (default $SHUFFLEFL_RUNS, else results)", "the generator cache"
    adding.add_argument(
        "--from-lease", type=Path, nargs="+", metavar="DIR",
        help="a GPU lease's files (lab.records.lease); several folders: snapshots of one lease, each run's newest kept",
    )  # fmt: skip
    adding.add_argument("--runs", dest="store", type=Path, help=lease[0])
    adding.add_argument("--cache-dir", type=Path, help=f"with --from-lease: {lease[1]} (default STORE/_synthetic)")
    sub.add_parser("list", help="every entry: rounds done, code version, device").add_argument(
        "--ledger", type=Path, default=DEFAULT, help=f"the run ledger (default {DEFAULT})"
    )
    sealing = sub.add_parser("seal", help="write the manifest of the ledger as it is, once its check passes")
    sealing.add_argument("--ledger", type=Path, default=DEFAULT, help=f"the run ledger (default {DEFAULT})")
    sealing.add_argument("--report", type=Path, default=REPORT, help=f"the report (default {REPORT})")
    args = parser.parse_args(argv)
    if args.command == "list":
        is_ledger(args.ledger)
        print(listing(args.ledger))
        return 0
    if args.command == "seal":
        rests_on = {e: f"{args.report}'s {w} block" for e, w in expected(args.report).items()}
        problems, said = seal(args.ledger, rests_on)
        print("\n".join(problems) if problems else said)
        if problems:
            print(f"figures ledger seal: {len(problems)} problem(s) in the run ledger {args.ledger}; no manifest "
                  "written (a damaged ledger is never sealed)")  # fmt: skip
        return 1 if problems else 0
    is_ledger(args.ledger, may_create=True)  # before any run: a folder of other files never becomes a ledger
    if bool(args.from_lease) == bool(args.runs):
        parser.error("add takes RUN_DIR... or --from-lease DIR")
    if not args.from_lease and (args.store or args.cache_dir):
        parser.error("--runs and --cache-dir go with --from-lease")
    if args.from_lease and (args.device or args.git):
        parser.error("--device and --git go with RUN_DIR... (a lease's runs name their device in provenance)")
    if args.from_lease:
        lines, refused = bring_home(args.from_lease, args.ledger, args.store, args.cache_dir, args.note)
        print("\n".join(lines + ([f"figures ledger: {refused} run(s) of the lease refused"] if refused else [])))
        return 1 if refused else 0
    refused = 0
    for run in args.runs:
        try:
            print(add(run, args.ledger, args.device, args.git, args.note))
        except InputError as error:
            print(f"figures ledger: {error}")
            refused += 1
    if refused:
        print(f"figures ledger: {refused} of {len(args.runs)} run(s) refused")
    return 1 if refused else 0


def check_main(argv: Sequence[str], write: bool = False) -> int:
    verb = "report" if write else "check"
    what = "Rewrite REPORT.md's generated sections from" if write else "Check REPORT.md's generated sections against"
    parser = parser_for(f"python -m figures {verb}", f"{what} the artefacts rebuilt from the run ledger (offline).")
    if not write:
        parser.add_argument("names", nargs="*", metavar="NAME", help="only these artefacts (default: all)")
    parser.add_argument("--report", type=Path, default=REPORT, help=f"the report (default {REPORT})")
    args = parser.parse_args(argv)
    args.names = getattr(args, "names", [])
    unknown = [n for n in args.names if n not in ARTEFACTS]
    if unknown:
        raise InputError(f"unknown artefact {unknown[0]!r}; known: {', '.join(ARTEFACTS)}")
    if write and args.names:
        raise InputError("report rewrites every artefact's block; give no names")
    is_ledger(args.ledger)
    if write:
        own_report(args.report)  # before anything is built: a user's own file is never appended to
    if write and not entries(args.ledger):  # a report rebuilt from nothing would lose every block, silently
        raise InputError(f"{args.ledger}: the ledger holds no entries; {args.report} left as it was")
    start = time.perf_counter()
    damage = verify(args.ledger, args.report)  # first: the artefacts' builders never see a damaged entry
    if not damage:
        try:
            if write:
                claims, blocks = sections(args.ledger)
                write_sections(args.report, claims, blocks)
                seconds = time.perf_counter() - start
                print(f"rewrote the generated sections of {args.report} from {args.ledger} ({seconds:.0f} s)")
                return 0
            diff = check(args.ledger, args.report, args.names)
        except Damaged as error:
            damage = error.lines
    if damage:
        print("\n".join(damage))
        outcome = f"{args.report} left as it was" if write else f"{args.report} not compared"
        print(f"figures {verb}: {len(damage)} problem(s) in the run ledger {args.ledger}; {outcome}; restore the "
              f"ledger (git checkout -- {args.ledger}) or re-add the runs named (figures ledger add)")  # fmt: skip
        return 1
    seconds = time.perf_counter() - start
    if diff:
        print("\n".join(diff[:60] + ([f"... {len(diff) - 60} more lines"] if len(diff) > 60 else [])))
        print(f"figures check: {args.report} differs from what {args.ledger} gives ({seconds:.0f} s); if every "
              f"change to {args.ledger} is one you made (git diff {args.ledger}), rebuild the report with python -m "
              f"figures report; else restore the ledger (git checkout -- {args.ledger})")  # fmt: skip
        return 1
    print(f"figures check: {args.report} is what {args.ledger} gives ({seconds:.0f} s)")
    return 0
