"""A GPU lease's files: the archives ``bash scripts/gpu-campaign.sh`` (lab/campaign) leaves in ``$OUT`` for the
device tool to bring back (at most 8 files of under 16 MiB, 64 MiB together), and bringing them home.

- ``records-1.tgz`` (``records-2.tgz``, ... past 15 MiB): every run's small records (:data:`RECORD_FILES`, what
  the ledger keeps), the logs, and the campaign's status (``campaign/status.json``: each task's state and seconds).
- ``state-1.tar``, ``state-2.tar``, ...: what each unfinished run needs to continue, under ``runs/NAME/``: its
  config, provenance, metrics, ``init_from.txt`` and ``checkpoint.pt`` (server model, algorithm and method state;
  every random draw derives from (seed, round, client), so there is no generator state to keep), and a kept
  ``checkpoint_roundK.pt`` that another unfinished run still starts from; ``lease.json`` names the store they came
  from (an ``init_from.txt`` pointing into it is rewritten to the store they go to).
- ``state-NAME-KEY.01-of-14.vol``, ... and ``state-NAME-KEY.vol.json``: the state of a run too large for one file
  (a DynaFed arm's clients' Adam moments: 206 MB), a state archive of that run alone in volumes
  (:mod:`lab.records.volumes`), a few a call over several calls of the device tool.
- ``ddpm_sets.tar`` (``ddpm_sets-1.tar``, ...): the DDPM synthetic sets (:mod:`fl.synthesis.pack`).

Older leases' ``metrics.tgz`` and ``dsyn.tgz`` read as records.

    python -m figures ledger add --from-lease DIR [DIR...] [--runs STORE] [--cache-dir DIR]

adds every finished run to the ledger (the device its provenance names, else the lease's ``logs/device.txt``),
unpacks the DDPM sets into the generator cache (``STORE/_synthetic`` unless ``--cache-dir``), and puts the unfinished
runs' state into the run store (``STORE/runs/NAME``; STORE is ``--runs``, else ``$SHUFFLEFL_RUNS``, else ``results``),
where ``python -m fl.run --resume STORE/runs/NAME`` or the next lease (``gpu-campaign.sh resume``) continues them.
The records stay in ``STORE/leases/lease-DATE-TIME/`` (the ledger entries' source; an unfinished run's rows, which
``ledger add`` takes by hand where a partial run is wanted). Volumes are gathered in ``STORE/leases/volumes/STEM/``
from every folder given, now or in an earlier intake, and a run's state is placed once all its volumes are there:
pass the folders of the calls that brought them (all at once, or the later ones later).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from fl.config import LATER_DEFAULTS, SPEED_ONLY
from fl.synthesis.pack import unpack
from lab.records.keys import RECORD_FILES, SYNTHETIC
from lab.records.ledger import add
from lab.records.volumes import Collected, collect, stem_of
from theory.errors import InputError
from theory.output import capped_tar, read_object, replace_durably

RECORDS, STATE, SETS = "records", "state", "ddpm_sets"
# the only files a lease's state brings per run (RECORD_FILES and checkpoints), and its records hold
STATE_FILE = re.compile(
    "|".join(re.escape(n) for n in RECORD_FILES if not n.endswith(".pt")) + r"|checkpoint(_round[0-9]+)?\.pt"
    + r"|dynafed_synthesis\.pt"
)  # fmt: skip
RECORDS_FILE = re.compile(
    r"runs/[^/]+/(" + "|".join(re.escape(n) for n in RECORD_FILES) + r")|logs/[^/]+\.(log|txt)|campaign/[^/]+\.json"
)
LEASE_FILE = "lease.json"  # in every state archive: {"store": the device's run store}
MiB = 2**20

Group = list[tuple[str, bytes]]  # files (name in the archive, content) packed together or left out together


def tar_size(group: Group) -> int:
    """Bytes ``group`` takes in a tar: a 512-byte header per file and its content padded to 512."""
    return sum(512 + -(-len(data) // 512) * 512 for _, data in group)


def write_archives(
    groups: Sequence[Group], out: Path, name: str, max_bytes: int, max_files: int, max_total: int,
    compress: bool = False, every: Group = (), ours: Callable[[Path], bool] | None = None,
) -> tuple[list[Path], list[int]]:  # fmt: skip
    """The ``groups`` in order into ``out/NAME-1.tar``, ``NAME-2.tar``, ... (``.tgz`` with ``compress``), each
    archive at most ``max_bytes``, at most ``max_files`` of them and ``max_total`` bytes together (counted before
    compression); a group goes into the first archive with room, and one that fits nowhere is left out whole.
    ``every``: files each archive holds. Each file is written whole before it replaces an older one; older
    ``NAME-k`` files beyond the new ones are removed. With ``ours`` (whether a file in ``out`` is one the caller
    wrote there, e.g. by its record of them) only those are replaced or removed: a ``NAME-k`` that is not is left
    as it is and the next free number taken. Returns the files written and the indices left out."""
    overhead = 2 * 10240 + tar_size(list(every))  # end-of-archive blocks, padding to tar's 10240-byte records
    parts: list[list[int]] = []
    used: list[int] = []
    total, left_out = 0, []
    for k, group in enumerate(groups):
        cost = tar_size(group)
        room = next((p for p in range(len(parts)) if used[p] + cost <= max_bytes), None)
        if room is not None and total + cost <= max_total:
            parts[room].append(k)
            used[room] += cost
            total += cost
        elif len(parts) < max_files and overhead + cost <= max_bytes and total + overhead + cost <= max_total:
            parts.append([k])
            used.append(overhead + cost)
            total += overhead + cost
        else:
            left_out.append(k)
    out.mkdir(parents=True, exist_ok=True)
    extension = "tgz" if compress else "tar"
    written = []
    number = 0
    for part in parts:
        number += 1
        while ours is not None and taken(out / f"{name}-{number}.{extension}", ours):  # another's file: kept
            number += 1
        path = out / f"{name}-{number}.{extension}"
        files = [*every, *(item for k in part for item in groups[k])]
        replace_durably(path, lambda tmp, files=files: write_tar(tmp, files, compress))
        if path.stat().st_size > max_bytes:
            raise InputError(f"{path}: {path.stat().st_size} bytes, over the limit of {max_bytes}")
        written.append(path)
    for old in out.glob(f"{name}-*.{extension}"):  # only the parts this writes: NAME-<k>.EXT, never NAME-backup.EXT
        if old not in written and re.fullmatch(rf"{re.escape(name)}-[0-9]+\.{re.escape(extension)}", old.name):
            if ours is None or ours(old):
                old.unlink()
    return written, left_out


def taken(path: Path, ours: Callable[[Path], bool]) -> bool:
    """Whether ``path`` holds something (a link included) that ``ours`` does not claim: never written over."""
    return (path.exists() or path.is_symlink()) and not ours(path)


def write_tar(path: Path, files: Sequence[tuple[str, bytes]], compress: bool = False) -> None:
    """``files`` (name, bytes) into a new tar at ``path`` (gzip-compressed with ``compress``), as the packing writes
    every lease archive: plain files, mode 644, time 0."""
    with tarfile.open(path, "w:gz" if compress else "w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))


def lease_files(paths: Sequence[Path]) -> dict[str, list[Path]]:
    """The lease's archives by kind: ``records`` (``*.tgz``), ``state`` (``state-*.tar``), ``volumes`` (a large
    state's volumes and manifests: :mod:`lab.records.volumes`), ``sets`` (any other ``.tar``: packs of synthetic
    sets), ``other`` (the rest, e.g. logs the tool brought back beside them)."""
    kinds: dict[str, list[Path]] = {"records": [], "state": [], "volumes": [], "sets": [], "other": []}
    for path in sorted(paths):
        if stem_of(path) is not None:
            kinds["volumes"].append(path)
        elif path.name.endswith(".tgz"):
            kinds["records"].append(path)
        elif path.name.startswith(f"{STATE}-") and path.suffix == ".tar":
            kinds["state"].append(path)
        elif path.suffix == ".tar":
            kinds["sets"].append(path)
        else:
            kinds["other"].append(path)
    return kinds


# What one lease archive may hold (a state archive is under 16 MiB; records of every run a few MiB): a member over
# MAX_MEMBER, more than MAX_MEMBERS, a name longer than MAX_NAME or more than MAX_TOTAL together is not a lease's.
MAX_MEMBER, MAX_MEMBERS, MAX_NAME, MAX_TOTAL = 64 * MiB, 10_000, 512, 256 * MiB


def read_archive(
    path: Path, max_member: int = MAX_MEMBER, max_members: int = MAX_MEMBERS, max_total: int = MAX_TOTAL
) -> dict[str, bytes]:
    """Every regular file of a tar (compressed or not) by its name, read header by header: at most ``max_members``
    members, each at most ``max_member`` bytes and all at most ``max_total``, checked from the headers before a
    byte is read (a small archive that says it expands to 1 GiB is refused, never unpacked), and no header's own
    data (a GNU long name, a pax header) read past ``max_member`` either (:func:`theory.output.capped_tar`).
    InputError (one line) for an unreadable archive, a name that would leave the folder it is unpacked into, one
    past the caps, and a member a lease's packing never writes: a symbolic or hard link, a device or FIFO (a run
    whose ``checkpoint.pt`` is one would come home without it and still look resumable), or a name twice (the
    later copy would silently win). It returns only once the whole archive is read, so a caller that writes what
    it returns writes nothing of a refused archive. The one reader of a lease's archives: the intake
    (``figures ledger add --from-lease``) and the campaign's ``unpack`` both read through it."""
    files: dict[str, bytes] = {}
    total = count = 0
    try:
        with capped_tar(path, max_member + 1, "a lease archive") as archive:
            for member in archive:  # streaming: never archive.getmembers() of an unbounded archive
                count += 1
                if count > max_members:
                    raise InputError(f"{path}: more than {max_members} members; not a lease archive")
                if len(member.name) > MAX_NAME:
                    raise InputError(f"{path}: a member name of {len(member.name)} characters; not a lease archive")
                if member.isdir():
                    continue
                if not member.isfile():
                    kind = "a hard link" if member.islnk() else "a symbolic link" if member.issym() else "not a file"
                    raise InputError(f"{path}: its member {member.name!r} is {kind}; not a lease archive (nothing "
                                     "was unpacked)")  # fmt: skip
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts or not name.parts:
                    raise InputError(f"{path}: {member.name!r} would leave the folder it is unpacked into")
                if str(name) in files:
                    raise InputError(f"{path}: its member {member.name!r} comes twice; not a lease archive (nothing "
                                     "was unpacked)")  # fmt: skip
                total += member.size
                if member.size > max_member or total > max_total:
                    raise InputError(
                        f"{path}: {member.name!r} would take {member.size} bytes ({total} in all), over the cap of "
                        f"{max_member} a member and {max_total} an archive"
                    )
                data = archive.extractfile(member).read(member.size + 1)
                if len(data) != member.size:
                    raise InputError(f"{path}: {member.name!r} is cut short or longer than its header says")
                files[str(name)] = data
            return files
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        detail = "; ".join(line.strip(" -") for line in str(error).splitlines() if line.strip(" -"))
        raise InputError(f"{path}: not a readable archive ({detail})") from None


def json_member(files: dict[str, bytes], name: str, source: Path, kind: type = dict):
    """Member ``name`` of an archive read from ``source`` as JSON of type ``kind``; None where it is absent;
    InputError (one line naming the file) where it does not parse or is of another type."""
    if name not in files:
        return None
    try:
        value = json.loads(files[name].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InputError(f"{source}: its {name} is not JSON (cut short or damaged)") from None
    if not isinstance(value, kind):
        raise InputError(f"{source}: its {name} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def text_member(data: bytes, what: str) -> str:
    """A one-line text member (``init_from.txt``, ``logs/device.txt``): UTF-8 without control characters; InputError
    naming ``what`` otherwise."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InputError(f"{what}: not text") from None
    if any(ord(c) < 32 and c not in "\n\t" for c in text):
        raise InputError(f"{what}: holds control characters; not a path or a device name")
    return text


def refuse_links(path: Path, top: Path) -> None:
    """InputError (one line) when ``path`` or a folder between ``top`` and it is a symbolic link: nothing the intake
    writes goes through a link planted in the store."""
    for folder in [*reversed(path.relative_to(top).parents), path.relative_to(top)]:
        if (top / folder).is_symlink():
            raise InputError(f"{top / folder}: a symbolic link; the intake never writes through one")


def write_new(target: Path, data: bytes) -> None:
    """``data`` into a new file ``target`` (never through a link, never over a file: O_EXCL | O_NOFOLLOW)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def extract(path: Path, into: Path) -> list[Path]:
    """Unpack the regular files of ``path`` into the new or empty folder ``into``; the files written."""
    written = []
    for name, data in read_archive(path).items():
        write_new(into / name, data)
        written.append(into / name)
    return written


def metric_rows(metrics: bytes) -> list[dict]:
    """A metrics.jsonl's whole rows without their timings (which differ between two runs of the same numbers)."""
    found = []
    for line in metrics.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue  # a torn last line
        found.append({k: v for k, v in row.items() if not k.startswith("seconds")} if isinstance(row, dict) else row)
    return found


OURS = ".shufflefl-intake"  # a marker in every folder the intake makes for itself (staging, set aside)


def own_folder(near: Path, label: str) -> Path:
    """A new folder beside ``near`` named ``NAME.LABEL-XXXX`` with the intake's marker in it: never a user's."""
    folder = Path(tempfile.mkdtemp(prefix=f"{near.name}.{label}-", dir=near.parent))
    (folder / OURS).write_text("made by lab.records.lease; removed when the intake is done with it\n")
    return folder


def remove_own(folder: Path) -> None:
    """Remove a folder the intake made (it holds the marker); anything else stays."""
    if folder.is_dir() and not folder.is_symlink() and (folder / OURS).is_file():
        shutil.rmtree(folder)


def run_identity(config: object) -> object:
    """What of a run's config.json (as JSON, nothing imported) says which run it is: without what a resume may
    change (``train.device``, ``train.workers``, ``[log]``) or a later key at its default (as
    :meth:`fl.config.RunConfig.identity`)."""
    if not isinstance(config, dict):
        return config
    tree = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items() if k not in ("log", "algorithm_fields")}
    for key in ("device", *SPEED_ONLY):
        if isinstance(tree.get("train"), dict):
            tree["train"].pop(key, None)
    for section, later in LATER_DEFAULTS.items():
        for key, default in later.items():
            if isinstance(tree.get(section), dict) and tree[section].get(key) == default:
                tree[section].pop(key)
    return tree


def other_run(folder: Path, files: dict[str, bytes]) -> bool:
    """Whether the run store's ``folder`` holds a run of another config than the lease's state ``files`` (both
    config.json readable JSON; where either is not, :func:`place_run` compares their rows)."""
    here = folder / "config.json"
    if "config.json" not in files or not here.is_file() or here.is_symlink():
        return False
    try:
        theirs, ours = json.loads(files["config.json"].decode("utf-8")), json.loads(here.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError, RecursionError):
        return False
    return run_identity(theirs) != run_identity(ours)


def set_aside(folder: Path, files: dict[str, bytes]) -> Path:
    """The lease's state of a run into a new ``NAME.lease-XXXX`` beside ``folder`` (which stays as it is), the
    user's to keep: never dropped."""
    aside = own_folder(folder, "lease")
    for name, data in files.items():
        write_new(aside / name, data)
    (aside / OURS).unlink()  # the user's to keep now
    return aside


def placed_state(folder: Path, files: dict[str, bytes]) -> tuple[str, bool]:
    """:func:`place_run`'s line, and whether the lease's ``checkpoint.pt`` is now ``folder``'s (the run resumable
    from the lease's state)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    if other_run(folder, files):  # first: another config's rows can begin as the lease's do (fewer rounds)
        aside = set_aside(folder, files)
        return f"{folder}: holds a run of another config (the same name), left alone; the lease's: {aside}", False
    theirs = metric_rows(files.get("metrics.jsonl", b""))
    here = metric_rows((folder / "metrics.jsonl").read_bytes()) if (folder / "metrics.jsonl").is_file() else []
    shorter = min(len(theirs), len(here))
    if folder.exists() and theirs[:shorter] != here[:shorter]:
        aside = set_aside(folder, files)
        said = f"{folder}: its rows differ from the lease's (another device or code), left alone; the lease's: {aside}"
        return said, False
    if folder.exists() and ((folder / "summary.json").exists() or len(here) >= len(theirs)):
        added = [n for n in files if n.startswith("checkpoint_round") and not (folder / n).exists()]
        for name in added:
            replace_durably(folder / name, lambda tmp, name=name: tmp.write_bytes(files[name]))
        kept = f"; added {', '.join(added)}" if added else ""
        return f"{folder}: kept the copy here (finished or as far){kept}", False
    staging = own_folder(folder, "unpacking")
    for name, data in files.items():
        write_new(staging / name, data)
    old = None
    if folder.exists():  # what only the copy here has (kept rounds, post-hoc estimates) stays with the run
        for path in folder.iterdir():
            if path.name not in files and path.name not in ("checkpoint.pt", "metrics.jsonl", "summary.json"):
                os.replace(path, staging / path.name)
        old = own_folder(folder, "replaced")
        os.replace(folder, old / folder.name)
    (staging / OURS).unlink()
    staging.rename(folder)
    if old is not None:
        remove_own(old)
    done = "finished" if "summary.json" in files else f"{len(theirs)} rounds"
    resumable = "checkpoint.pt" in files
    return f"{folder}: unpacked ({done}{', resumable' if resumable else ''})", resumable


def place_run(folder: Path, files: dict[str, bytes]) -> str:
    """One run's state into ``folder``; one line said. A run here of another config (:func:`run_identity`: the
    same name, say another number of rounds, whose rows can begin as the lease's do) is compared first and left
    alone, the incoming state going beside it into a new ``NAME.lease-XXXX`` (:func:`set_aside`), never dropped; so
    is a run here whose rows disagree (another device, other code). A new folder, or an earlier state of the same
    run (its rows a beginning of the incoming ones), gets all of it; a copy here that is finished or as far gets
    only the kept checkpoints it lacks. Staging folders are the intake's own (a marker); a user's folder of any
    name is never removed. The one placing of a lease's state: the intake and the campaign's ``unpack`` both use it
    (:func:`extract_state`)."""
    return placed_state(folder, files)[0]


def split_state(files: dict[str, bytes], source: Path, store: Path) -> dict[str, dict[str, bytes]]:
    """A state archive's files by run (``runs/NAME``), ``init_from.txt`` pointing into the device's store rewritten
    relative to the run folder (as fl.run writes it)."""
    lease = json_member(files, LEASE_FILE, source) or {}
    files = {k: v for k, v in files.items() if k != LEASE_FILE}
    runs: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        parts = PurePosixPath(name).parts
        if len(parts) != 3 or parts[0] != "runs" or parts[1].startswith("."):
            raise InputError(f"{source}: {name} is not a run's file (runs/NAME/FILE)")
        runs.setdefault(f"runs/{parts[1]}", {})[parts[2]] = data
    for run, run_files in runs.items():
        odd = sorted(n for n in run_files if not STATE_FILE.fullmatch(n))
        if odd:  # never code or anything else a run does not write
            raise InputError(f"{source}: {run}/{odd[0]} is not a file a run keeps; not a lease's state")
    device_store = lease.get("store") if isinstance(lease.get("store"), str) else ""
    for run, run_files in runs.items():
        origin = run_files.get("init_from.txt")
        if origin is not None and device_store:
            text = text_member(origin, f"{source}: {run}/init_from.txt")
            prefix = device_store.rstrip("/") + "/"
            if text.startswith(prefix):  # relative to the run folder, as fl.run writes it now
                run_files["init_from.txt"] = posixpath.relpath(text[len(prefix) :], run).encode()
    return runs


def joined_state(path: Path, store: Path) -> dict[str, dict[str, bytes]]:
    """The runs of a state archive joined from volumes (:func:`split_state`): read as any lease archive, capped at
    its own size (its volumes were checked against their manifest: a DynaFed checkpoint is past
    :data:`MAX_MEMBER`)."""
    size = path.stat().st_size
    return split_state(read_archive(path, max_member=size, max_total=size), path, store)


def extract_state(path: Path, store: Path, runs: dict[str, dict[str, bytes]] | None = None) -> list[str]:
    """A state archive's runs (or ``runs`` read from it already) into the run store ``store`` (:func:`place_run`
    each). One line per run."""
    runs = split_state(read_archive(path), path, store) if runs is None else runs
    lines = []
    for run, run_files in runs.items():
        refuse_links(store / run, store) if (store / run).exists() or (store / "runs").exists() else None
        lines.append(place_run(store / run, run_files))
    return lines


def lease_device(records: Path) -> str | None:
    """The device named in a lease's ``logs/device.txt`` (nvidia-smi's first field), or None (also for a file that
    is not a line of text)."""
    path = records / "logs" / "device.txt"
    if not path.is_file() or path.is_symlink():
        return None
    try:
        lines = text_member(path.read_bytes()[:4096], str(path)).splitlines()
    except InputError:
        return None
    return (lines[0].split(",")[0].strip()[:200] or None) if lines else None


def campaign_status(files: dict[str, bytes], source: Path) -> dict:
    """The campaign's ``status.json`` from a records archive, its fields checked (InputError naming the file): a
    dict whose ``started`` is a time since 2000 and before 2200, whose ``tasks`` is a list of dicts; {} without one."""
    status = json_member(files, "campaign/status.json", source) or {}
    started = status.get("started")
    if started is not None and (not isinstance(started, (int, float)) or not 946684800 <= started <= 7258118400):
        raise InputError(f"{source}: campaign/status.json's 'started' is {started!r}, not a time")
    tasks = status.get("tasks", [])
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise InputError(f"{source}: campaign/status.json's 'tasks' is not a list of tasks")
    return status


class Snapshot:
    """One lease folder's archives, read (bounded): its records' files, its state by run, its packs of sets."""

    def __init__(self, folder: Path, store: Path):
        if not folder.is_dir():
            raise InputError(f"{folder}: no such lease folder")
        kinds = lease_files([p for p in folder.iterdir() if p.is_file()])
        if not (kinds["records"] or kinds["state"] or kinds["sets"] or kinds["volumes"]):
            raise InputError(f"{folder}: no lease archives (records-*.tgz, state-*.tar, *.vol, ddpm_sets*.tar)")
        self.folder, self.sets, self.volumes = folder, kinds["sets"], kinds["volumes"]
        self.records: dict[str, bytes] = {}
        for archive in kinds["records"]:
            files = read_archive(archive)
            twice = sorted(set(files) & set(self.records))
            if twice:  # the packing puts each file in one archive: a second copy would silently win
                raise InputError(f"{archive}: its member {twice[0]!r} is in another records archive of {folder} too")
            self.records |= files
        self.status = campaign_status(self.records, folder)
        self.state: dict[str, dict[str, bytes]] = {}
        for archive in kinds["state"]:
            runs = split_state(read_archive(archive), archive, store)
            twice = sorted(set(runs) & set(self.state))
            if twice:  # a run's state is one group, in one archive
                raise InputError(f"{archive}: the state of {twice[0]} is in another state archive of {folder} too")
            self.state |= runs
        for name in ("provenance.json", "summary.json", "config.json"):
            for member in self.records:
                if member.startswith("runs/") and member.endswith("/" + name):
                    json_member(self.records, member, folder)
        digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes()[:4096] for p in sorted(folder.iterdir())
                                         if p.is_file())).hexdigest()[:8]  # fmt: skip
        started = self.status.get("started")
        self.name = time.strftime("lease-%Y%m%d-%H%M%S", time.gmtime(started)) if started else f"lease-{digest}"

    def runs(self) -> dict[str, dict[str, bytes]]:
        """The records' runs: {NAME: {FILE: bytes}}."""
        found: dict[str, dict[str, bytes]] = {}
        for member, data in self.records.items():
            parts = PurePosixPath(member).parts
            if len(parts) == 3 and parts[0] == "runs" and not parts[1].startswith("."):
                found.setdefault(parts[1], {})[parts[2]] = data
        return found

    def progress(self) -> int:
        """How far the campaign had got when this snapshot was taken: rows of every run's metrics together."""
        rows = {n: len(metric_rows(f.get("metrics.jsonl", b""))) for n, f in self.runs().items()}
        for run, files in self.state.items():
            name = run.split("/", 1)[1]
            rows[name] = max(rows.get(name, 0), len(metric_rows(files.get("metrics.jsonl", b""))))
        return sum(rows.values())


def further(new: dict[str, bytes], old: dict[str, bytes]) -> bool:
    """Whether a run's records ``new`` are further along than ``old`` (finished beats unfinished, then rows)."""
    key = lambda files: ("summary.json" in files, len(metric_rows(files.get("metrics.jsonl", b""))))  # noqa: E731
    return key(new) > key(old)


def merge_records(snapshots: Sequence[Snapshot], home: Path) -> None:
    """The snapshots' records (older first) into ``home``: each run's newest records, the newest snapshot's logs
    and status. ``home`` is the intake's own (its marker), new or made by an earlier intake of this lease."""
    newest: dict[str, dict[str, bytes]] = {}
    for snap in snapshots:
        for member in snap.records:
            if not RECORDS_FILE.fullmatch(member):  # never code or anything else a campaign does not pack
                raise InputError(f"{snap.folder}: {member} is not a run's record, a log or the campaign's status")
        for name, files in snap.runs().items():
            if name not in newest or further(files, newest[name]):
                newest[name] = files
    marker = json.loads((home / OURS).read_text() or "{}") if (home / OURS).is_file() else {"progress": -1}
    here = {p.name: {f.name: f.read_bytes() for f in p.iterdir() if f.is_file()}
            for p in (home / "runs").iterdir() if p.is_dir()} if (home / "runs").is_dir() else {}  # fmt: skip
    staging = own_folder(home, "merging")
    last = snapshots[-1]
    if last.progress() >= marker.get("progress", -1):  # the newest logs and status
        for member, data in last.records.items():
            if not member.startswith("runs/"):
                write_new(staging / member, data)
    elif home.is_dir():
        for path in home.iterdir():
            if path.name not in ("runs", OURS):
                shutil.copytree(path, staging / path.name) if path.is_dir() else shutil.copy2(path, staging / path.name)
    (staging / "runs").mkdir(parents=True, exist_ok=True)  # a lease that made no run (DDPM sets alone) has none
    for name in sorted({*newest, *here}):
        take = name not in here or (name in newest and further(newest[name], here[name]))
        files = newest[name] if take else here[name]
        for file, data in files.items():
            write_new(staging / "runs" / name / file, data)
    if home.is_dir():  # what else the home holds (a user's notes, an older snapshot's log) is kept, never dropped
        for path in sorted(home.rglob("*")):
            kept = staging / path.relative_to(home)
            if path.is_file() and not path.is_symlink() and path.name != OURS and not kept.exists():
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, kept)
    progress = max(marker.get("progress", -1), last.progress())
    (staging / OURS).write_text(json.dumps({"progress": progress, "made by": "lab.records.lease"}))
    old = own_folder(home, "replaced") if home.exists() else None
    if old is not None:
        os.replace(home, old / home.name)
    staging.rename(home)
    if old is not None:
        shutil.rmtree(old)


def volumes_run(stem: str) -> str:
    """The run whose state the volumes ``stem`` hold: the packing names them ``state-NAME-KEY``."""
    return stem.removeprefix(f"{STATE}-").rsplit("-", 1)[0]


def gather_volumes(paths: Sequence[Path], into: Path, store: Path) -> tuple[dict, dict[str, str]]:
    """The volumes among ``paths`` gathered into ``into`` (:func:`lab.records.volumes.collect`): the runs of each
    whole set's state archive ({runs/NAME: files}), and a line for each run whose set is still partial."""
    collected: list[Collected] = collect(paths, into) if paths else []
    runs: dict[str, dict[str, bytes]] = {}
    for whole in (c.joined for c in collected if c.joined):
        for run, files in joined_state(whole, store).items():
            if run not in runs or further(files, runs[run]):
                runs[run] = files
    partial = {volumes_run(c.stem): f"{c.present} of {c.count} volumes of its state so far, in {c.folder}; not "
               "joined: the later calls' files bring the rest" for c in collected if not c.joined}  # fmt: skip
    return runs, partial


def outcomes(
    snap: Snapshot, home: Path, store: Path, placed: dict[str, str], added: dict[str, str],
    resumable: set[str] | frozenset[str] = frozenset(), partial: dict[str, str] | None = None,
) -> list[str]:  # fmt: skip
    """One line per run of the lease, by outcome: finished (what the ledger did), resumable (with its round and the
    command: only a run whose ``checkpoint.pt`` the intake placed in the store, ``resumable``), placed otherwise
    (its state came back but is not what the store's run goes on from: the copy here kept, or set aside beside a
    run of another config or other rows; what :func:`place_run` said), partial (some of its state's volumes came,
    ``partial``: kept, not joined), lost (why: the campaign's word for it and the round it had reached), not
    started."""
    partial = partial or {}
    tasks = {str(t.get("run", "")).removeprefix("runs/"): t for t in snap.status.get("tasks", []) if t.get("run")}
    names = sorted({*(p.name for p in (home / "runs").iterdir() if p.is_dir()), *placed, *partial, *tasks})
    lines = []
    for name in names:
        rows = home / "runs" / name / "metrics.jsonl"
        reached = len(metric_rows(rows.read_bytes())) if rows.is_file() else 0
        task = tasks.get(name, {})
        if name in added:
            lines.append(f"finished   {name}: {added[name]}")
        elif name in placed and name not in resumable:
            lines.append(f"placed     {name}: {placed[name]}")
        elif name in placed:
            at = len(metric_rows((store / "runs" / name / "metrics.jsonl").read_bytes()))
            lines.append(f"resumable  {name}: round {at} done; python -m fl.run --resume {store / 'runs' / name}"
                         f"  ({placed[name]})")  # fmt: skip
        elif name in partial:
            lines.append(f"partial    {name}: round {reached}; {partial[name]}")
        elif reached or task.get("state") in ("running", "failed", "done"):
            state = task.get("state", "unknown")
            why = {
                "failed": f"failed there (exit {task.get('rc')}; logs/{task.get('name', name)}.log)",
                "running": "still running when the lease ended, and its state did not come back",
            }.get(state, f"{state} there; its state did not come back")
            lines.append(f"lost       {name}: round {reached}, {why}")
        else:
            why = task.get("note") or (f"waiting on {task['after']}" if task.get("after") else task.get("state"))
            lines.append(f"not run    {name}: {why}")
    return lines


def bring_home(
    leases: Sequence[Path] | Path, ledger: Path, store: Path | None = None, cache_dir: Path | None = None,
    note: str | None = None,
) -> tuple[list[str], int]:  # fmt: skip
    """Bring the lease in the folders ``leases`` (one, or several snapshots of one lease) home (see the module
    docstring): (one line per thing done and per run by outcome, how many finished runs the ledger refused)."""
    folders = [Path(leases)] if isinstance(leases, (str, Path)) else [Path(p) for p in leases]
    store = Path(store or os.environ.get("SHUFFLEFL_RUNS") or "results").expanduser()
    cache_dir = cache_dir or store / SYNTHETIC
    for top in (store, store / "leases", store / "runs", cache_dir):
        if top.is_symlink():
            raise InputError(f"{top}: a symbolic link; the intake never writes through one")
    snapshots = sorted((Snapshot(f, store) for f in folders), key=Snapshot.progress)
    if len({s.name for s in snapshots}) > 1:
        raise InputError(f"{', '.join(map(str, folders))}: snapshots of different leases; bring each home on its own")
    snap = snapshots[-1]
    home = store / "leases" / snap.name
    if home.exists() and not (home / OURS).is_file():  # a folder the intake did not make: never merged into
        raise InputError(f"{home}: not made by the intake (no {OURS}); move it away or pass another --runs")
    volumes = [p for s in snapshots for p in s.volumes]  # every volume checked before the records are merged
    joined, partial = gather_volumes(volumes, store / "leases" / "volumes", store)
    home.parent.mkdir(parents=True, exist_ok=True)
    merge_records(snapshots, home)
    lines = [f"{home}: the lease's records ({len(snapshots)} snapshot(s); each run's newest)"]
    device = lease_device(home)
    placed, added, refused, resumable = {}, {}, 0, set()
    for run in sorted(p for p in (home / "runs").iterdir() if p.is_dir() and (p / "summary.json").is_file()):
        provenance = read_object(run / "provenance.json", "provenance") if (run / "provenance.json").is_file() else {}
        named = None if provenance.get("device") else device
        try:
            said = add(run, ledger, named, None, note or f"GPU lease {snap.folder}")
            added[run.name] = "already in the ledger" if "already in the ledger" in said else said.split(": ", 1)[1]
        except InputError as error:
            added[run.name] = f"refused by the ledger: {error}"
            refused += 1
    state: dict[str, dict[str, bytes]] = {}
    for older in [*(s.state for s in snapshots), joined]:  # the newest state of each run
        for run, files in older.items():
            if run not in state or further(files, state[run]):
                state[run] = files
    for run, files in sorted(state.items()):
        if run.split("/", 1)[1] in added:
            continue
        refuse_links(store / run, store) if (store / "runs").exists() else None
        line, checkpoint = placed_state(store / run, files)
        placed[run.split("/", 1)[1]] = line.split(": ", 1)[1]
        if checkpoint:
            resumable.add(run.split("/", 1)[1])
    sets = [p for s in snapshots for p in s.sets]
    if sets:
        unpacked = unpack(sets, cache_dir)
        lines.append(f"{len(unpacked)} generator folders unpacked into {cache_dir}")
    lines += outcomes(snap, home, store, placed, added, resumable, partial)
    if any(not v.startswith(("already", "refused")) for v in added.values()):
        lines.append("REPORT.md now lags the ledger: `python -m figures report` rebuilds it, then `figures check`")
    return lines, refused
