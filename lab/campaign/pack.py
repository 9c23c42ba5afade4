"""What a lease brings back (records, DDPM sets, unfinished runs' state by value) and a previous lease's files in."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.campaign.status import refuse_linked_folders, rounds_left, store_path
from lab.campaign.volumes import Large, send
from lab.records.lease import (
    LEASE_FILE,
    RECORD_FILES,
    RECORDS,
    SETS,
    STATE,
    MiB,
    campaign_status,
    extract_state,
    gather_volumes,
    lease_files,
    read_archive,
    taken,
    tar_size,
    write_archives,
)
from theory.errors import InputError
from theory.output import file_sha256, replace_durably, write_text_atomically


@dataclass
class Packed:
    """What one pack left in $OUT: the files, the runs whose state is in them (a large state: once every volume has
    gone out, this call included), the runs that restart and why, the notes; and the runs whose state is on its way
    in volumes, each with how many are back and what brings the rest (:mod:`lab.campaign.volumes`)."""

    files: list[Path]
    resumable: list[str]
    restart: dict[str, str]
    notes: list[str]
    partial: dict[str, str] = field(default_factory=dict)


LIMITS = (("max_file", 15), ("max_total", 60), ("state", 60))  # CAMPAIGN_<KEY>_MIB and its default


def limits() -> dict[str, int]:
    """The device tool's limits on what comes back (see :mod:`lab.campaign`): bytes a file, together and of state
    (CAMPAIGN_*_MIB, numbers > 0) and files (CAMPAIGN_MAX_FILES, a whole number >= 1); a value that is none of these
    is an InputError (one line) before anything is packed or removed."""
    found = {}
    for key, default in LIMITS:
        name = f"CAMPAIGN_{key.upper()}_MIB"
        text = os.environ.get(name) or str(default)
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"{name}={text!r}: not a size in MiB (a number > 0); nothing was packed")
        found[key] = int(value * MiB)
    text = os.environ.get("CAMPAIGN_MAX_FILES") or "8"
    if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) < 1:
        raise InputError(
            f"CAMPAIGN_MAX_FILES={text!r}: not a number of files (a whole number >= 1); nothing was packed"
        )
    return {**found, "max_files": int(text)}


PACKED = "packed.json"  # in STORE/campaign: what the packing wrote into each OUT folder


class Written:
    """What the packing wrote into ``out``, recorded in ``STORE/campaign/packed.json`` (each file's bytes and
    SHA-256, per OUT folder): only those files, unchanged since, are written over or removed. Anything else in OUT
    (a user's ``records-2.tgz``, ``ddpm_sets.tar``, a file changed since) is left as it is: it comes back beside
    the lease's files, and counts against the tool's limits."""

    def __init__(self, store: Path, out: Path) -> None:
        refuse_linked_folders(store)  # packed.json is never read or written through a link
        self.path, self.out, self.key = store / "campaign" / PACKED, out, str(out.resolve())
        try:
            every = json.loads(self.path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            every = {}  # none yet, or damaged: nothing in OUT is known to be ours, so nothing is removed
        self.every = every if isinstance(every, dict) else {}
        entries = self.every.get(self.key)
        entries = entries if isinstance(entries, dict) else {}
        self.mine = {name for name, entry in entries.items() if isinstance(name, str) and self.same(name, entry)}

    def same(self, name: str, entry: object) -> bool:
        path = self.out / name
        if not isinstance(entry, dict) or "/" in name or path.is_symlink() or not path.is_file():
            return False
        return entry.get("bytes") == path.stat().st_size and entry.get("sha256") == file_sha256(path)

    def ours(self, path: Path) -> bool:
        return path.parent == self.out and path.name in self.mine

    def others(self) -> list[Path]:
        """What OUT holds that the packing did not write (or that changed since)."""
        return sorted(p for p in self.out.iterdir() if p.name not in self.mine) if self.out.is_dir() else []

    def save(self, written: list[Path]) -> None:
        """Record ``written`` (and the files recorded before that are still there) as the packing's own."""
        entries = {name: self.every[self.key][name] for name in self.mine if (self.out / name).is_file()}
        for path in written:
            entries[path.name] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
        if not entries and not self.path.exists():
            return  # nothing packed (no campaign in the store): the store is not made for the record alone
        self.mine = set(entries)
        self.every[self.key] = entries
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_durably(self.path, lambda tmp: tmp.write_text(json.dumps(self.every, indent=1)))


def linked_part(path: Path, top: Path) -> Path | None:
    """The first of the folders between ``top`` and ``path``, and ``path`` itself, that is a symbolic link; None
    where none is (``top``, the store, may be one: the user's choice of SHUFFLEFL_RUNS)."""
    parts = path.relative_to(top).parts
    for k in range(1, len(parts) + 1):
        step = top.joinpath(*parts[:k])
        if step.is_symlink():
            return step
    return None


def regular_bytes(path: Path) -> bytes | None:
    """The bytes of the regular file ``path``, opened without following a symbolic link (O_NOFOLLOW) and without
    blocking on a pipe; None where there is none. A link or anything but a regular file: OSError ELOOP."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP or path.is_symlink():
            raise OSError(errno.ELOOP, "a symbolic link", str(path)) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.ELOOP, "not a regular file", str(path))
        return handle.read()


def read_files(
    folder: Path, names: list[str], prefix: str, skipped: list[str] | None = None
) -> list[tuple[str, bytes]]:
    """(prefix/name, bytes) of the files of ``folder`` that exist, read in the order given (a checkpoint before
    the metrics: the rows then reach at least its round, and a resume drops the rows after it). A symbolic link
    (or a pipe, a folder) is never followed or read: it is left out and named in ``skipped``."""
    found, skipped = [], skipped if skipped is not None else []
    for name in names:
        try:
            data = regular_bytes(folder / name)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            skipped.append(f"{folder / name} ({error.strerror})")
            continue
        if data is not None:
            found.append((f"{prefix}/{name}", data))
    return found


def records(store: Path, skipped: list[str] | None = None) -> list[list[tuple[str, bytes]]]:
    """The records archive's groups: each run's records, the logs, the campaign's status. Nothing is read through a
    symbolic link (a run folder, ``logs/`` or a file that is one is left out and named in ``skipped``)."""
    skipped = skipped if skipped is not None else []
    folders = {}
    for name in ("runs", "logs", "campaign"):
        link = linked_part(store / name, store)
        if link is not None:
            skipped.append(f"{link} (a symbolic link)")
        folders[name] = None if link is not None else store / name
    groups = []
    for run in sorted(folders["runs"].glob("*")) if folders["runs"] else []:
        if "." in run.name:
            continue
        if run.is_symlink():
            skipped.append(f"{run} (a symbolic link)")
        elif run.is_dir():
            groups.append(read_files(run, list(RECORD_FILES), f"runs/{run.name}", skipped))
    if folders["logs"]:
        logs = sorted(p.name for p in folders["logs"].glob("*") if p.is_symlink() or p.is_file())
        groups.append(read_files(folders["logs"], logs, "logs", skipped))
    if folders["campaign"]:
        groups.append(read_files(folders["campaign"], ["status.json"], "campaign", skipped))
    return [g for g in groups if g]


def on_disk(folder: Path, names: list[str]) -> int:
    """Bytes the regular files ``names`` of ``folder`` would take in a tar (links and the missing count nothing)."""
    paths = [folder / name for name in names]
    return sum(512 + -(-p.stat().st_size // 512) * 512 for p in paths if p.is_file() and not p.is_symlink())


def states(
    status: dict, store: Path, skipped: list[str] | None = None, max_group: int | None = None
) -> tuple[list[tuple[str, list]], list[Large], dict[str, str]]:
    """The state groups of the unfinished runs (and of the finished runs whose kept checkpoint an unfinished run
    still starts from), by value: those kept sources first, then the runs nearest to finishing (the fewest rounds
    left), then priority; those whose files would take more than ``max_group`` bytes in a tar, unread and by value
    too (their state goes in volumes: :mod:`lab.campaign.volumes`); and the unfinished runs whose state cannot come
    back, with why. A run folder reached through a symbolic link, and a file that is one, are never read (named in
    ``skipped``)."""
    rows, skipped = status["tasks"], skipped if skipped is not None else []
    kept: dict[str, list[str]] = {}
    for row in rows:
        if row["needs"] and row["after"] and row["state"] != "done":
            kept.setdefault(row["after"], []).append(row["needs"].rsplit("/", 1)[1])
    groups, large, restart = [], [], {}
    for row in sorted(rows, key=lambda r: r["priority"]):
        folder = store / row["run"] if row["run"] else None
        if folder is None or not folder.is_dir():
            continue
        link = linked_part(folder, store)
        if link is not None:
            skipped.append(f"{link} (a symbolic link)")
            restart[row["name"]] = f"{link} is a symbolic link, never followed: its state did not come back"
            continue
        finished = (folder / "summary.json").is_file() and not (folder / "summary.json").is_symlink()
        wanted = list(dict.fromkeys(kept.get(row["name"], [])))  # one copy for the several arms it starts
        if finished and not wanted:
            continue
        if not finished and not (folder / "checkpoint.pt").exists() and not wanted:
            restart[row["name"]] = "no checkpoint yet: starts over"
            continue
        names = [] if finished else ["checkpoint.pt"]
        names += [*wanted, "config.json", "provenance.json", "init_from.txt", "metrics.jsonl"]
        names += ["summary.json"] if finished else []
        value = (0 if finished else 1, rounds_left(folder), row["priority"])
        if max_group is not None and on_disk(folder, names) > max_group:
            large.append((value, Large(row["name"], row["run"], folder, names)))
            continue
        files = read_files(folder, names, row["run"], skipped)
        if not finished and f"{row['run']}/checkpoint.pt" not in {name for name, _ in files} and not wanted:
            restart[row["name"]] = ("its checkpoint.pt is a symbolic link or not a file, never read: its state did "
                                    "not come back")  # fmt: skip
            continue
        groups.append((value, row["name"], files))
    # by value: a finished run's kept state that others start from first, then the runs nearest to finishing
    by_value = [(name, files) for _, name, files in sorted(groups, key=lambda g: g[0])]
    return by_value, [item for _, item in sorted(large, key=lambda g: g[0])], restart


def pack_sets(
    store: Path, out: Path, max_files: int, max_bytes: int, max_file: int, written_by: Written | None = None,
    skipped: list[str] | None = None,
) -> tuple[list[Path], list[str]]:  # fmt: skip
    """The DDPM sets trained in this lease (not those unpacked from an earlier one: they came home already) packed
    by fl.synthesis.pack into ``out``, as many folders as ``max_files`` files and ``max_bytes`` hold; a note for
    those left out. pack works in a folder of its own (it keeps a record of what it wrote there, which must not
    come back as a ninth file) from a view of the chosen folders (hard links to their sets and metadata). A folder
    reached through a symbolic link, or holding one, is left out (named in ``skipped``): a link is never followed.
    With ``written_by`` (:class:`Written`) only the packing's own files in ``out`` are written over or removed; an
    archive whose name another file holds takes the next free ``ddpm_sets-<k>.tar``."""
    cache, chosen, notes = store / "synthetic", [], []
    skipped = skipped if skipped is not None else []
    link = linked_part(cache, store)
    if link is not None:
        skipped.append(f"{link} (a symbolic link)")
    elif cache.is_dir() and max_files > 0:
        from fl.synthesis.fedssyn import PACKED_FILE
        from fl.synthesis.pack import finished_folders, pack

        folders, _ = finished_folders(cache, "ddpm")
        fresh = []
        for folder in folders:
            linked = [p for p in (cache / folder.name, *folder.files.values()) if p.is_symlink()]
            if linked:
                skipped.append(f"{linked[0]} (a symbolic link: its folder's sets are not packed)")
            elif not (cache / folder.name / PACKED_FILE).exists():
                fresh.append(folder)
        room, used = min(max_bytes, max_files * max_file) - max_files * 65536, 0  # manifests, end blocks
        for folder in fresh:
            if used + folder.size <= room:
                chosen.append(folder)
                used += folder.size
        notes = [f"{len(fresh) - len(chosen)} DDPM folders' sets left out: no room"] if len(chosen) < len(fresh) else []
    ours = written_by.ours if written_by is not None else (lambda path: True)
    written: list[Path] = []
    placed: list[Path] = []
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
            names = (path.name, *(f"{SETS}-{k}.tar" for k in range(1, 10_000)))
            target = next(out / n for n in names if out / n not in placed and not taken(out / n, ours))
            shutil.move(path, target)
            placed.append(target)
    for old in out.glob(f"{SETS}*.tar"):  # only what pack writes: SETS.tar, SETS-<k>.tar, and only the packing's own
        if old not in placed and re.fullmatch(rf"{re.escape(SETS)}(-[0-9]+)?\.tar", old.name) and ours(old):
            old.unlink()
    return placed, notes


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


def pack(status: dict | None, store: Path, out: Path, call: str | None = None) -> Packed:
    """Everything that comes back, into ``out``: the records, the DDPM sets, the unfinished runs' state by priority,
    within :func:`limits` (checked first: a bad value is refused before anything is written or removed); a state too
    large for one archive goes in volumes with the room left, a few each call (:func:`lab.campaign.volumes.send`;
    ``call`` names the device tool's call: every pack of one ``watch`` passes the same, and a pack without one is a
    call of its own). Only the packing's own earlier files are written over or removed (:class:`Written`); what else
    ``out`` holds stays and counts against the limits. A symbolic link in the store is never followed (left out,
    said in the notes)."""
    limit = limits()
    call = call or secrets.token_hex(8)
    refuse_linked_folders(store)  # before OUT is made
    out.mkdir(parents=True, exist_ok=True)
    mine = Written(store, out)
    others = mine.others()
    notes = []
    if others:
        shown = ", ".join(p.name for p in others[:3]) + (", ..." if len(others) > 3 else "")
        notes.append(f"{out} holds {len(others)} files the packing did not write ({shown}): left as they are; they "
                     "come back too and count against the limits")  # fmt: skip
    skipped: list[str] = []
    groups = records(store, skipped)
    files_left = limit["max_files"] - len(others)
    bytes_left = limit["max_total"] - sum(p.lstat().st_size for p in others if p.is_file() and not p.is_symlink())
    written, left = write_archives(
        groups, out, RECORDS, limit["max_file"], max(0, files_left), max(0, bytes_left), compress=True,
        ours=mine.ours,
    )  # fmt: skip
    notes += [f"{len(left)} records groups did not fit"] if left else []
    files_left -= len(written)
    bytes_left -= sum(p.stat().st_size for p in written)
    sets, more = pack_sets(store, out, files_left, bytes_left, limit["max_file"], mine, skipped)
    written, notes = written + sets, notes + more
    files_left -= len(sets)
    bytes_left -= sum(p.stat().st_size for p in sets)
    state_files: list[Path] = []
    resumable, restart, large = [], {}, []
    lease = [(LEASE_FILE, json.dumps({"store": str(store), "packed": time.time()}).encode())]
    state_left = max(0, min(limit["state"], bytes_left))
    if status is not None:
        max_group = limit["max_file"] - 2 * 10240 - tar_size(lease)  # what one archive holds of a run
        run_groups, large, restart = states(status, store, skipped, max_group)
        state_files, left = write_archives(
            [group for _, group in run_groups], out, STATE, limit["max_file"], max(0, files_left), state_left,
            every=lease, ours=mine.ours,
        )  # fmt: skip
        for k in left:
            restart[run_groups[k][0]] = ("no room in what comes back: starts over (or from the state that came back "
                                         "before)")  # fmt: skip
        resumable = [name for k, (name, _) in enumerate(run_groups) if k not in left]
    room = (files_left - len(state_files), state_left - sum(p.stat().st_size for p in state_files), limit["max_file"])
    sent = send(large, lambda item: read_large(item, skipped), store, out, room, lease, call, mine.ours)
    state_files += sent.files
    resumable += sent.complete
    restart |= sent.restart
    mine.save(written + state_files)
    if skipped:
        shown = "; ".join(skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        notes.append(f"{len(skipped)} symbolic links (or other non-files) in the store not packed, never followed: "
                     f"{shown}")  # fmt: skip
    return Packed(written + state_files, resumable, restart, notes, sent.partial)


def read_large(item: Large, skipped: list[str]) -> list[tuple[str, bytes]] | None:
    """The files of a large state (:func:`read_files`), or None where an unfinished run's checkpoint.pt is a link
    or not a file (never read: its state does not come back)."""
    files = read_files(item.folder, item.names, item.run, skipped)
    if "checkpoint.pt" in item.names and f"{item.run}/checkpoint.pt" not in {name for name, _ in files}:
        return None
    return files


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
    from the records the tasks that finished there (``campaign/previous.json``: not run again). Every archive is
    read whole first (:func:`lab.records.lease.read_archive`: sizes, names, no link, hard link, device or name
    twice) before anything is written; each run's state is placed as the intake places it
    (:func:`lab.records.lease.extract_state`: a run here of another config keeps its folder, the lease's state goes
    beside it). A large state's volumes may come over several calls: each call's are checked and gathered in
    ``STORE/campaign/volumes-in/`` (:func:`lab.records.volumes.collect`), and the run is placed once all are there;
    until then it is said to be partial (a later ``unpack`` of the rest completes it)."""
    store = store_path()
    kinds = lease_files(files)
    for archive in kinds["records"] + kinds["state"]:
        read_archive(archive)  # every archive whole before anything is written
    done = finished_earlier(store)
    for archive in kinds["records"]:
        status = campaign_status(read_archive(archive), archive)
        done |= {str(row.get("name")) for row in status.get("tasks", []) if row.get("state") == "done"}
    refuse_linked_folders(store)
    joined, partial = gather_volumes(kinds["volumes"], store / "campaign" / "volumes-in", store)
    (store / "campaign").mkdir(parents=True, exist_ok=True)
    write_text_atomically(store / "campaign" / "previous.json", json.dumps({"done": sorted(done)}))
    print(f"{len(done)} tasks finished in earlier leases")
    for archive in kinds["state"]:
        print("\n".join(extract_state(archive, store)))
    if joined:
        print("\n".join(extract_state(store / "campaign" / "volumes-in", store, joined)))
    for name, line in partial.items():
        print(f"{name}: {line}")
    if kinds["sets"]:
        from fl.synthesis.pack import unpack as unpack_sets

        folders = unpack_sets(kinds["sets"], store / "synthetic")
        print(f"{len(folders)} generator folders unpacked into {store / 'synthetic'}")
    for path in kinds["other"]:
        print(f"{path}: not a lease archive; left alone")
    return 0
