"""What a run ledger holds, and the check that it holds only that, whole: ``python -m figures check`` and ``report``
run :func:`verify` before any artefact is rebuilt, so the builders never see a damaged entry.

The layout (:mod:`figures.ledger` describes it): ``.ledger`` (the mark), ``manifest.json``, ``_runs/<key>/`` and
``runs/<name>/`` (one ``fl.run`` run each: :data:`KEPT` and ``ledger.json``), ``sims/<run>/<scale>/`` (a simulator's
``summary.json`` and ``ledger.json``), ``quality/`` and ``bench/``. :func:`verify` finds, each as one line naming
the file, as ``git fsck`` and ``sha256sum -c`` do:

- a file that does not parse: JSON that is not an object, a JSONL line that is not JSON (a torn last line: cut
  while being written, or without its newline), a blank line, rows without their ``round`` or out of order, an
  empty ``metrics.jsonl``, a ``.pt`` that is not a whole zip archive;
- a ``summary.json`` that disagrees with its ``metrics.jsonl``: every number ``fl.run`` draws from the rows
  (:func:`fl.metrics.summarise`: rounds done, final and best test accuracy, rounds and communication to the target,
  total communication, the estimates' means, the local and method seconds), the rows' count against the rounds, and
  a run that stopped before its config's last round without diverging;
- a file over :data:`MAX_FILE`, a ledger over :data:`MAX_TOTAL`;
- a stray file (a name an entry does not keep) or folder (a run folder without a valid ``config.json``, a ``_runs``
  folder whose config does not hash to its name, a leftover of an interrupted ``ledger add``, anything under
  ``sims`` but ``<run>/<scale>``), a missing ``ledger.json``;
- a run or simulator summary that REPORT.md's generated blocks rest on and the ledger no longer holds (deleted);
- what ``ledger add`` recorded no longer holding: a file whose sha256 differs from the one recorded in the entry's
  ``ledger.json`` (an edited config, provenance, metrics or summary), a recorded file missing (a deleted
  summary.json), a ``ledger.json`` whose own digest does not match its fields (an edited device or git), an entry
  without recorded digests (added by hand);
- a named run (``runs/<name>``) whose config contradicts its name (its seed ``_seed<k>``, its arm: ``_hfmds``,
  ``_fmds``, ``_fedcog``, ``_fedavg``), a run that reached its last round without a summary, and two entries of one
  run (the same metrics rows under two names);
- a run whose config names a plug-in (``package.module:Name``) that its ``provenance.json`` does not record by the
  same path with a hash (its code's, :func:`fl.plugins.source_hash`), or records where the config names none;
- a run's records against the digests it wrote of one another: a ``config.json`` whose sha256 is not its
  provenance's ``config_sha256``, a ``provenance.json`` whose sha256 is not its summary's ``provenance_sha256``;
- the ledger against its ``manifest.json`` (:data:`MANIFEST`: every entry, runs, simulator summaries, quality
  reports and gpu-bench records alike, with the sha256 of each of its files; ``ledger add`` records each entry
  there): an entry deleted (whether or not a report's block rests on it), an entry it does not list, a file added
  to, missing from or edited in any entry, a ledger with entries and no manifest, a manifest that is not one.

A forgery that edits a file and re-seals the ledger by hand (its ``ledger.json``, the manifest, the run's digests)
cannot be caught from inside the repository: each seal is computed from the files, with no secret; git history is
the anchor (docs/guides/artefacts.md).

The check runs no code the ledger's records name (:func:`fl.plugins.importing_nothing`): a plug-in's path and hash
are compared as recorded, never imported. Its configuration is checked with each plug-in in place of a built-in (the
rest of the config as ``fl.run`` reads it), and a keyed entry naming one is not re-keyed (its key hashes the
plug-in's code and defaults): the sha256 of its ``config.json`` recorded by ``ledger add``, which keyed it, stands
for that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fl.config import PLUGIN_KEYS, RunConfig, from_dict, migrate
from fl.metrics import accuracy_summary, rounds_to_target
from fl.plugins import importing_nothing, is_plugin
from fl.quality import report_name
from lab.records.keys import LEDGER_MARK, RECORD_FILES, RUNS, SCALES, run_key
from theory.errors import InputError
from theory.output import file_sha256, to_json

KEPT = RECORD_FILES  # what a ledger entry keeps of a run: the records a lease brings back of every run
MAX_FILE, MAX_TOTAL = 2 * 2**20, 50 * 2**20
SIMS = {"fig2": "fig2", "lemma1": "fig2", "figB2": "figB2"}  # artefact -> the simulator run it reads (sims/<run>)
ENTRY = "ledger.json"
NAMED = "runs"  # runs/<name>: the experiment scripts' runs, named as the scripts name them
QUALITY = "quality"  # quality/<generator>-<dataset>-seed<S>[-steps<N>][-sets<sha>].json: fl.quality's reports
BENCH = "bench"  # bench/<date>-<device>/gpu.json (+ its logs): scripts/gpu-bench.sh's measurements on a device
MANIFEST = "manifest.json"  # every entry and the sha256 of each of its files (:func:`manifest_of`)
TOP = (LEDGER_MARK, MANIFEST, RUNS, NAMED, "sims", QUALITY, BENCH)
BENCH_KEYS = {"device": str, "rates": dict, "rows": list}  # what a gpu-bench JSON must hold (benchmarks/gpu_bench.py)
BENCH_TEXT = (".log", ".txt", ".md")  # beside it: what the device printed, and a note
QUALITY_KEYS = {  # what a quality report must hold, by type (fl.quality)
    "generator": str, "seed": int, "dataset": str, "synthetic_sha256": str, "images": int, "noise_fraction": float,
    "noise_by_client": list, "label_agreement": float, "synthetic_trained_accuracy": float,
    "real_trained_accuracy": float, "code_version": str,
}  # fmt: skip
NO_CODE = "the ledger's check reads records and runs none of the code they name"
ESTIMATES = ("zeta2", "sigma2", "zeta2_hat", "sigma2_hat", "delta2", "zeta2_ratio")  # fl.metrics.summarise's means

Flag = Callable[[Path, str], None]
# a named run's arm, by the suffix its experiment script gives it -> the method its config must name
ARM_METHODS = {"_fedavg_alpha01": "none", "_hfmds": "hfmds", "_fmds": "fmds", "_fedcog": "fedcog", "_fedavg": "none"}


# what the check says of a file that is not as it was added (by an entry's ledger.json or by the manifest: one wording)
EDITED = "differs from the file the entry was added with (its sha256 changed: edited?)"
DELETED = "missing: the entry was added with it (deleted?)"
PLANTED = "not among the files the entry was added with (put there by hand?)"
SEAL = "python -m figures ledger seal"


def entry_digest(record: dict) -> str:
    """The digest of a ledger.json's fields (all but ``entry_sha256`` itself): an edit of one shows."""
    fields = {k: v for k, v in record.items() if k != "entry_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def sealed(record: dict, files: list[Path]) -> dict:
    """``record`` with the sha256 of each of ``files`` and its own digest: what ``ledger add`` writes."""
    record = {k: v for k, v in record.items() if k not in ("files", "entry_sha256")}
    record["files"] = {f.name: file_sha256(f) for f in sorted(files)}
    return record | {"entry_sha256": entry_digest(record)}


def recorded(entry: Path, flag: Flag, kept: tuple[str, ...]) -> None:
    """The entry's files against the digests its ledger.json recorded when it was added."""
    try:
        record = json.loads((entry / ENTRY).read_text())
    except (OSError, ValueError):
        return  # json_object flags it
    if not isinstance(record, dict):
        return
    files = record.get("files")
    if not isinstance(files, dict):
        flag(entry / ENTRY, "records no digests of the entry's files (added by hand, not by figures ledger add?)")
        return
    if record.get("entry_sha256") != entry_digest(record):
        flag(entry / ENTRY, "its fields differ from those recorded when the entry was added (edited?)")
    here = {p.name for p in entry.iterdir() if p.is_file() and p.name in kept}
    for name in sorted(set(files) - here):
        flag(entry / name, DELETED)
    for name in sorted(here - set(files)):
        flag(entry / name, PLANTED)
    for name in sorted(here & set(files)):
        if file_sha256(entry / name) != files[name]:
            flag(entry / name, EDITED)


def name_problem(name: str, config) -> str | None:
    """How a named run's config contradicts its name (seed, arm), or None."""
    found = re.search(r"_seed(\d+)(?:_|$)", name)
    seed = int(found.group(1)) if found else 0
    if config.train.seed != seed:
        return f"its config's train.seed is {config.train.seed}, its name says seed {seed}"
    arm = next((suffix for suffix in ARM_METHODS if name.endswith(suffix)), None)
    method = config.method.get("name") if isinstance(config.method, dict) else getattr(config.method, "name", None)
    if arm is not None and method != ARM_METHODS[arm]:
        return f"its config's method is {method!r}, its name's arm ({arm[1:]}) runs {ARM_METHODS[arm]!r}"
    return None


def verify(ledger: Path, rests_on: dict[str, str] | None = None, manifest: bool = True) -> list[str]:
    """Every problem of the run ledger ``ledger``, one line per damaged file or folder ("PATH: what is wrong"),
    sorted by path; none when it is whole. ``rests_on`` (entry, relative to the ledger -> what rests on it: a
    report's block, ``figures.ledger.verify``): also each such entry the ledger no longer holds. ``manifest``: also
    the ledger against its manifest (:func:`manifest_problems`; ``ledger seal`` checks all else before it writes
    one). Runs no code a record names: no plug-in is imported (:func:`fl.plugins.importing_nothing`)."""
    with importing_nothing(NO_CODE):
        return problems_of(ledger, rests_on, manifest)


def problems_of(ledger: Path, rests_on: dict[str, str] | None, manifest: bool = True) -> list[str]:
    """:func:`verify`'s lines."""
    problems: dict[Path, list[str]] = {}

    def flag(path: Path, what: str) -> None:
        if what not in problems.setdefault(path, []):  # an entry's ledger.json and the manifest say it alike
            problems[path].append(what)

    if not ledger.is_dir():
        return [f"{ledger}: no such ledger folder"]
    if not (ledger / LEDGER_MARK).is_file():
        flag(ledger / LEDGER_MARK, "missing: the folder is not marked as a run ledger")
    sizes(ledger, flag)
    for child in sorted(ledger.iterdir()):
        if child.name not in TOP:
            flag(child, f"stray {kind(child)} (a ledger holds only {', '.join(TOP)})")
    for group in (RUNS, NAMED):
        folder = ledger / group
        for child in sorted(folder.iterdir()) if folder.is_dir() else ():
            if not child.is_dir() or child.is_symlink():
                flag(child, f"stray {kind(child)} (only run folders belong in {group}/)")
            elif child.name.endswith((".adding", ".replaced")):
                flag(child, "stray folder: left by an interrupted `figures ledger add`")
            else:
                run_entry(child, keyed=group == RUNS, flag=flag)
    simulator_entries(ledger / "sims", flag)
    quality_entries(ledger / QUALITY, flag)
    bench_entries(ledger / BENCH, flag)
    duplicates(ledger, flag)
    if rests_on:
        for entry, where in rests_on.items():
            if not (ledger / entry).is_dir():
                flag(ledger / entry, f"missing: {where} rests on it (a deleted entry?)")
    if manifest:
        manifest_problems(ledger, flag)
    return [f"{path}: {'; '.join(whats)}" for path, whats in sorted(problems.items())]


def kind(path: Path) -> str:
    return "folder" if path.is_dir() and not path.is_symlink() else "file"


def sizes(ledger: Path, flag: Flag) -> None:
    total = 0
    for path in sorted(ledger.rglob("*")):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            flag(path, "not a plain file or folder (a link?)")
        elif path.is_file():
            size = path.stat().st_size
            total += size
            if size > MAX_FILE:
                flag(path, f"{size / 2**20:.1f} MB is over the ledger's {MAX_FILE / 2**20:g} MB per file")
    if total > MAX_TOTAL:
        flag(ledger, f"{total / 2**20:.1f} MB in all is over the ledger's {MAX_TOTAL / 2**20:g} MB")


def text_of(path: Path, flag: Flag) -> str | None:
    try:
        return path.read_bytes().decode()
    except UnicodeDecodeError:
        flag(path, "not UTF-8 text")
    except OSError as error:
        flag(path, f"unreadable ({error.strerror or error})")
    return None


def json_object(path: Path, flag: Flag) -> dict | None:
    """The JSON object in ``path``; None (and the problem flagged) when it is missing, not JSON or not an object."""
    if not path.is_file():
        flag(path, "missing")
        return None
    text = text_of(path, flag)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        flag(path, f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})")
        return None
    if not isinstance(value, dict):
        flag(path, f"not a JSON object (a {type(value).__name__})")
        return None
    return value


def json_rows(path: Path, flag: Flag, rounds: bool) -> list[dict] | None:
    """The rows of a JSONL file, each an object (with ``rounds``: a ``round`` 1, 2, ... in order); None (and one
    problem flagged) when the file is empty, torn or otherwise not such rows."""
    text = text_of(path, flag)
    if text is None:
        return None
    if not text.strip():
        flag(path, "empty: no rows")
        return None
    lines = text.split("\n")
    whole = lines[-1] == ""  # every row of fl.run ends with its newline
    if whole:
        lines.pop()
    rows = []
    for number, line in enumerate(lines, 1):
        last = number == len(lines)
        if not line.strip():
            flag(path, f"line {number} of {len(lines)} is blank")
            return None
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            torn = ", its last, is torn (cut while being written)" if last else " is not JSON"
            flag(path, f"line {number} of {len(lines)}{torn}")
            return None
        if not isinstance(row, dict):
            flag(path, f"line {number} of {len(lines)} is not a JSON object")
            return None
        if rounds and (type(row.get("round")) is not int or row["round"] != number):
            flag(path, f"line {number} of {len(lines)} has round {row.get('round')!r}, not {number} (rows lost?)")
            return None
        rows.append(row)
    if not whole:
        flag(path, f"line {len(lines)} of {len(lines)}, its last, has no newline (torn while being written?)")
        return None
    return rows


def plugins_named(tree: dict) -> dict[str, str]:
    """Config key -> the plug-in path (``package.module:Name``) a recorded config tree names there (read, not
    resolved)."""
    named = {}
    for key in PLUGIN_KEYS:
        section, name = key.split(".")
        table = tree.get(section)
        if isinstance(table, dict) and is_plugin(table.get(name)):
            named[key] = table[name]
    return named


def builtins_only(tree: dict, named: dict[str, str]) -> dict:
    """``tree`` with each plug-in of ``named`` replaced by its key's default built-in, a plug-in method's or
    algorithm's table by the bare default (their keys are the plug-in's to say): the rest is checked as fl.run reads
    it, and no plug-in is imported."""
    tree = {section: dict(table) if isinstance(table, dict) else table for section, table in tree.items()}
    defaults = RunConfig()
    for key in named:
        section, name = key.split(".")
        if section in ("method", "algorithm"):
            tree[section] = {"name": getattr(defaults, section)["name"]}
            if section == "algorithm":
                tree.pop("algorithm_fields", None)  # the plug-in's fields with their values, as recorded
        else:
            tree[section][name] = getattr(getattr(defaults, section), name)
    return tree


def run_config(entry: Path, flag: Flag) -> tuple[RunConfig, dict[str, str]] | None:
    """The run config of a run folder and the plug-ins it names (:func:`plugins_named`; the config holds their
    paths, its other keys checked); None (and the folder flagged as stray) when it has none that is valid. Imports
    no plug-in (:func:`fl.plugins.importing_nothing`)."""
    path = entry / "config.json"
    if not path.is_file():
        flag(entry, "stray folder: no config.json (not a run)")
        return None
    problems: list[str] = []
    tree = json_object(path, lambda _, what: problems.append(what))
    if tree is None:
        flag(entry, f"stray folder: its config.json is {problems[0]}")
        return None
    try:
        with importing_nothing(NO_CODE):
            tree = migrate(json.loads(json.dumps(tree)))
            named = plugins_named(tree)
            config = from_dict(builtins_only(tree, named), notes=[])  # its notes: not the ledger's business
    except (InputError, TypeError, ValueError, AttributeError, KeyError) as error:
        flag(entry, f"stray folder: its config.json is not a valid run config ({error})")
        return None
    for key, spec in named.items():  # the paths back in place (never resolved: name_problem reads method.name)
        section, name = key.split(".")
        if section in ("method", "algorithm"):
            config = dataclasses.replace(config, **{section: dict(tree[section])})
        else:
            part = getattr(config, section)
            config = dataclasses.replace(config, **{section: dataclasses.replace(part, **{name: spec})})
    return config, named


def plugin_records(entry: Path, named: dict[str, str], flag: Flag) -> None:
    """The plug-ins a run's config names (key -> path, :func:`plugins_named`) against what its ``provenance.json``
    records of them at the run's start and at each change a resume accepted (by key: {"spec", "sha256"}): the same
    paths, each with a hash (:func:`fl.plugins.source_hash`: 12 hex digits, an installed distribution's
    NAME==VERSION, or null for code without source), and none the config does not name. Paths and hashes only:
    nothing is imported."""
    path = entry / "provenance.json"
    if not path.is_file():
        if named:
            key = min(named)
            flag(path, f"missing: the config names the plug-in {named[key]} ({key}), whose code only "
                 "provenance.json records")  # fmt: skip
        return
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # json_object flags it
    if not isinstance(record, dict):
        return
    changes = record.get("changes") if isinstance(record.get("changes"), list) else []
    records = [("at the run's start", record.get("plugins"))]
    records += [(f"at a resume's change, round {c.get('round')}", c["plugins"]) for c in changes
                if isinstance(c, dict) and "plugins" in c]  # fmt: skip
    for where, said in records:
        if not named and not said:  # a run without plug-ins (an older record has no "plugins")
            continue
        if not isinstance(said, dict):
            flag(path, f"records no plug-ins by config key {where}; the config names {', '.join(sorted(named))}")
            continue
        for key in sorted({*named, *said}):
            recorded = said.get(key)
            spec = recorded.get("spec") if isinstance(recorded, dict) else None
            if key not in named:
                flag(path, f"records the plug-in {spec!r} for {key} {where}, which the config does not name")
            elif spec != named[key]:
                flag(path, f"records {spec!r} for {key} {where}; the config names the plug-in {named[key]!r}")
            elif not isinstance(recorded.get("sha256", 0), str | None):
                flag(path, f"records no hash of the plug-in {spec} ({key}) {where}")


def run_entry(entry: Path, keyed: bool, flag: Flag, name: str | None = None, ignored: tuple[str, ...] = ()) -> None:
    """One ``fl.run`` run of the ledger (``_runs/<key>`` when ``keyed``, else ``runs/<name>``); ``name``: the name
    it has (or will have: ``ledger add`` checks what it staged, :func:`entry_problems`) where not its folder's;
    ``ignored``: files of the folder that are no part of the entry (add's own marker). ``ledger add`` applies every
    rule here: it takes a run at any round (an unfinished run has no summary; one more round of it replaces the entry
    later), but never a summary that ends before its config's rounds without diverging."""
    name = entry.name if name is None else name
    found = run_config(entry, flag)
    if found is None:
        return
    config, named = found
    for child in sorted(entry.iterdir()):
        if child.name in ignored:
            continue
        if child.is_dir() and not child.is_symlink():
            flag(child, "stray folder (a run entry holds files only)")
        elif child.name not in (*KEPT, ENTRY):
            flag(child, f"stray file (a run entry keeps only {', '.join(KEPT)} and {ENTRY})")
    plugin_records(entry, named, flag)
    if keyed and not named:  # a plug-in's key hashes its code: ledger.json's sha256 of config.json stands for it
        with importing_nothing(NO_CODE):
            key = run_key(config)
        if key != name:
            flag(entry / "config.json", f"hashes to {key}, not to its folder's name (edited, or a stray folder)")
    json_object(entry / ENTRY, flag)
    recorded(entry, flag, KEPT)
    digests_recorded(entry, flag)
    if not keyed:
        said = name_problem(name, config)
        if said:
            flag(entry / "config.json", f"contradicts the run's name: {said}")
    if (entry / "provenance.json").exists():
        json_object(entry / "provenance.json", flag)
    if (entry / "init_from.txt").exists():
        text_of(entry / "init_from.txt", flag)
    if (entry / "estimates_posthoc.jsonl").exists():
        json_rows(entry / "estimates_posthoc.jsonl", flag, rounds=False)
    if (entry / "dynafed_synthesis.pt").exists():
        archive(entry / "dynafed_synthesis.pt", flag)
    metrics, rows = entry / "metrics.jsonl", None
    if metrics.is_file():
        rows = json_rows(metrics, flag, rounds=True)
    else:
        flag(metrics, "missing")
    summary = json_object(entry / "summary.json", flag) if (entry / "summary.json").exists() else None
    if rows and summary is None and rows[-1].get("round") == config.train.rounds:
        flag(entry / "summary.json", f"missing: the run reached its last round ({config.train.rounds})")
    if rows and summary is not None:
        disagree = [f"{key} {theirs!r} in summary.json, {ours!r} from the rows"
                    for key, ours, theirs in disagreements(rows, summary)]  # fmt: skip
        if disagree:
            flag(metrics, f"disagrees with summary.json: {', '.join(disagree)}")
        rounds, diverged = summary.get("rounds"), summary.get("diverged_at_round")
        if isinstance(rounds, int) and rounds < config.train.rounds and diverged is None:
            flag(entry / "summary.json", f"says the run finished at round {rounds} of its config's "
                 f"{config.train.rounds} without diverging")  # fmt: skip


def digests_recorded(entry: Path, flag: Flag) -> None:
    """A run's records against the digests it wrote of one another (:mod:`fl.provenance`): its ``config.json``
    against the ``config_sha256`` its ``provenance.json`` records (the config as the run started, or as a resume
    that changed it wrote it), its ``provenance.json`` against the ``provenance_sha256`` its ``summary.json``
    records (as the run finished). A run older than these digests is checked as far as it has them; a record that
    does not parse is flagged elsewhere."""
    pairs = (("provenance.json", "config_sha256", "config.json", "the config was edited after the run started?"),
             ("summary.json", "provenance_sha256", "provenance.json", "edited after the run finished?"))  # fmt: skip
    for holder, key, named, why in pairs:
        try:
            record = json.loads((entry / holder).read_text()) if (entry / holder).is_file() else {}
        except (OSError, ValueError):
            continue
        said = record.get(key) if isinstance(record, dict) else None
        if not isinstance(said, str) or not (entry / named).is_file():
            continue
        if file_sha256(entry / named) != said:
            flag(entry / named, f"its sha256 is not the {key} its {holder} records ({why})")


def rows_digest(entry: Path) -> str | None:
    """A digest of a run entry's metrics rows without their timings (what two entries of one run share), None
    without rows."""
    path = entry / "metrics.jsonl"
    if not path.is_file() or path.is_symlink():
        return None
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            rows.append({k: v for k, v in row.items() if not k.startswith("seconds")} if isinstance(row, dict)
                        else row)  # fmt: skip
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest() if rows else None


def run_entries(ledger: Path) -> list[Path]:
    """The ledger's run entries (keyed, then named), each sorted."""
    return [
        entry for group in (RUNS, NAMED) if (ledger / group).is_dir() for entry in sorted((ledger / group).iterdir())
    ]


def duplicates(ledger: Path, flag: Flag) -> None:
    """Two entries of one run: the same metrics rows (timings aside) under two names or keys."""
    seen: dict[str, Path] = {}
    for entry in run_entries(ledger):
        key = rows_digest(entry)
        if key is None:
            continue
        if key in seen:
            flag(entry, f"the same run as {seen[key].relative_to(ledger)} (identical metrics rows)")
        seen.setdefault(key, entry)


def entry_problems(staged: Path, dest: Path, ledger: Path, ignored: tuple[str, ...] = ()) -> list[str]:
    """What :func:`verify` would flag of the run entry ``staged`` once it stands at ``dest`` in ``ledger`` (one
    line each, naming the entry's file): every rule of one run entry (:func:`run_entry`) and the same
    run already in the ledger under another name (:func:`duplicates`). ``ledger add`` refuses a run on any, so it
    never says "added" to an entry the check then rejects."""
    problems: list[str] = []

    def flag(path: Path, what: str) -> None:
        problems.append(f"{dest / path.relative_to(staged) if path.is_relative_to(staged) else path}: {what}")

    with importing_nothing(NO_CODE):
        run_entry(staged, keyed=dest.parent.name == RUNS, flag=flag, name=dest.name, ignored=ignored)
    key = rows_digest(staged)
    others = [entry for entry in run_entries(ledger)
              if entry not in (dest, staged) and not entry.name.endswith((".adding", ".replaced"))]  # fmt: skip
    same = [entry for entry in others if key is not None and rows_digest(entry) == key]
    if same:
        problems.append(f"{dest}: the same run as {same[0].relative_to(ledger)} (identical metrics rows)")
    return problems


def archive(path: Path, flag: Flag) -> None:
    """A torch file (a zip archive) whose every member reads back whole."""
    try:
        with zipfile.ZipFile(path) as opened:
            bad = opened.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        flag(path, f"not a whole torch file ({error})")
        return
    if bad is not None:
        flag(path, f"damaged: its member {bad} fails its checksum")


def counting_diverged(rows: list[dict], target: object) -> dict:
    """What :func:`fl.metrics.summarise` drew from the rows of a run that diverged before it stopped counting the
    diverged round's measurement of a non-finite model as an accuracy (the ledger keeps such summaries as they were
    written): that round's accuracy counted in the final, the best and the rounds to the target."""
    accuracies = [r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None]
    reached = next((r["round"] for r in rows if r.get("test_accuracy") is not None and isinstance(target, int | float)
                    and r["test_accuracy"] >= target), None)  # fmt: skip
    return {
        "final_test_accuracy": accuracies[-1] if accuracies else None,
        "best_test_accuracy": max(accuracies) if accuracies else None,
        "rounds_to_target": reached,
        "communication_to_target": next((r.get("communication") for r in rows if r["round"] == reached), None),
    }


def from_rows(rows: list[dict], summary: dict, counted_diverged: bool = False) -> dict:
    """What :func:`fl.metrics.summarise` draws from a run's metrics rows, for the keys ``summary`` has (its target
    accuracy is the summary's), as the summary stores it (NaN as null); ``counted_diverged``: as it drew them
    before a diverged round's accuracy stopped counting (:func:`counting_diverged`)."""
    target = summary.get("target_accuracy")
    reached = rounds_to_target(rows, target) if isinstance(target, int | float) else None
    estimates = [r["estimates"] for r in rows if isinstance(r.get("estimates"), dict)]
    drawn = {
        "rounds": rows[-1]["round"],
        **accuracy_summary(rows),
        "communication_total": rows[-1].get("communication", 0),
        "estimates_mean": {
            key: float(np.mean([e[key] for e in estimates if key in e]))
            for key in ESTIMATES
            if any(key in e for e in estimates)
        },
        **{key: float(sum(r.get(key, 0.0) for r in rows)) for key in ("seconds_local", "seconds_method")},
    }
    if isinstance(target, int | float):
        drawn["rounds_to_target"] = reached
        drawn["communication_to_target"] = next((r.get("communication") for r in rows if r["round"] == reached), None)
    if counted_diverged:
        earlier = counting_diverged(rows, target)
        drawn |= {key: value for key, value in earlier.items() if key in drawn}
    return {key: to_json(value) for key, value in drawn.items() if key in summary}


def same(ours: object, theirs: object) -> bool:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same(ours[k], theirs[k]) for k in ours)
    numbers = (int, float)
    if isinstance(ours, numbers) and isinstance(theirs, numbers) and not isinstance(theirs, bool):
        return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12)
    return ours == theirs


def disagreements(rows: list[dict], summary: dict) -> list[tuple[str, object, object]]:
    """(key, from the rows, in the summary) of every summary number that the rows do not give."""
    found = [
        (key, ours, summary[key]) for key, ours in from_rows(rows, summary).items() if not same(ours, summary[key])
    ]
    if found and any(r.get("diverged") for r in rows):  # a diverged run's summary as fl.run wrote it before
        earlier = from_rows(rows, summary, counted_diverged=True)
        if all(same(ours, summary[key]) for key, ours in earlier.items()):
            return []
    return found


def children(folder: Path, flag: Flag, holds: str) -> list[Path]:
    """What the ledger's folder ``folder`` holds, sorted (none where it is absent; a file in its place flagged)."""
    if folder.exists() and not folder.is_dir():
        flag(folder, f"stray file ({folder.name}/ is a folder of {holds})")
    return sorted(folder.iterdir()) if folder.is_dir() else []


def quality_entries(folder: Path, flag: Flag) -> None:
    """``quality/<generator>-<dataset>-seed<S>[-steps<N>][-sets<sha>].json``: each a whole report
    (:func:`quality_entry`)."""
    for path in children(folder, flag, "synthetic-set quality reports"):
        quality_entry(path, flag)


def quality_entry(path: Path, flag: Flag, named: bool = True) -> None:
    """A whole report of :mod:`fl.quality` whose fractions lie in [0, 1] and (``named``: in the ledger) whose file's
    name agrees with its contents (:func:`fl.quality.report_name`)."""
    if not path.is_file() or path.is_symlink() or path.suffix != ".json":
        flag(path, f"stray {kind(path)} ({QUALITY}/ holds only the JSON reports of python -m fl.quality)")
        return
    try:
        report = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        flag(path, "not JSON (cut short or damaged)")
        return
    if not isinstance(report, dict):
        flag(path, "not a quality report (not a JSON object)")
        return
    wrong = [k for k, t in QUALITY_KEYS.items() if not isinstance(report.get(k), t if t is not float else (int, float))]
    if wrong:
        flag(path, f"not a whole quality report ({wrong[0]} missing or of another type)")
        return
    if not isinstance(report.get("min_steps", 0), int):
        flag(path, "not a whole quality report (min_steps of another type)")
        return
    if named and path.name != report_name(report):
        flag(path, f"names another report than it holds ({report_name(report)})")
    fractions = [report[k] for k in ("noise_fraction", "label_agreement", "synthetic_trained_accuracy",
                                     "real_trained_accuracy")] + list(report["noise_by_client"])  # fmt: skip
    if not all(isinstance(f, (int, float)) and 0 <= f <= 1 for f in fractions):
        flag(path, "a fraction outside [0, 1] (edited?)")


def bench_entries(folder: Path, flag: Flag) -> None:
    """``bench/<date>-<device>/``: each a gpu-bench record (:func:`bench_entry`)."""
    for entry in children(folder, flag, "gpu-bench records"):
        bench_entry(entry, flag)


def bench_entry(entry: Path, flag: Flag) -> None:
    """A folder holding a whole ``gpu.json`` of ``scripts/gpu-bench.sh`` (more JSON of the bench beside it, e.g. an
    earlier call's) and text files (its logs, a note); nothing else."""
    if not entry.is_dir() or entry.is_symlink():
        flag(entry, f"stray {kind(entry)} ({BENCH}/ holds a folder per gpu-bench)")
        return
    if not (entry / "gpu.json").is_file():
        flag(entry / "gpu.json", "missing: a gpu-bench record holds its gpu.json")
    for path in sorted(entry.iterdir()):
        if not path.is_file() or path.is_symlink() or path.suffix not in (".json", *BENCH_TEXT):
            flag(path, f"stray {kind(path)} (a gpu-bench record holds its JSON, logs and notes)")
        elif path.suffix == ".json":
            try:
                record = json.loads(path.read_text())
            except (ValueError, UnicodeDecodeError):
                flag(path, "not JSON (cut short or damaged)")
                continue
            wrong = [k for k, t in BENCH_KEYS.items() if not isinstance(record, dict) or
                     not isinstance(record.get(k), t)]  # fmt: skip
            if wrong:
                flag(path, f"not a whole gpu-bench record ({wrong[0]} missing or of another type)")


def simulator_scale_problem(summary: dict, scale: str) -> str | None:
    """Why a simulator's summary cannot stand for the artefacts' ``scale``: a run on the reduced grid of ``--quick``
    (its ``"quick"``) is no cpu or paper run, whatever preset it started from."""
    if scale != "quick" and summary.get("quick") is True:
        return f"a quick run (--quick, a reduced grid) cannot stand for the {scale} scale"
    return None


def simulator_entries(sims: Path, flag: Flag) -> None:
    """``sims/<run>/<scale>/``: a simulator's summary and its ledger.json, for the runs the artefacts read."""
    if not sims.exists():
        return
    if not sims.is_dir():
        flag(sims, "stray file (sims/ is a folder of simulator summaries)")
        return
    runs = sorted(set(SIMS.values()))
    for run in sorted(sims.iterdir()):
        if run.name not in runs or not run.is_dir():
            flag(run, f"stray {kind(run)} (sims/ holds only {', '.join(runs)})")
            continue
        for entry in sorted(run.iterdir()):
            if entry.name not in SCALES or not entry.is_dir():
                flag(entry, f"stray {kind(entry)} (sims/{run.name}/ holds only the scales {', '.join(SCALES)})")
                continue
            for child in sorted(entry.iterdir()):
                if child.name not in ("summary.json", ENTRY) or kind(child) == "folder":
                    flag(child, f"stray {kind(child)} (a simulator entry keeps only summary.json and {ENTRY})")
            summary = json_object(entry / "summary.json", flag)
            said = simulator_scale_problem(summary, entry.name) if summary is not None else None
            if said:
                flag(entry / "summary.json", said)
            json_object(entry / ENTRY, flag)


# --- the manifest: every entry of the ledger and the sha256 of each of its files -------------------------------------

ENTRY_GROUPS = (RUNS, NAMED, QUALITY, BENCH)  # <group>/<name> is an entry; and sims/<run>/<scale>
LEFTOVER = (".adding", ".replaced")  # what an interrupted `ledger add` leaves beside an entry: flagged, no entry


def entries_on_disk(ledger: Path) -> dict[str, Path]:
    """The ledger's entries by their name in the manifest (their path in the ledger, ``/``-separated):
    ``_runs/<key>``, ``runs/<name>``, ``sims/<run>/<scale>``, ``quality/<report>.json``, ``bench/<record>``. Whatever
    else lies in these folders is an entry too (the check names it a stray as well), but a leftover of an interrupted
    ``ledger add``; nothing is followed through a link."""
    found: dict[str, Path] = {}
    for group in ENTRY_GROUPS:
        folder = ledger / group
        for child in folder.iterdir() if folder.is_dir() and not folder.is_symlink() else ():
            if not child.name.endswith(LEFTOVER):
                found[f"{group}/{child.name}"] = child
    sims = ledger / "sims"
    for run in sims.iterdir() if sims.is_dir() and not sims.is_symlink() else ():
        for scale in run.iterdir() if run.is_dir() and not run.is_symlink() else ():
            found[f"sims/{run.name}/{scale.name}"] = scale
    return dict(sorted(found.items()))


def entry_digests(entry: Path) -> str | dict[str, str]:
    """What the manifest records of an entry: a file's sha256 (a quality report), or a folder's files (every plain
    file under it, by its ``/``-separated path in it) with the sha256 of each; links are neither read nor listed."""
    if entry.is_file() and not entry.is_symlink():
        return file_sha256(entry)
    files = {}
    for path in sorted(entry.rglob("*")) if entry.is_dir() and not entry.is_symlink() else ():
        if path.is_file() and not path.is_symlink() and not any(p.is_symlink() for p in path.parents):
            files[path.relative_to(entry).as_posix()] = file_sha256(path)
    return files


def manifest_of(ledger: Path) -> dict[str, str | dict[str, str]]:
    """Every entry of the ledger as it is (:func:`entries_on_disk`) -> :func:`entry_digests`."""
    return {name: entry_digests(path) for name, path in entries_on_disk(ledger).items()}


def manifest_text(entries: dict[str, str | dict[str, str]]) -> str:
    """The manifest file: one JSON object, its keys sorted and one file a line, so that ``git diff`` of it shows
    each entry and file added, removed or changed."""
    about = (f"every entry of the run ledger and the sha256 of each of its files; written by figures ledger add (and "
             f"{SEAL}), checked by figures check")  # fmt: skip
    return json.dumps({"about": about, "entries": entries, "format": 1}, indent=1, sort_keys=True) + "\n"


ENTRY_NAME = re.compile(rf"(?:(?:{re.escape(RUNS)}|{NAMED}|{QUALITY}|{BENCH})/[^/]+|sims/[^/]+/[^/]+)")


def read_manifest(ledger: Path) -> dict[str, str | dict[str, str]] | None:
    """The entries the ledger's manifest records (None: the ledger has no manifest); InputError (one line) when the
    file is no manifest: not JSON, not its shape, an entry name outside the ledger's folders."""
    path = ledger / MANIFEST
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise InputError(f"{path}: not a plain file (a link?); the ledger's manifest is one")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{path}: not JSON (cut short or damaged)") from None
    entries = manifest.get("entries") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict) or manifest.get("format") != 1:
        raise InputError(f"{path}: not a ledger manifest (format 1 with its entries)")
    for name, record in entries.items():
        whole = isinstance(record, str) or (
            isinstance(record, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in record.items())
        )
        if not ENTRY_NAME.fullmatch(name) or ".." in name.split("/") or not whole:
            raise InputError(f"{path}: its entry {name!r} is not one of a ledger's entries with its files' digests")
        if isinstance(record, dict) and any(".." in f.split("/") or f.startswith("/") for f in record):
            raise InputError(f"{path}: its entry {name!r} names a file outside it")
    return entries


def manifest_problems(ledger: Path, flag: Flag) -> None:
    """The ledger against its manifest, one problem per path: an entry on disk the manifest does not list (put
    there by hand), one it lists that is gone (deleted, whether or not an artefact reads it), a file added to,
    missing from or edited in an entry since ``ledger add`` recorded it; a ledger with entries and no manifest, or
    a manifest that is not one."""
    try:
        recorded_entries = read_manifest(ledger)
    except InputError as error:
        flag(ledger / MANIFEST, str(error).removeprefix(f"{ledger / MANIFEST}: "))
        return
    here = entries_on_disk(ledger)
    if recorded_entries is None:
        if here:
            flag(ledger / MANIFEST, f"missing: the ledger's {len(here)} entries are listed nowhere (written by "
                 f"figures ledger add; {SEAL} writes one for a ledger whose check passes otherwise)")  # fmt: skip
        return
    for name in sorted(set(recorded_entries) - set(here)):
        flag(ledger / name, "missing: the ledger's manifest lists it (a deleted entry?)")
    for name in sorted(set(here) - set(recorded_entries)):
        flag(here[name], "not in the ledger's manifest (put there by hand, not by figures ledger add?)")
    for name in sorted(set(here) & set(recorded_entries)):
        entry, record, found = here[name], recorded_entries[name], entry_digests(here[name])
        if isinstance(record, str) != isinstance(found, str):
            what = "a file" if isinstance(record, str) else "a folder"
            flag(entry, f"the ledger's manifest lists it as {what} (replaced by hand?)")
        elif isinstance(record, str):
            if found != record:
                flag(entry, EDITED)
        else:
            for file in sorted(set(record) - set(found)):
                flag(entry / file, DELETED)
            for file in sorted(set(found) - set(record)):
                flag(entry / file, PLANTED)
            for file in sorted(set(found) & set(record)):
                if found[file] != record[file]:
                    flag(entry / file, EDITED)
