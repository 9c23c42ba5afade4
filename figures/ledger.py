"""The run ledger: the small records of every run behind a number in results/REPORT.md, committed under
``results/ledger/`` so that every table of the report is rebuilt from what the repository ships, offline.

    python -m figures ledger add RUN_DIR... [--device TEXT] [--git COMMIT] [--note TEXT]
    python -m figures ledger list
    python -m figures check [NAME...]    # verify the ledger, rebuild the artefacts from it; fail if REPORT.md differs
    python -m figures report             # rewrite REPORT.md's generated sections from the ledger

Its layout is a run store's (:mod:`figures.flruns`), so ``python -m figures NAME --runs results/ledger`` reads it:

- ``_runs/<key>/``: the runs of the FL artefacts (table1, fig3-5, dp, theory-fl, methods), named by
  :func:`figures.flruns.run_key`, the hash of the run's config (a run comes in under its key, whatever store it
  ran in);
- ``runs/<name>/``: the experiment scripts' runs (FedCOG, DynaFed, HFMDs), named as the scripts name them;
- ``sims/<artefact>/<scale>/summary.json``: the simulators' summaries (fig2, which lemma1 reads too; figB2).

Each run keeps only :data:`KEPT` (config, metrics, summary, provenance, init_from, post-hoc estimates, DynaFed's
saved synthesis) and ``ledger.json`` (where it came from, when, on which device, the code's commit); never
checkpoints, synthetic sets or images. No file may exceed 2 MB and the ledger 50 MB. The ledger holds a ``.ledger``
mark: builds on it read and never train (a missing or unfinished run is named in the artefact's output).

``check`` and ``report`` first verify the ledger (:func:`figures.ledger_check.verify`: every file whole, summaries
agreeing with their metrics rows, no stray or oversized file, no entry the report rests on deleted) and stop there,
one line per damaged file, when it is not whole; ``report`` then refuses a claims row's typed "record lost"
numbers where the ledger holds runs of its artefact (:func:`lost_fallbacks`).
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import hashlib
import io
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from figures.artefacts import SCALES, USED
from figures.catalogue import ARTEFACTS, RERUN
from figures.claims import ROWS, claims_table
from figures.flruns import LEDGER_MARK, RUNS, STORE, run_key
from figures.ledger_check import ENTRY, KEPT, MAX_FILE, MAX_TOTAL, SIMS, disagreements, json_rows, sealed, verify
from figures.report import BEGIN, CLAIMS_BEGIN, CLAIMS_END, END, between, own_report, section, write_sections
from fl.config import from_dict
from fl.run import read_metrics
from theory.cli import ArgumentParser, format_table
from theory.errors import InputError
from theory.output import fsync_path, read_object, write_text_atomically

DEFAULT = Path("results/ledger")
REPORT = Path("results/REPORT.md")
# KEPT, MAX_FILE, MAX_TOTAL, SIMS, ENTRY (what an entry keeps, what it may weigh) live in figures.ledger_check


def ensure(ledger: Path) -> None:
    is_ledger(ledger, may_create=True)
    ledger.mkdir(parents=True, exist_ok=True)
    (ledger / LEDGER_MARK).touch()


def is_ledger(ledger: Path, may_create: bool = False) -> None:
    """InputError (one line) unless ``ledger`` is a run ledger (its ``.ledger`` mark), or, with ``may_create``, a
    folder that does not exist yet or is empty: a folder of other files never becomes one."""
    if (ledger / LEDGER_MARK).is_file():
        return
    if not ledger.exists():
        if may_create:
            return
        raise InputError(f"{ledger}: no such ledger folder")
    if not ledger.is_dir():
        raise InputError(f"{ledger}: not a folder, so not a run ledger")
    if any(ledger.iterdir()):
        raise InputError(f"{ledger}: not a run ledger (no {LEDGER_MARK} mark) and not empty; name the ledger's folder")


def identity(tree: dict, where: Path) -> dict:
    """The config's identity as stores compare it: no speed-only keys, no ``method.cache_dir``."""
    try:
        config = from_dict(json.loads(json.dumps(tree)))
    except InputError as error:
        raise InputError(f"{where}: its config.json is not a valid run config ({error})") from None
    found = config.identity()
    found["method"].pop("cache_dir", None)
    return found


def is_simulator_run(run: Path) -> bool:
    """A simulator's output (``.../fig2/SCALE/run`` of ``python -m figures``): a summary and no config.json."""
    return (run / "summary.json").exists() and not (run / "config.json").exists() and run.parent.parent.name in SIMS


def destination(run: Path, ledger: Path) -> Path:
    """Where ``run`` goes in the ledger (see the module's layout)."""
    if is_simulator_run(run):
        scale = run.parent.name
        if scale not in SCALES:
            raise InputError(f"{run}: a simulator run's folder must be .../NAME/SCALE/run (SCALE one of {SCALES})")
        return ledger / "sims" / run.parent.parent.name / scale
    if not (run / "config.json").is_file():
        raise InputError(f"{run}: not a run folder (no config.json)")
    if run.parent.name == RUNS:  # a run of the FL artefacts: its key, whatever store it ran in
        config = from_dict(read_object(run / "config.json", "config.json"))
        return ledger / RUNS / run_key(config)
    return ledger / "runs" / run.name


def files_of(run: Path) -> list[Path]:
    if is_simulator_run(run):
        return [run / "summary.json"]
    return [run / name for name in KEPT if (run / name).is_file()]


def size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.exists() else 0


def conflict(run: Path, entry: Path) -> str | None:
    """Why ``run`` cannot replace the ledger's ``entry`` of the same name (None: it may, being the same run as far
    or further). Configs, provenance (code version, synthetic sets) and the metrics rows the entry has must agree."""
    if (entry / "config.json").exists():
        ours, theirs = (read_object(f / "config.json", "config.json") for f in (run, entry))
        if identity(ours, run) != identity(theirs, entry):
            return f"its config differs from the ledger's {entry}"
    if (entry / "provenance.json").exists() and (run / "provenance.json").exists():
        ours, theirs = (read_object(f / "provenance.json", "provenance.json") for f in (run, entry))
        for key in ("code_version", "synthetic_sha256"):
            if ours.get(key) != theirs.get(key):
                return f"its provenance {key} {ours.get(key)} differs from the ledger's {theirs.get(key)} ({entry})"
    if (entry / "metrics.jsonl").exists():
        old, new = read_metrics(entry / "metrics.jsonl"), read_metrics(run / "metrics.jsonl")
        if new[: len(old)] != old:
            return f"its metrics disagree with the ledger's {entry} within the {len(old)} rounds the ledger has"
    if (entry / "summary.json").exists() and is_simulator_run(run):
        if read_object(run / "summary.json", "summary") != read_object(entry / "summary.json", "summary"):
            return f"its summary differs from the ledger's {entry}"
    return None


def altered(run: Path) -> str | None:
    """Why ``run``'s records cannot be what the run wrote (None: nothing shows it): a config.json edited since the run
    started (provenance's ``config_sha256``), a provenance.json altered since it finished (summary's
    ``provenance_sha256``), a metrics.jsonl that does not parse, or a summary.json that disagrees with it
    (:func:`figures.ledger_check.disagreements`). A run older than these records is checked as far as it has them."""
    problems: list[str] = []
    provenance = read_object(run / "provenance.json", "provenance") if (run / "provenance.json").is_file() else {}
    summary = read_object(run / "summary.json", "summary") if (run / "summary.json").is_file() else {}
    recorded = provenance.get("config_sha256")
    if recorded and hashlib.sha256((run / "config.json").read_bytes()).hexdigest() != recorded:
        return "its config.json was edited after the run started (it is not the config the run wrote)"
    recorded = summary.get("provenance_sha256")
    if recorded and hashlib.sha256((run / "provenance.json").read_bytes()).hexdigest() != recorded:
        return "its provenance.json was altered after the run finished (its digest in summary.json differs)"
    if not (run / "metrics.jsonl").is_file():
        return None
    rows = json_rows(run / "metrics.jsonl", lambda path, what: problems.append(f"{path.name}: {what}"), rounds=True)
    if rows is None:
        return f"its {problems[0]}" if problems else "its metrics.jsonl is damaged"
    disagree = disagreements(rows, summary) if summary and "rounds" in summary else []
    if disagree:
        key, ours, theirs = disagree[0]
        return f"its summary.json disagrees with its metrics.jsonl ({key} {theirs!r} in it, {ours!r} from the rows)"
    return None


def add(run: Path, ledger: Path, device: str | None = None, git: str | None = None, note: str | None = None) -> str:
    """Copy ``run``'s small records into the ledger; an InputError (one line, nothing written) when the run's records
    were altered (:func:`altered`), the ledger has a conflicting entry of the same name, a file is too large or the
    ledger would pass its budget."""
    run = run.expanduser()
    if not run.is_dir():
        raise InputError(f"{run}: no such run folder")
    is_ledger(ledger, may_create=True)
    dest = destination(run, ledger)
    why = None if is_simulator_run(run) else altered(run)
    if why:
        raise InputError(f"{run}: refused, {why}; nothing was written")
    if dest.exists():
        why = conflict(run, dest)
        if why:
            raise InputError(f"{run}: refused, {why}; nothing was overwritten")
    files = files_of(run)
    for f in files:
        if f.stat().st_size > MAX_FILE:
            raise InputError(f"{f}: {f.stat().st_size / 2**20:.1f} MB is over the ledger's 2 MB per file")
    grown = sum(f.stat().st_size for f in files) - size(dest)
    if size(ledger) + grown > MAX_TOTAL:
        raise InputError(f"{run}: refused, the ledger would pass its {MAX_TOTAL // 2**20} MB")
    if dest.exists() and all((dest / f.name).exists() and (dest / f.name).read_bytes() == f.read_bytes()
                             for f in files):  # fmt: skip
        return f"{run}: already in the ledger as {dest} (unchanged)"
    provenance = read_object(run / "provenance.json", "provenance") if (run / "provenance.json").exists() else {}
    record = {
        "source": str(run.resolve()),
        "added": datetime.date.today().isoformat(),
        "device": device or provenance.get("device"),
        "git": git or provenance.get("git"),
        "note": note,
    }
    ensure(ledger)
    staging = dest.with_name(dest.name + ".adding")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for f in files:
        shutil.copy2(f, staging / f.name)
        fsync_path(staging / f.name)
    record = sealed(record, [staging / f.name for f in files])  # digests: an edit after the add shows (check)
    write_text_atomically(staging / ENTRY, json.dumps(record, indent=2) + "\n")  # fsyncs staging too
    old = dest.with_name(dest.name + ".replaced")
    if dest.exists():
        dest.rename(old)
    staging.rename(dest)
    fsync_path(dest.parent, folder=True)  # the entry's name is on disk before the old one goes
    shutil.rmtree(old, ignore_errors=True)
    return f"{run}: added as {dest}"


def entries(ledger: Path) -> list[Path]:
    found = [*sorted((ledger / RUNS).glob("*")), *sorted((ledger / "runs").glob("*"))]
    found += sorted((ledger / "sims").glob("*/*"))
    return [f for f in found if f.is_dir() and not f.name.endswith((".adding", ".replaced"))]


def describe(entry: Path) -> list[str]:
    """(entry, what, rounds, code version, git, device) of one ledger entry."""
    meta = read_object(entry / ENTRY, ENTRY) if (entry / ENTRY).exists() else {}
    name = str(entry.relative_to(entry.parent.parent))
    if not (entry / "config.json").exists():
        return [name, "simulator summary", "-", "-", meta.get("git") or "-", meta.get("device") or "-"]
    config = read_object(entry / "config.json", "config.json")
    method, train = config.get("method", {}), config.get("train", {})
    what = f"{config.get('algorithm', {}).get('name', '?')} + {method.get('name', 'none')}, seed {train.get('seed')}"
    try:
        rows = read_metrics(entry / "metrics.jsonl")
        done = "done" if (entry / "summary.json").exists() else "partial"
        if done == "done":
            read_object(entry / "summary.json", "summary.json")
        rounds = f"{rows[-1]['round'] if rows else 0} of {train.get('rounds')} ({done})"
    except (ValueError, KeyError, TypeError, InputError):  # torn or foreign: the row says so, `figures check` names it
        rounds = "damaged metrics.jsonl or summary.json (python -m figures check)"
    provenance = read_object(entry / "provenance.json", "provenance") if (entry / "provenance.json").exists() else {}
    return [name, what, rounds, provenance.get("code_version", "-"), meta.get("git") or "-", meta.get("device") or "-"]


def listing(ledger: Path) -> str:
    found = entries(ledger)
    if not found:
        return f"{ledger}: the ledger is empty"
    table = format_table(["entry", "run", "rounds", "code version", "git", "device"], [describe(e) for e in found])
    return f"{table}\n{len(found)} entries, {size(ledger) / 2**20:.1f} MB"


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
    summaries come from the ledger). ``evidence`` (when given) gets, for each artefact that did not rebuild, the
    ledger entries it read that are there (none: the ledger holds nothing of it)."""
    if not (ledger / LEDGER_MARK).exists():
        raise InputError(f"{ledger}: not a run ledger (no {LEDGER_MARK} mark)")
    built: dict[tuple[str, str], dict | str] = {}
    saved, rerun = STORE["path"], RERUN["sims"]
    STORE["path"], RERUN["sims"] = ledger, False  # the simulator artefacts read the ledger's summaries
    try:
        with tempfile.TemporaryDirectory() as tmp:
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
                    try:
                        with contextlib.redirect_stdout(io.StringIO()):  # the build reads sims/ itself (catalogue)
                            built[artefact.name, scale] = artefact.make(scale, Path(tmp), force=True)[0]
                    except InputError as error:
                        built[artefact.name, scale] = str(error).replace(str(ledger), "the ledger")
                        held = sorted(str(f.relative_to(ledger)) for f in USED
                                      if f.is_relative_to(ledger) and f.exists())  # fmt: skip
                        if evidence is not None and held:
                            evidence[artefact.name, scale] = held
    finally:
        STORE["path"], RERUN["sims"] = saved, rerun
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
    adding.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR")
    adding.add_argument("--device", help="where the runs ran, when their provenance does not say (e.g. 'NVIDIA H200')")
    adding.add_argument("--git", help="the commit the runs ran at, when their provenance does not say it right")
    adding.add_argument("--note", help="one line kept with each entry")
    lease = "with --from-lease: the run store (default $SHUFFLEFL_RUNS, else results)", "the generator cache"
    adding.add_argument(
        "--from-lease", type=Path, nargs="+", metavar="DIR",
        help="a GPU lease's files (figures.lease); several folders: snapshots of one lease, each run's newest kept",
    )  # fmt: skip
    adding.add_argument("--runs", dest="store", type=Path, help=lease[0])
    adding.add_argument("--cache-dir", type=Path, help=f"with --from-lease: {lease[1]} (default STORE/_synthetic)")
    sub.add_parser("list", help="every entry: rounds done, code version, device").add_argument(
        "--ledger", type=Path, default=DEFAULT, help=f"the run ledger (default {DEFAULT})"
    )
    args = parser.parse_args(argv)
    if args.command == "list":
        is_ledger(args.ledger)
        print(listing(args.ledger))
        return 0
    is_ledger(args.ledger, may_create=True)  # before any run: a folder of other files never becomes a ledger
    if bool(args.from_lease) == bool(args.runs):
        parser.error("add takes RUN_DIR... or --from-lease DIR")
    if not args.from_lease and (args.store or args.cache_dir):
        parser.error("--runs and --cache-dir go with --from-lease")
    if args.from_lease and (args.device or args.git):
        parser.error("--device and --git go with RUN_DIR... (a lease's runs name their device in provenance)")
    if args.from_lease:
        from figures.lease import bring_home  # figures.lease imports this module where it adds runs

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
