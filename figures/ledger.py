"""The run ledger: the small records of every run behind a number in results/REPORT.md, committed under
``results/ledger/`` so that every table of the report is rebuilt from what the repository ships, offline.

    python -m figures ledger add RUN_DIR... [--device TEXT] [--git COMMIT] [--note TEXT]
    python -m figures ledger list
    python -m figures check [NAME...]    # rebuild the artefacts from the ledger; fail if REPORT.md differs
    python -m figures report [NAME...]   # rewrite REPORT.md's generated sections from the ledger

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
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import io
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from figures.artefacts import SCALES
from figures.catalogue import ARTEFACTS
from figures.claims import claims_table
from figures.flruns import LEDGER_MARK, RUNS, STORE, run_key
from figures.report import BEGIN, CLAIMS_BEGIN, CLAIMS_END, END, between, section, write_sections
from fl.config import from_dict
from fl.run import read_metrics
from theory.cli import ArgumentParser, format_table
from theory.errors import InputError
from theory.output import read_object

DEFAULT = Path("results/ledger")
REPORT = Path("results/REPORT.md")
KEPT = (
    "config.json", "metrics.jsonl", "summary.json", "provenance.json", "init_from.txt", "estimates_posthoc.jsonl",
    "dynafed_synthesis.pt",
)  # fmt: skip
MAX_FILE, MAX_TOTAL = 2 * 2**20, 50 * 2**20
SIMS = {"fig2": "fig2", "lemma1": "fig2", "figB2": "figB2"}  # artefact -> the simulator run it reads (sims/<run>)
ENTRY = "ledger.json"


def ensure(ledger: Path) -> None:
    ledger.mkdir(parents=True, exist_ok=True)
    (ledger / LEDGER_MARK).touch()


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


def add(run: Path, ledger: Path, device: str | None = None, git: str | None = None, note: str | None = None) -> str:
    """Copy ``run``'s small records into the ledger; an InputError (one line, nothing written) when the ledger has a
    conflicting entry of the same name, a file is too large or the ledger would pass its budget."""
    run = run.expanduser()
    if not run.is_dir():
        raise InputError(f"{run}: no such run folder")
    dest = destination(run, ledger)
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
    (staging / ENTRY).write_text(json.dumps(record, indent=2) + "\n")
    old = dest.with_name(dest.name + ".replaced")
    if dest.exists():
        dest.rename(old)
    staging.rename(dest)
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
    rows = read_metrics(entry / "metrics.jsonl")
    done = "done" if (entry / "summary.json").exists() else "partial"
    rounds = f"{rows[-1]['round'] if rows else 0} of {train.get('rounds')} ({done})"
    provenance = read_object(entry / "provenance.json", "provenance") if (entry / "provenance.json").exists() else {}
    return [name, what, rounds, provenance.get("code_version", "-"), meta.get("git") or "-", meta.get("device") or "-"]


def listing(ledger: Path) -> str:
    found = entries(ledger)
    if not found:
        return f"{ledger}: the ledger is empty"
    table = format_table(["entry", "run", "rounds", "code version", "git", "device"], [describe(e) for e in found])
    return f"{table}\n{len(found)} entries, {size(ledger) / 2**20:.1f} MB"


def rebuild(ledger: Path, names: Sequence[str] = ()) -> dict[tuple[str, str], dict | str]:
    """Every artefact at the cpu and paper scales rebuilt from the ledger alone, into a temporary folder: (name,
    scale) -> its result, or why it could not be rebuilt. Trains nothing; the simulators are not run either (their
    summaries come from the ledger)."""
    if not (ledger / LEDGER_MARK).exists():
        raise InputError(f"{ledger}: not a run ledger (no {LEDGER_MARK} mark)")
    built: dict[tuple[str, str], dict | str] = {}
    saved = STORE["path"]
    STORE["path"] = ledger
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
                        run = Path(tmp) / SIMS[artefact.name] / scale / "run"
                        run.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(summary, run / "summary.json")
                    try:
                        with contextlib.redirect_stdout(io.StringIO()):
                            built[artefact.name, scale] = artefact.make(scale, Path(tmp), force=True)[0]
                    except InputError as error:
                        built[artefact.name, scale] = str(error).replace(str(ledger), "the ledger")
    finally:
        STORE["path"] = saved
    return built


def sections(ledger: Path, names: Sequence[str] = ()) -> tuple[str, str]:
    """(the claims table, the artefacts' section) as the ledger gives them."""
    built = rebuild(ledger, names)
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


def check(ledger: Path, report: Path, names: Sequence[str] = ()) -> list[str]:
    """The differences (unified diff lines) between ``report``'s generated sections and what the ledger gives."""
    claims, artefacts = sections(ledger, names)
    text = report.read_text() if report.exists() else ""
    pairs = [(part(text, BEGIN, END, names), part(artefacts, BEGIN, END, names))]
    if not names:
        pairs.append((between(text, CLAIMS_BEGIN, CLAIMS_END) or "", claims))
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
    adding.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    adding.add_argument("--device", help="where the runs ran, when their provenance does not say (e.g. 'NVIDIA H200')")
    adding.add_argument("--git", help="the commit the runs ran at, when their provenance does not say it right")
    adding.add_argument("--note", help="one line kept with each entry")
    sub.add_parser("list", help="every entry: rounds done, code version, device").add_argument(
        "--ledger", type=Path, default=DEFAULT, help=f"the run ledger (default {DEFAULT})"
    )
    args = parser.parse_args(argv)
    if args.command == "list":
        print(listing(args.ledger))
        return 0
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
    what = "Rewrite REPORT.md's generated sections" if write else "Check REPORT.md's generated sections against"
    parser = parser_for(f"python -m figures {verb}", f"{what} the artefacts rebuilt from the run ledger (offline).")
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these artefacts (default: all)")
    parser.add_argument("--report", type=Path, default=REPORT, help=f"the report (default {REPORT})")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in ARTEFACTS]
    if unknown:
        raise InputError(f"unknown artefact {unknown[0]!r}; known: {', '.join(ARTEFACTS)}")
    if write and args.names:
        raise InputError("report rewrites every artefact's block; give no names")
    start = time.perf_counter()
    if write:
        claims, artefacts = sections(args.ledger)
        write_sections(args.report, claims, artefacts)
        print(
            f"rewrote the generated sections of {args.report} from {args.ledger} ({time.perf_counter() - start:.0f} s)"
        )
        return 0
    diff = check(args.ledger, args.report, args.names)
    seconds = time.perf_counter() - start
    if diff:
        print("\n".join(diff[:60] + ([f"... {len(diff) - 60} more lines"] if len(diff) > 60 else [])))
        print(f"figures check: {args.report} differs from what {args.ledger} gives ({seconds:.0f} s); "
              "rebuild it with python -m figures report")  # fmt: skip
        return 1
    print(f"figures check: {args.report} is what {args.ledger} gives ({seconds:.0f} s)")
    return 0
