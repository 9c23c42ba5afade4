"""What a lease brings back (records, DDPM sets, unfinished runs' state by value) and a previous lease's files in."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fl.campaign.status import rounds_left, store_path
from fl.records.lease import (
    LEASE_FILE,
    RECORD_FILES,
    RECORDS,
    SETS,
    STATE,
    MiB,
    campaign_status,
    extract_state,
    lease_files,
    read_archive,
    write_archives,
)
from theory.errors import InputError


@dataclass
class Packed:
    """What one pack left in $OUT: the files, the runs whose state is in them, the runs that restart and why."""

    files: list[Path]
    resumable: list[str]
    restart: dict[str, str]
    notes: list[str]


def limits() -> dict[str, int]:
    mib = {key: float(os.environ.get(f"CAMPAIGN_{key.upper()}_MIB") or default)
           for key, default in (("max_file", 15), ("max_total", 60), ("state", 60))}  # fmt: skip
    return {**{k: int(v * MiB) for k, v in mib.items()}, "max_files": int(os.environ.get("CAMPAIGN_MAX_FILES") or 8)}


def read_files(folder: Path, names: list[str], prefix: str) -> list[tuple[str, bytes]]:
    """(prefix/name, bytes) of the files of ``folder`` that exist, read in the order given (a checkpoint before
    the metrics: the rows then reach at least its round, and a resume drops the rows after it)."""
    found = []
    for name in names:
        try:
            found.append((f"{prefix}/{name}", (folder / name).read_bytes()))
        except FileNotFoundError:
            continue
    return found


def records(store: Path) -> list[list[tuple[str, bytes]]]:
    """The records archive's groups: each run's records, the logs, the campaign's status."""
    runs = [run for run in sorted((store / "runs").glob("*")) if run.is_dir() and "." not in run.name]
    groups = [read_files(run, list(RECORD_FILES), f"runs/{run.name}") for run in runs]
    logs = sorted(p.name for p in (store / "logs").glob("*") if p.is_file())
    groups.append(read_files(store / "logs", logs, "logs"))
    groups.append(read_files(store / "campaign", ["status.json"], "campaign"))
    return [g for g in groups if g]


def states(status: dict, store: Path) -> tuple[list[tuple[str, list]], dict[str, str]]:
    """The state groups of the unfinished runs (and of the finished runs whose kept checkpoint an unfinished run
    still starts from), by value: those kept sources first, then the runs nearest to finishing (the fewest rounds
    left), then priority; and the unfinished runs whose state cannot come back, with why."""
    rows = status["tasks"]
    kept: dict[str, list[str]] = {}
    for row in rows:
        if row["needs"] and row["after"] and row["state"] != "done":
            kept.setdefault(row["after"], []).append(row["needs"].rsplit("/", 1)[1])
    groups, restart = [], {}
    for row in sorted(rows, key=lambda r: r["priority"]):
        folder = store / row["run"] if row["run"] else None
        if folder is None or not folder.is_dir():
            continue
        finished = (folder / "summary.json").exists()
        wanted = list(dict.fromkeys(kept.get(row["name"], [])))  # one copy for the several arms it starts
        if finished and not wanted:
            continue
        if not row["portable"]:
            if not finished:
                size = sum(p.stat().st_size for p in folder.glob("checkpoint*.pt")) / MiB
                restart[row["name"]] = (f"its clients' optimiser moments ({size:.0f} MiB of checkpoints) cannot come "
                                        "back: restarts from round 1")  # fmt: skip
            continue
        if not finished and not (folder / "checkpoint.pt").exists() and not wanted:
            restart[row["name"]] = "no checkpoint yet: starts over"
            continue
        names = [] if finished else ["checkpoint.pt"]
        names += [*wanted, "config.json", "provenance.json", "init_from.txt", "metrics.jsonl"]
        names += ["summary.json"] if finished else []
        value = (0 if finished else 1, rounds_left(folder), row["priority"])
        groups.append((value, row["name"], read_files(folder, names, row["run"])))
    # by value: a finished run's kept state that others start from first, then the runs nearest to finishing
    return [(name, files) for _, name, files in sorted(groups, key=lambda g: g[0])], restart


def pack_sets(store: Path, out: Path, max_files: int, max_bytes: int, max_file: int) -> tuple[list[Path], list[str]]:
    """The DDPM sets trained in this lease (not those unpacked from an earlier one: they came home already) packed
    by fl.synthesis.pack into ``out``, as many folders as ``max_files`` files and ``max_bytes`` hold; a note for
    those left out. pack works in a folder of its own (it keeps a record of what it wrote there, which must not
    come back as a ninth file) from a view of the chosen folders (hard links to their sets and metadata)."""
    cache, chosen, notes = store / "synthetic", [], []
    if cache.is_dir() and max_files > 0:
        from fl.synthesis.fedssyn import PACKED_FILE
        from fl.synthesis.pack import finished_folders, pack

        folders, _ = finished_folders(cache, "ddpm")
        fresh = [f for f in folders if not (cache / f.name / PACKED_FILE).exists()]
        room, used = min(max_bytes, max_files * max_file) - max_files * 65536, 0  # manifests, end blocks
        for folder in fresh:
            if used + folder.size <= room:
                chosen.append(folder)
                used += folder.size
        notes = [f"{len(fresh) - len(chosen)} DDPM folders' sets left out: no room"] if len(chosen) < len(fresh) else []
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as work:
        while chosen:
            view, packed = Path(work) / f"view{len(chosen)}", Path(work) / f"out{len(chosen)}"
            for folder in chosen:
                (view / folder.name).mkdir(parents=True)
                for name, path in folder.files.items():
                    link_or_copy(path, view / folder.name / name)
            written, _ = pack(view, packed, SETS, max_file, "ddpm")
            if len(written) <= max_files and sum(p.stat().st_size for p in written) <= max_bytes:
                break
            chosen.pop()
            notes = [f"{len(fresh) - len(chosen)} DDPM folders' sets left out: no room"]
        for path in written:
            shutil.move(path, out / path.name)
    for old in out.glob(f"{SETS}*.tar"):  # only what pack writes: SETS.tar, SETS-<k>.tar
        if old.name not in {p.name for p in written} and re.fullmatch(rf"{re.escape(SETS)}(-[0-9]+)?\.tar", old.name):
            old.unlink()
    return [out / p.name for p in written], notes


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def pack(status: dict | None, store: Path, out: Path) -> Packed:
    """Everything that comes back, into ``out``: the records, the DDPM sets, the unfinished runs' state by priority,
    within :func:`limits`."""
    limit = limits()
    groups = records(store)
    written, left = write_archives(
        groups, out, RECORDS, limit["max_file"], limit["max_files"], limit["max_total"], compress=True
    )
    notes = [f"{len(left)} records groups did not fit"] if left else []
    files_left = limit["max_files"] - len(written)
    bytes_left = limit["max_total"] - sum(p.stat().st_size for p in written)
    sets, more = pack_sets(store, out, files_left, bytes_left, limit["max_file"])
    written, notes = written + sets, notes + more
    files_left -= len(sets)
    bytes_left -= sum(p.stat().st_size for p in sets)
    if status is None:
        return Packed(written, [], {}, notes)
    run_groups, restart = states(status, store)
    lease = [(LEASE_FILE, json.dumps({"store": str(store), "packed": time.time()}).encode())]
    state_files, left = write_archives(
        [group for _, group in run_groups], out, STATE, limit["max_file"], max(0, files_left),
        min(limit["state"], bytes_left), every=lease,
    )  # fmt: skip
    for k in left:
        restart[run_groups[k][0]] = "no room in what comes back: starts over (or from the state that came back before)"
    resumable = [name for k, (name, _) in enumerate(run_groups) if k not in left]
    return Packed(written + state_files, resumable, restart, notes)


def finished_earlier(store: Path) -> set[str]:
    """The tasks that finished in earlier leases (``campaign/previous.json``, written by :func:`unpack`)."""
    path = store / "campaign" / "previous.json"
    if not path.exists():
        return set()
    try:
        done = json.loads(path.read_text())["done"]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError):
        raise InputError(f"{path}: not the record of earlier leases' tasks (cut or damaged); remove it") from None
    if not isinstance(done, list) or not all(isinstance(name, str) for name in done):
        raise InputError(f"{path}: its 'done' is not a list of task names; remove it")
    return set(done)


def unpack(files: list[Path]) -> int:
    """A previous lease's files into the store: the state archives' runs, the DDPM sets into ``synthetic/``, and
    from the records the tasks that finished there (``campaign/previous.json``: not run again)."""
    store = store_path()
    kinds = lease_files(files)
    done = finished_earlier(store)
    for archive in kinds["records"]:
        status = campaign_status(read_archive(archive), archive)
        done |= {str(row.get("name")) for row in status.get("tasks", []) if row.get("state") == "done"}
    (store / "campaign").mkdir(parents=True, exist_ok=True)
    (store / "campaign" / "previous.json").write_text(json.dumps({"done": sorted(done)}))
    print(f"{len(done)} tasks finished in earlier leases")
    for archive in kinds["state"]:
        print("\n".join(extract_state(archive, store)))
    if kinds["sets"]:
        from fl.synthesis.pack import unpack as unpack_sets

        folders = unpack_sets(kinds["sets"], store / "synthetic")
        print(f"{len(folders)} generator folders unpacked into {store / 'synthetic'}")
    for path in kinds["other"]:
        print(f"{path}: not a lease archive; left alone")
    return 0
