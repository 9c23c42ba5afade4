"""A GPU lease's files: the archives ``bash scripts/gpu-campaign.sh`` (scripts/campaign.py) leaves in ``$OUT`` for the
device tool to bring back (at most 8 files of under 16 MiB, 64 MiB together), and bringing them home.

- ``records-1.tgz`` (``records-2.tgz``, ... past 15 MiB): every run's small records (:data:`RECORD_FILES`, what
  the ledger keeps), the logs, and the campaign's status (``campaign/status.json``: each task's state and seconds).
- ``state-1.tar``, ``state-2.tar``, ...: what each unfinished run needs to continue, under ``runs/NAME/``: its
  config, provenance, metrics, ``init_from.txt`` and ``checkpoint.pt`` (server model, algorithm and method state;
  every random draw derives from (seed, round, client), so there is no generator state to keep), and a kept
  ``checkpoint_roundK.pt`` that another unfinished run still starts from; ``lease.json`` names the store they came
  from (an ``init_from.txt`` pointing into it is rewritten to the store they go to).
- ``ddpm_sets.tar`` (``ddpm_sets-1.tar``, ...): the DDPM synthetic sets (:mod:`fl.synthesis.pack`).

Older leases' ``metrics.tgz`` and ``dsyn.tgz`` read as records.

    python -m figures ledger add --from-lease DIR [--runs STORE] [--cache-dir DIR]

adds every finished run to the ledger (the device its provenance names, else the lease's ``logs/device.txt``),
unpacks the DDPM sets into the generator cache (``STORE/_synthetic`` unless ``--cache-dir``), and puts the unfinished
runs' state into the run store (``STORE/runs/NAME``; STORE is ``--runs``, else ``$SHUFFLEFL_RUNS``, else ``results``),
where ``python -m fl.run --resume STORE/runs/NAME`` or the next lease (``gpu-campaign.sh resume``) continues them.
The records stay in ``STORE/leases/lease-DATE-TIME/`` (the ledger entries' source; an unfinished run's rows, which
``ledger add`` takes by hand where a partial run is wanted).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from fl.atomic import write_atomically
from theory.errors import InputError

# a run's records, which come back for every run, finished or not (figures.ledger_check.KEPT: what the ledger keeps)
RECORD_FILES = (
    "config.json", "metrics.jsonl", "summary.json", "provenance.json", "init_from.txt", "estimates_posthoc.jsonl",
    "dynafed_synthesis.pt",
)  # fmt: skip
RECORDS, STATE, SETS = "records", "state", "ddpm_sets"
LEASE_FILE = "lease.json"  # in every state archive: {"store": the device's run store}
MiB = 2**20

Group = list[tuple[str, bytes]]  # files (name in the archive, content) packed together or left out together


def tar_size(group: Group) -> int:
    """Bytes ``group`` takes in a tar: a 512-byte header per file and its content padded to 512."""
    return sum(512 + -(-len(data) // 512) * 512 for _, data in group)


def write_archives(
    groups: Sequence[Group], out: Path, name: str, max_bytes: int, max_files: int, max_total: int,
    compress: bool = False, every: Group = (),
) -> tuple[list[Path], list[int]]:  # fmt: skip
    """The ``groups`` in order into ``out/NAME-1.tar``, ``NAME-2.tar``, ... (``.tgz`` with ``compress``), each
    archive at most ``max_bytes``, at most ``max_files`` of them and ``max_total`` bytes together (counted before
    compression); a group goes into the first archive with room, and one that fits nowhere is left out whole.
    ``every``: files each archive holds. Each file is written whole before it replaces an older one; older
    ``NAME-k`` files beyond the new ones are removed. Returns the files written and the indices left out."""
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
    for p, part in enumerate(parts, 1):
        path = out / f"{name}-{p}.{extension}"
        files = [*every, *(item for k in part for item in groups[k])]
        write_atomically(path, lambda tmp, files=files: _write_tar(tmp, files, compress))
        if path.stat().st_size > max_bytes:
            raise InputError(f"{path}: {path.stat().st_size} bytes, over the limit of {max_bytes}")
        written.append(path)
    for old in out.glob(f"{name}-*.{extension}"):  # only the parts this writes: NAME-<k>.EXT, never NAME-backup.EXT
        if old not in written and re.fullmatch(rf"{re.escape(name)}-[0-9]+\.{re.escape(extension)}", old.name):
            old.unlink()
    return written, left_out


def _write_tar(path: Path, files: Sequence[tuple[str, bytes]], compress: bool) -> None:
    with tarfile.open(path, "w:gz" if compress else "w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))


def lease_files(paths: Sequence[Path]) -> dict[str, list[Path]]:
    """The lease's archives by kind: ``records`` (``*.tgz``), ``state`` (``state-*.tar``), ``sets`` (any other
    ``.tar``: packs of synthetic sets), ``other`` (the rest, e.g. logs the tool brought back beside them)."""
    kinds: dict[str, list[Path]] = {"records": [], "state": [], "sets": [], "other": []}
    for path in sorted(paths):
        if path.name.endswith(".tgz"):
            kinds["records"].append(path)
        elif path.name.startswith(f"{STATE}-") and path.suffix == ".tar":
            kinds["state"].append(path)
        elif path.suffix == ".tar":
            kinds["sets"].append(path)
        else:
            kinds["other"].append(path)
    return kinds


def read_archive(path: Path) -> dict[str, bytes]:
    """Every regular file of a tar (compressed or not) by its name; InputError for an unreadable archive or a name
    that would leave the folder it is unpacked into."""
    try:
        with tarfile.open(path) as archive:
            files = {}
            for member in archive.getmembers():
                if not member.isfile():
                    continue
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts:
                    raise InputError(f"{path}: {member.name} would leave the folder it is unpacked into")
                files[str(name)] = archive.extractfile(member).read()
            return files
    except (tarfile.TarError, OSError, EOFError) as error:
        raise InputError(f"{path}: not a readable archive ({error})") from None


def extract(path: Path, into: Path) -> list[Path]:
    """Unpack the regular files of ``path`` into ``into``; the files written."""
    written = []
    for name, data in read_archive(path).items():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    return written


def metric_rows(metrics: bytes) -> list[dict]:
    """A metrics.jsonl's whole rows without their timings (which differ between two runs of the same numbers)."""
    found = []
    for line in metrics.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        found.append({k: v for k, v in row.items() if not k.startswith("seconds")} if isinstance(row, dict) else row)
    return found


def place_run(folder: Path, files: dict[str, bytes]) -> str:
    """One run's state into ``folder``; one line said. A new folder, or an earlier state of the same run (its rows a
    beginning of the incoming ones), gets all of it; a copy here that is finished or as far gets only the kept
    checkpoints it lacks; a run here whose rows disagree (another device, other code) is left alone and the
    incoming state goes beside it into ``NAME.lease``."""
    theirs = metric_rows(files.get("metrics.jsonl", b""))
    here = metric_rows((folder / "metrics.jsonl").read_bytes()) if (folder / "metrics.jsonl").exists() else []
    shorter = min(len(theirs), len(here))
    if folder.exists() and theirs[:shorter] != here[:shorter]:
        aside = folder.with_name(folder.name + ".lease")
        shutil.rmtree(aside, ignore_errors=True)
        place_run(aside, files)
        return f"{folder}: its rows differ from the lease's (another device or code), left alone; the lease's: {aside}"
    if folder.exists() and ((folder / "summary.json").exists() or len(here) >= len(theirs)):
        added = [n for n in files if n.startswith("checkpoint_round") and not (folder / n).exists()]
        for name in added:
            write_atomically(folder / name, lambda tmp, name=name: tmp.write_bytes(files[name]))
        kept = f"; added {', '.join(added)}" if added else ""
        return f"{folder}: kept the copy here (finished or as far){kept}"
    staging = folder.with_name(folder.name + ".unpacking")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, data in files.items():
        (staging / name).write_bytes(data)
    old = folder.with_name(folder.name + ".replaced")
    if folder.exists():  # what only the copy here has (kept rounds, post-hoc estimates) stays with the run
        for path in folder.iterdir():
            if path.name not in files and path.name not in ("checkpoint.pt", "metrics.jsonl", "summary.json"):
                os.replace(path, staging / path.name)
        folder.rename(old)
    staging.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    done = "finished" if "summary.json" in files else f"{len(theirs)} rounds"
    return f"{folder}: unpacked ({done}{', resumable' if 'checkpoint.pt' in files else ''})"


def extract_state(path: Path, store: Path) -> list[str]:
    """A state archive's runs into the run store ``store`` (:func:`place_run` each); ``init_from.txt`` pointing
    into the device's store points into ``store``. One line per run."""
    files = read_archive(path)
    lease = json.loads(files.pop(LEASE_FILE, b"{}"))
    runs: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        parts = PurePosixPath(name).parts
        if len(parts) != 3 or parts[0] != "runs":
            raise InputError(f"{path}: {name} is not a run's file (runs/NAME/FILE)")
        runs.setdefault(f"runs/{parts[1]}", {})[parts[2]] = data
    lines = []
    for run, run_files in runs.items():
        origin = run_files.get("init_from.txt")
        if origin is not None and isinstance(lease.get("store"), str) and lease["store"]:
            text = origin.decode(errors="replace").strip()
            device_store = lease["store"].rstrip("/") + "/"
            if text.startswith(device_store):  # relative to the run folder, as fl.run writes it now
                run_files["init_from.txt"] = posixpath.relpath(text[len(device_store) :], run).encode()
        lines.append(place_run(store / run, run_files))
    return lines


def lease_device(records: Path) -> str | None:
    """The device named in a lease's ``logs/device.txt`` (nvidia-smi's first field), or None."""
    path = records / "logs" / "device.txt"
    if not path.exists():
        return None
    lines = path.read_text().strip().splitlines()
    return (lines[0].split(",")[0].strip() or None) if lines else None


def lease_name(records: Path, lease: Path) -> str:
    """``lease-YYYYMMDD-HHMMSS`` from when its campaign started (its status), else the lease folder's name."""
    try:
        started = json.loads((records / "campaign" / "status.json").read_text())["started"]
    except (OSError, ValueError, KeyError):
        return lease.resolve().name
    return time.strftime("lease-%Y%m%d-%H%M%S", time.gmtime(started))


def bring_home(
    lease: Path, ledger: Path, store: Path | None = None, cache_dir: Path | None = None, note: str | None = None
) -> tuple[list[str], int]:
    """Bring the lease in folder ``lease`` home (see the module docstring): (one line per thing done, how many
    finished runs the ledger refused)."""
    from figures.ledger import add  # figures.ledger imports this module in its CLI
    from fl.synthesis.pack import unpack

    if not lease.is_dir():
        raise InputError(f"{lease}: no such lease folder")
    kinds = lease_files([p for p in lease.iterdir() if p.is_file()])
    if not (kinds["records"] or kinds["state"] or kinds["sets"]):
        raise InputError(f"{lease}: no lease archives (records-*.tgz, state-*.tar, ddpm_sets*.tar)")
    store = store or Path(os.environ.get("SHUFFLEFL_RUNS") or "results").expanduser()
    cache_dir = cache_dir or store / "_synthetic"
    lines, refused, unfinished = [], 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for archive in kinds["records"]:
            extract(archive, Path(tmp))
        records = store / "leases" / lease_name(Path(tmp), lease)  # kept: the ledger's source, partial runs' rows
        shutil.copytree(tmp, records, dirs_exist_ok=True)
    lines.append(f"{records}: the lease's records")
    device = lease_device(records)
    for run in sorted(p for p in (records / "runs").glob("*") if p.is_dir()):
        if not (run / "summary.json").exists():
            unfinished.append(run.name)
            continue
        provenance = json.loads((run / "provenance.json").read_text()) if (run / "provenance.json").exists() else {}
        named = None if provenance.get("device") else device
        try:
            lines.append(add(run, ledger, named, None, note or f"GPU lease {lease}"))
        except InputError as error:
            lines.append(f"figures ledger: {error}")
            refused += 1
    for archive in kinds["state"]:
        lines += extract_state(archive, store)
    if kinds["sets"]:
        folders = unpack(kinds["sets"], cache_dir)
        lines.append(f"{len(folders)} generator folders unpacked into {cache_dir}")
    if unfinished:
        lines.append(f"not finished in the lease ({len(unfinished)}): {', '.join(unfinished)}")
    return lines, refused
