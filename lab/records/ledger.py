"""The run ledger: the small records of every run behind a number in results/REPORT.md, committed under
``results/ledger/`` so that every table of the report is rebuilt from what the repository ships, offline
(``python -m figures ledger add RUN_DIR...``, ``ledger list``; ``figures check`` / ``report`` read it).

Its layout is a run store's, so ``python -m figures NAME --runs results/ledger`` reads it:

- ``_runs/<key>/``: the runs of the FL artefacts (table1, fig3-5, dp, theory-fl, methods), named by
  :func:`lab.records.keys.run_key`, the hash of the run's config (a run comes in under its key, whatever store it
  ran in);
- ``runs/<name>/``: the experiment scripts' runs (FedCOG, DynaFed, HFMDs), named as the scripts name them;
- ``sims/<artefact>/<scale>/summary.json``: the simulators' summaries (fig2, which lemma1 reads too; figB2);
- ``quality/<generator>-<dataset>-seed<S>[-steps<N>][-sets<sha>].json``: :mod:`fl.quality`'s reports of synthetic sets;
- ``bench/<date>-<device>/``: ``scripts/gpu-bench.sh``'s ``gpu.json`` on a device and its logs (the lease plan's
  rates: ``python -m lab.campaign plan``; the report's ``gpu-bench`` block).

Each run keeps only :data:`KEPT` (config, metrics, summary, provenance, init_from, post-hoc estimates, DynaFed's
saved synthesis) and ``ledger.json`` (where it came from, when, on which device, the code's commit, and the sha256
of every file it keeps and of itself, so that ``figures check`` sees any later edit); never checkpoints, synthetic
sets or images. No file may exceed 2 MB and the ledger 50 MB. The ledger holds a ``.ledger`` mark: builds on it read
and never train. Its ``manifest.json`` lists every entry with the sha256 of each of its files
(:func:`lab.records.check.manifest_problems`): every add records its entry there under the ledger's lock
(:func:`ledger_lock`), and ``ledger seal`` (:func:`seal`) writes it for a ledger whose check passes otherwise.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fl.config import from_dict, migrate
from fl.metrics import read_metrics
from fl.plugins import importing_nothing
from fl.quality import report_name
from lab.records.check import (
    BENCH,
    ENTRY,
    KEPT,
    LEFTOVER,
    MANIFEST,
    MAX_FILE,
    MAX_TOTAL,
    QUALITY,
    SIMS,
    bench_entry,
    builtins_only,
    disagreements,
    entry_digests,
    entry_problems,
    json_rows,
    manifest_of,
    manifest_text,
    plugins_named,
    quality_entry,
    read_manifest,
    recorded,
    sealed,
    simulator_scale_problem,
    verify,
)
from lab.records.keys import LEDGER_MARK, RUNS, SCALES, run_key
from theory.cli import format_table
from theory.errors import InputError
from theory.output import fsync_path, read_object, refuse_link, replace_durably, write_text_atomically

NO_IMPORT = "ledger add compares a run's config with its entry's and runs none of the code they name"


def ensure(ledger: Path) -> None:
    is_ledger(ledger, may_create=True)
    ledger.mkdir(parents=True, exist_ok=True)
    refuse_link(ledger / LEDGER_MARK, "the ledger's mark")  # touch() would follow a planted link
    (ledger / LEDGER_MARK).touch()


def refuse_links_to(dest: Path, ledger: Path) -> None:
    """InputError (one line) when the ledger's mark, ``dest`` (an entry), a folder between the ledger and it
    (``runs``, ``_runs``, ``sims/fig2``) or a file in the entry is a symbolic link: an add never reads, writes,
    moves or empties through one (the ledger's check names any link in it as damage)."""
    refuse_link(ledger / LEDGER_MARK, "the ledger's mark")
    inside = dest.relative_to(ledger)
    for part in [*reversed(inside.parents), inside][1:]:
        refuse_link(ledger / part, "in the ledger,")
    for path in sorted(dest.iterdir()) if dest.is_dir() else ():
        refuse_link(path, "in the ledger's entry,")


def is_ledger(ledger: Path, may_create: bool = False) -> None:
    """InputError (one line) unless ``ledger`` is a run ledger (its ``.ledger`` mark), or, with ``may_create``, a
    folder that does not exist yet or is empty: a folder of other files never becomes one. A link at the mark is
    never one (:func:`theory.output.refuse_link`)."""
    refuse_link(ledger / LEDGER_MARK, "the ledger's mark")
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
    """The config's identity as stores compare it: no speed-only keys, no ``method.cache_dir``. Read, never run: a
    plug-in the config names (a path that came with the data) is compared by its path and table, never imported
    (:func:`fl.plugins.importing_nothing`, as the ledger's check reads configs); its code is provenance's."""
    try:
        with importing_nothing(NO_IMPORT):
            tree = migrate(json.loads(json.dumps(tree)))
            named = plugins_named(tree)
            config = from_dict(builtins_only(tree, named))
    except (InputError, TypeError, ValueError, AttributeError, KeyError) as error:
        raise InputError(f"{where}: its config.json is not a valid run config ({error})") from None
    found = config.identity()
    found["method"].pop("cache_dir", None)
    for key, spec in named.items():  # the paths (and a plug-in method's or algorithm's own keys) as recorded
        section, name = key.split(".")
        if section in ("method", "algorithm"):
            found[section] = {k: v for k, v in tree[section].items() if k != "cache_dir"}
        else:
            found[section][name] = spec
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
        said = simulator_scale_problem(read_object(run / "summary.json", "summary.json"), scale)
        if said:
            raise InputError(f"{run}: refused, {said}")
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
        for key in ("code_version", "synthetic_sha256", "plugins"):  # plugins: the hash of their code at the start
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
    (:func:`lab.records.check.disagreements`). A run older than these records is checked as far as it has them."""
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
    ledger would pass its budget. A run added before replaces only what ``add`` wrote of its entry (:data:`KEPT`,
    ``ledger.json``): anything else a user keeps there (a NOTES.md) stays with the entry, and the folders ``add``
    works in are its own (:func:`own_folder`), never a user's ``NAME.adding`` or ``NAME.replaced``. ``run`` may
    also be a quality report of :mod:`fl.quality` or a gpu-bench record (:func:`add_record`). The entry is
    recorded in the ledger's manifest (:func:`record_entries`), all under the ledger's lock (:func:`ledger_lock`);
    ``run`` may be relative (``.`` inside a run folder)."""
    run = Path(os.path.abspath(Path(run).expanduser()))  # "." or "..": the folder's own name, never an empty one
    if not run.name:
        raise InputError(f"{run}: not a run folder (a run's folder has a name)")
    with contextlib.ExitStack() as held:
        held.enter_context(ledger_lock(ledger))  # nothing to lock yet for a new ledger: taken once it is made
        return adding(run, ledger, device, git, note, held)


def adding(
    run: Path, ledger: Path, device: str | None, git: str | None, note: str | None, held: contextlib.ExitStack
) -> str:
    """:func:`add`'s work, ``held`` the stack that holds the ledger's lock."""
    if run.is_file() or is_bench_record(run):
        return add_record(run, ledger, held)
    if not run.is_dir():
        raise InputError(f"{run}: no such run folder")
    for name in KEPT:  # read and copied only as plain files: a FIFO would block, a link read another file
        path = run / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise InputError(f"{path}: not a plain file (a link, a FIFO, a device or a folder); refused")
    is_ledger(ledger, may_create=True)
    read_manifest(ledger)  # a damaged manifest is never written over: refused before anything is written
    dest = destination(run, ledger)
    refuse_links_to(dest, ledger)  # before anything is read from or written to the entry
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
    written_before = [dest / name for name in WRITTEN if (dest / name).is_file()]
    grown = sum(f.stat().st_size for f in files) - sum(f.stat().st_size for f in written_before)
    if size(ledger) + grown > MAX_TOTAL:
        raise InputError(f"{run}: refused, the ledger would pass its {MAX_TOTAL // 2**20} MB")
    if dest.exists() and all((dest / f.name).exists() and (dest / f.name).read_bytes() == f.read_bytes()
                             for f in files):  # fmt: skip
        return f"{run}: already in the ledger as {dest} (unchanged{recorded_again(dest, ledger, held)})"
    provenance = read_object(run / "provenance.json", "provenance") if (run / "provenance.json").exists() else {}
    record = {
        "source": str(run.resolve()),
        "added": datetime.date.today().isoformat(),
        "device": device or provenance.get("device"),
        "git": git or provenance.get("git"),
        "note": note,
    }
    ensure(ledger)
    held.enter_context(ledger_lock(ledger))  # the one a new ledger's first add takes
    dest.parent.mkdir(parents=True, exist_ok=True)
    for label in ("adding", "replaced"):  # what an interrupted add of this entry left (its marker says so)
        for folder in dest.parent.glob(f"{glob.escape(dest.name)}.*.{label}"):
            if re.fullmatch(rf"{re.escape(dest.name)}\.[a-z0-9_]{{8}}\.{label}", folder.name):
                remove_own(folder)
    staging = own_folder(dest, "adding")
    for f in files:
        shutil.copy2(f, staging / f.name)
        fsync_path(staging / f.name)
    record = sealed(record, [staging / f.name for f in files])  # digests: an edit after the add shows (check)
    write_text_atomically(staging / ENTRY, json.dumps(record, indent=2) + "\n")  # fsyncs staging too
    if not is_simulator_run(run):  # the check's own rules, before the entry is in place: never "added", then rejected
        problems = entry_problems(staging, dest, ledger, ignored=(OURS,))
        if problems:
            remove_own(staging)
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(f"{run}: refused, figures check would reject it: {problems[0]}{more}; nothing was written")
    old = None
    if dest.exists():
        (staging / OURS).unlink()  # from here on staging may hold the user's files: never removed as add's own
        for path in sorted(dest.iterdir()):  # a user's files in the entry stay with it
            if path.name not in WRITTEN:
                os.replace(path, staging / path.name)
        old = own_folder(dest, "replaced")
        os.replace(dest, old / dest.name)
    else:
        (staging / OURS).unlink()
    staging.rename(dest)
    fsync_path(dest.parent, folder=True)  # the entry's name is on disk before the old one goes
    if old is not None:
        remove_own(old)  # the entry before: only what add wrote (the user's files moved on with the entry)
    record_entries(ledger, [dest])
    return f"{run}: added as {dest}"


_HELD: set[str] = set()  # the ledgers whose lock this process holds (:func:`ledger_lock` nests)


@contextlib.contextmanager
def ledger_lock(ledger: Path) -> Iterator[None]:
    """Hold the ledger's lock: an exclusive ``flock`` on its folder (no file of its own in the ledger; the OS
    releases it when the process dies), so that two adds (a lease's intake and a script's ``ledger add``) never
    change one entry or the manifest at once. A second ``ledger_lock`` of the same ledger in this process nests;
    a folder that does not exist yet has nothing to lock (:func:`add` takes the lock once it made the ledger)."""
    key = os.path.realpath(ledger)
    if key in _HELD or not ledger.is_dir():
        yield
        return
    handle = os.open(ledger, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _HELD.add(key)
        yield
    finally:
        _HELD.discard(key)
        os.close(handle)


def entry_name(entry: Path, ledger: Path) -> str:
    """An entry's name in the manifest: its ``/``-separated path in the ledger."""
    return entry.relative_to(ledger).as_posix()


def write_manifest(ledger: Path, entries: dict) -> None:
    """The ledger's manifest (:func:`lab.records.check.manifest_text`), written whole and fsynced."""
    replace_durably(ledger / MANIFEST, lambda tmp: tmp.write_text(manifest_text(dict(sorted(entries.items())))))


def record_entries(ledger: Path, entries: list[Path]) -> None:
    """The ``entries`` as they are now into the ledger's manifest (one that is gone, out of it); every other entry
    stays as the manifest recorded it. Under the ledger's lock (the caller's)."""
    manifest = read_manifest(ledger) or {}
    for entry in entries:
        name = entry_name(entry, ledger)
        if entry.exists():
            manifest[name] = entry_digests(entry)
        else:
            manifest.pop(name, None)
    write_manifest(ledger, manifest)


def recorded_again(dest: Path, ledger: Path, held: contextlib.ExitStack) -> str:
    """For a run added again unchanged: its entry recorded in the manifest where the manifest lacks it or holds
    other digests (an add cut off before it wrote the manifest), when the entry is still as its ``ledger.json``
    sealed it; the words to say so ("" where nothing was recorded)."""
    manifest = read_manifest(ledger)
    name = entry_name(dest, ledger)
    if manifest is None or manifest.get(name) == entry_digests(dest):
        return ""
    problems: list[str] = []
    recorded(dest, lambda path, what: problems.append(what), KEPT)
    if problems:
        return ""
    held.enter_context(ledger_lock(ledger))
    record_entries(ledger, [dest])
    return f"; now in its {MANIFEST}"


def is_bench_record(folder: Path) -> bool:
    """A gpu-bench record (``scripts/gpu-bench.sh``'s folder): a ``gpu.json`` and no run's config."""
    return folder.is_dir() and (folder / "gpu.json").is_file() and not (folder / "config.json").exists()


def add_record(source: Path, ledger: Path, held: contextlib.ExitStack) -> str:
    """A quality report of :mod:`fl.quality` (a file: ``quality/<its report_name>``) or a gpu-bench record (a
    folder: ``bench/<its name>``) into the ledger and its manifest; InputError (one line, nothing written) when it
    is not whole (the check's own rules), too large, or an entry of its name holds something else. One already at
    its place in the ledger (``fl.quality --out results/ledger/quality/...``) is recorded as it is, unless the
    manifest recorded it otherwise (an edit: never re-recorded; remove the entry first to replace it)."""
    problems: list[str] = []

    def collect(path: Path, what: str) -> None:
        problems.append(f"{path}: {what}")

    is_ledger(ledger, may_create=True)
    manifest = read_manifest(ledger) or {}
    if source.is_file():
        quality_entry(source, collect, named=False)
        if problems:
            raise InputError(f"{problems[0]}; refused (not a quality report of python -m fl.quality)")
        dest = ledger / QUALITY / report_name_of(source)
        files = [source]
    else:
        if source.name.startswith(".") or source.name.endswith(LEFTOVER):
            raise InputError(f"{source}: refused, a gpu-bench record's folder name may not start with '.' or end in "
                             f"{' or '.join(LEFTOVER)}")  # fmt: skip
        bench_entry(source, collect)
        if problems:
            raise InputError(f"{problems[0]}; refused (not a whole gpu-bench record)")
        dest = ledger / BENCH / source.name
        files = sorted(source.iterdir())
    refuse_links_to(dest, ledger)
    for f in files:
        if f.stat().st_size > MAX_FILE:
            raise InputError(f"{f}: {f.stat().st_size / 2**20:.1f} MB is over the ledger's 2 MB per file")
    name = entry_name(dest, ledger)
    if dest.exists():
        in_place = os.path.samefile(source, dest)
        if in_place and name in manifest and manifest[name] != entry_digests(dest):
            raise InputError(f"{dest}: refused, it differs from what the ledger's {MANIFEST} recorded (edited?); an "
                             "entry is never recorded again as it stands: restore it (git checkout) or remove it "
                             "and add its new version")  # fmt: skip
        if not in_place and entry_digests(source) != entry_digests(dest):
            raise InputError(f"{source}: refused, it differs from the ledger's {dest}; nothing was overwritten "
                             "(remove the entry to replace it)")  # fmt: skip
        if manifest.get(name) == entry_digests(dest):
            return f"{source}: already in the ledger as {dest} (unchanged)"
        ensure(ledger)
        held.enter_context(ledger_lock(ledger))
        record_entries(ledger, [dest])
        return f"{source}: recorded as it is in the ledger's {MANIFEST} ({dest})"
    if size(ledger) + sum(f.stat().st_size for f in files) > MAX_TOTAL:
        raise InputError(f"{source}: refused, the ledger would pass its {MAX_TOTAL // 2**20} MB")
    ensure(ledger)
    held.enter_context(ledger_lock(ledger))
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        replace_durably(dest, lambda tmp: shutil.copyfile(source, tmp))
    else:
        staging = own_folder(dest, "adding")
        for f in files:
            shutil.copyfile(f, staging / f.name)
            fsync_path(staging / f.name)
        (staging / OURS).unlink()
        staging.rename(dest)
        fsync_path(dest.parent, folder=True)
    record_entries(ledger, [dest])
    return f"{source}: added as {dest}"


def report_name_of(path: Path) -> str:
    """A quality report's name in the ledger (:func:`fl.quality.report_name`)."""
    return report_name(read_object(path, "quality report"))


def seal(ledger: Path, rests_on: dict[str, str] | None = None) -> tuple[list[str], str]:
    """Write the manifest of the ledger as it is (:func:`lab.records.check.manifest_of`): for a ledger made before
    the manifest existed, or after a change made by hand on purpose (its ``git diff`` shows it). Only a ledger whose
    check passes on everything else (:func:`lab.records.check.verify`, ``rests_on`` as there): (its problems, "")
    otherwise, nothing written; else ([], what was sealed)."""
    is_ledger(ledger)
    with ledger_lock(ledger):
        problems = verify(ledger, rests_on, manifest=False)
        if problems:
            return problems, ""
        try:
            old = read_manifest(ledger) or {}
        except InputError:  # a damaged manifest is replaced whole
            old = {}
        new = manifest_of(ledger)
        write_manifest(ledger, new)
    changed = sum(1 for name in set(new) & set(old) if new[name] != old[name])
    return [], (f"{ledger / MANIFEST}: {len(new)} entries sealed ({len(set(new) - set(old))} new, {changed} changed, "
                f"{len(set(old) - set(new))} gone; git diff shows them)")  # fmt: skip


WRITTEN = (*KEPT, ENTRY)  # what add writes in an entry (and replaces when the run comes again); nothing else
OURS = ".ledger-add"  # a marker in every folder add makes for itself (staging, the entry set aside)


def own_folder(dest: Path, label: str) -> Path:
    """A new folder beside ``dest``, ``NAME.XXXXXXXX.LABEL`` (made new, so never a user's folder of that name; the
    check names a leftover one), holding add's marker."""
    folder = Path(tempfile.mkdtemp(prefix=f"{dest.name}.", suffix=f".{label}", dir=dest.parent))
    mask = os.umask(0o022)  # mkdtemp's 0700 would become the entry's: a folder as any other of the repository
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    (folder / OURS).write_text("made by figures ledger add; removed when it is done with it\n")
    return folder


def remove_own(folder: Path) -> None:
    """Remove a folder add made (it holds the marker); anything else stays."""
    if folder.is_dir() and not folder.is_symlink() and (folder / OURS).is_file():
        shutil.rmtree(folder)


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
