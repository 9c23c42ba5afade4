"""A run's state too large for one file of the device tool, in volumes: the state archive cut into numbered volumes of
at most a size, with a manifest, so that it leaves a GPU lease over several calls (8 files of under 16 MiB a call)
and goes back to one the same way; and the volumes joined back once all are there.

    STEM.vol.json           the manifest: the whole's name, bytes and SHA-256; each volume's name, bytes and SHA-256
    STEM.01-of-14.vol, ...  the volumes in order: their bytes one after another are the whole (``cat`` joins them)

STEM is ``NAME-KEY``, KEY the first 12 hex digits of the whole's SHA-256, so two states of one run never share a
name. A volume is checked against its manifest (a regular file, never a link; its bytes and SHA-256) before
anything is written: a missing, extra, damaged or reordered volume, a link or a manifest that does not add up is one
line (InputError). :func:`collect` gathers volumes that arrive over several calls into a folder of its own and joins
a set once it is whole; a partial set is kept there and said, never joined.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from theory.errors import InputError
from theory.output import file_sha256, read_text_bounded, replace_durably, write_text_atomically

FORMAT = "shufflefl-volumes-1"
MANIFEST = ".vol.json"  # STEM + MANIFEST
VOLUME = re.compile(r"(?P<stem>[A-Za-z0-9_.=,+-]+)\.(?P<k>[0-9]+)-of-(?P<n>[0-9]+)\.vol")


def stem_of(path: Path) -> str | None:
    """The STEM of a volume or manifest file name; None for any other name."""
    if path.name.endswith(MANIFEST) and len(path.name) > len(MANIFEST):
        return path.name[: -len(MANIFEST)]
    found = VOLUME.fullmatch(path.name)
    return found.group("stem") if found else None


def volume_name(stem: str, k: int, n: int) -> str:
    """The name of volume ``k`` (from 1) of ``n``: ``STEM.k-of-n.vol``, both numbers of at least two digits."""
    width = max(2, len(str(n)))
    return f"{stem}.{k:0{width}d}-of-{n:0{width}d}.vol"


def split(whole: Path, folder: Path, name: str, max_bytes: int) -> Path:
    """``whole`` cut into volumes of at most ``max_bytes`` in ``folder`` (each written whole by
    :func:`theory.output.replace_durably`), then its manifest; returns the manifest's path."""
    if max_bytes < 1:
        raise InputError(f"volumes of {max_bytes} bytes: a volume holds at least one byte")
    digest, size = file_sha256(whole), whole.stat().st_size
    stem, count = f"{name}-{digest[:12]}", max(1, math.ceil(size / max_bytes))
    entries = []
    with whole.open("rb") as source:
        for k in range(1, count + 1):
            data = source.read(max_bytes)
            target = folder / volume_name(stem, k, count)
            replace_durably(target, lambda tmp, data=data: tmp.write_bytes(data))
            entries.append({"name": target.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format": FORMAT, "whole": {"name": whole.name, "bytes": size, "sha256": digest}, "volumes": entries}
    path = folder / f"{stem}{MANIFEST}"
    write_text_atomically(path, json.dumps(manifest, indent=1))
    return path


def manifest_problem(manifest: object, stem: str) -> str | None:
    """Why ``manifest`` is not the manifest of the volumes ``stem`` (None: it is): its format, the whole's name,
    bytes and SHA-256 (whose first 12 digits end the stem), the volumes named in order 1..n, their bytes adding up
    to the whole's."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"not a manifest of volumes (format {FORMAT})"
    whole, entries = manifest.get("whole"), manifest.get("volumes")
    if not (isinstance(whole, dict) and isinstance(whole.get("name"), str) and isinstance(whole.get("bytes"), int)
            and isinstance(whole.get("sha256"), str)):  # fmt: skip
        return "its whole is not a name, bytes and a SHA-256"
    if not re.fullmatch(r"[A-Za-z0-9_=,+-][A-Za-z0-9_.=,+-]*", whole["name"]) or stem_of(Path(whole["name"])):
        return f"its whole's name {whole['name']!r} is not a plain file name beside its volumes"
    if not stem.endswith("-" + whole["sha256"][:12]) or not re.fullmatch(r"[0-9a-f]{64}", whole["sha256"]):
        return f"its whole's SHA-256 {whole['sha256'][:12]!r} is not the one its name ends in"
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        return "its volumes are not a list"
    for k, entry in enumerate(entries, 1):
        if entry.get("name") != volume_name(stem, k, len(entries)):
            return f"its volume {k} is named {entry.get('name')!r}, not {volume_name(stem, k, len(entries))!r}"
        if not isinstance(entry.get("bytes"), int) or entry["bytes"] < 1 or not isinstance(entry.get("sha256"), str):
            return f"its volume {k} has no bytes or SHA-256"
    if sum(e["bytes"] for e in entries) != whole["bytes"]:
        return f"its volumes add up to {sum(e['bytes'] for e in entries)} bytes, the whole is {whole['bytes']}"
    return None


def read_manifest(path: Path) -> dict:
    """The manifest at ``path``, checked (:func:`manifest_problem`; never read through a link): InputError in one
    line otherwise."""
    regular(path)
    try:
        manifest = json.loads(read_text_bounded(path, "manifest of volumes", 2**20))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise InputError(f"{path}: not a manifest of volumes (not JSON)") from None
    problem = manifest_problem(manifest, stem_of(path) or "")
    if problem:
        raise InputError(f"{path}: {problem}; the volumes are not joined")
    return manifest


def regular(path: Path) -> int:
    """The bytes of the regular file ``path``; InputError (one line) for a link, a folder, a FIFO, none."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputError(f"{path}: a symbolic link, never followed; nothing was joined")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file; nothing was joined")
    return info.st_size


def volume_bytes(path: Path, size: int) -> bytes:
    """The ``size`` bytes of the volume at ``path``, opened without following a link (O_NOFOLLOW)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise InputError(f"{path}: a symbolic link, never followed; nothing was joined") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise InputError(f"{path}: not a regular file; nothing was joined")
        return handle.read(size + 1)


def check_volume(path: Path, manifest: dict) -> None:
    """InputError (one line) unless the file at ``path`` is the volume its name says of ``manifest``: named there,
    a regular file (never a link) of its bytes and SHA-256. A volume holding another's bytes is said to be out of
    order."""
    entries = {e["name"]: k for k, e in enumerate(manifest["volumes"], 1)}
    if path.name not in entries:
        raise InputError(f"{path}: an extra volume, not one of the {len(entries)} its manifest names; nothing was "
                         "joined")  # fmt: skip
    k = entries[path.name]
    entry = manifest["volumes"][k - 1]
    size = regular(path)
    data = volume_bytes(path, entry["bytes"]) if size == entry["bytes"] else b""
    digest = hashlib.sha256(data).hexdigest()
    if size == entry["bytes"] and digest == entry["sha256"]:
        return
    other = next((j for j, e in enumerate(manifest["volumes"], 1) if e["sha256"] == digest and j != k), None)
    if other is not None:
        raise InputError(f"{path}: holds the bytes of volume {other}, not of volume {k} (out of order); nothing "
                         "was joined")  # fmt: skip
    raise InputError(f"{path}: damaged ({size} bytes, {entry['bytes']} in its manifest, or another SHA-256); "
                     "nothing was joined")  # fmt: skip


def join(manifest_path: Path, target: Path) -> None:
    """The volumes beside ``manifest_path`` joined into ``target`` (written whole by
    :func:`theory.output.replace_durably`), after every volume is checked (:func:`check_volume`): a missing one, a
    file of the stem that the manifest does not name (an extra volume), a damaged or reordered one, a link is one
    line and nothing is written. The whole's SHA-256 is checked as it is written: a mismatch leaves no file."""
    manifest = read_manifest(manifest_path)
    folder, stem = manifest_path.parent, stem_of(manifest_path)
    missing = [e["name"] for e in manifest["volumes"] if not os.path.lexists(folder / e["name"])]
    if missing:
        raise InputError(f"{folder}: {len(missing)} of {len(manifest['volumes'])} volumes missing ({missing[0]} "
                         "first); nothing was joined")  # fmt: skip
    for path in sorted(folder.iterdir()):
        if path != manifest_path and stem_of(path) == stem:
            check_volume(path, manifest)

    def write(tmp: Path) -> None:
        digest = hashlib.sha256()
        with tmp.open("wb") as out:
            for entry in manifest["volumes"]:
                data = volume_bytes(folder / entry["name"], entry["bytes"])
                digest.update(data)
                out.write(data)
        if digest.hexdigest() != manifest["whole"]["sha256"]:
            raise InputError(f"{manifest_path}: the joined volumes are not the whole it names; nothing was joined")

    replace_durably(target, write)


@dataclass
class Collected:
    """One set of volumes in a collection: its folder, the volumes there of how many, and the joined whole (None
    while the set is partial)."""

    stem: str
    folder: Path
    present: int
    count: int
    joined: Path | None


def collect(files: Sequence[Path], into: Path) -> list[Collected]:
    """The volumes and manifests among ``files`` (one call's or several calls', a volume twice allowed) gathered
    into ``into/STEM/`` (kept there across calls: a later call's volumes complete a set), and each set that is
    whole joined there into its whole (:func:`join`). Every file is checked first (:func:`check_volume`; a set
    needs its manifest, given or gathered before; two manifests of one set must agree): one that is not is one
    line before anything is written. A partial set is kept, not joined."""
    manifests: dict[str, dict] = {}
    for path in sorted(files):
        stem = stem_of(path)
        if stem is None:
            raise InputError(f"{path}: not a volume (STEM.K-of-N.vol) or a manifest (STEM{MANIFEST})")
        if path.name.endswith(MANIFEST):
            manifest = read_manifest(path)
            if manifests.setdefault(stem, manifest) != manifest:
                raise InputError(f"{path}: another manifest of {stem} says otherwise; nothing was joined")
    refuse_linked(into)
    for stem in {stem_of(p) for p in files}:
        kept = into / stem / f"{stem}{MANIFEST}"
        if os.path.lexists(kept):
            if manifests.setdefault(stem, read_manifest(kept)) != read_manifest(kept):
                raise InputError(f"{kept}: the manifest gathered before says otherwise than the one given")
        elif stem not in manifests:
            raise InputError(f"{stem}: volumes without their manifest {stem}{MANIFEST} (given or gathered before)")
    for path in files:
        if not path.name.endswith(MANIFEST):
            check_volume(path, manifests[stem_of(path)])
    for stem, manifest in manifests.items():  # every file checked: now written
        (into / stem).mkdir(parents=True, exist_ok=True)
        kept = into / stem / f"{stem}{MANIFEST}"
        if not kept.exists():
            write_text_atomically(kept, json.dumps(manifest, indent=1))
    for path in files:
        target, manifest = into / stem_of(path) / path.name, manifests[stem_of(path)]
        if not path.name.endswith(MANIFEST) and not same_volume(target, manifest):
            data = volume_bytes(path, path.stat().st_size)
            replace_durably(target, lambda tmp, data=data: tmp.write_bytes(data))
    return [gathered(into / stem / f"{stem}{MANIFEST}", manifest) for stem, manifest in sorted(manifests.items())]


def same_volume(path: Path, manifest: dict) -> bool:
    """Whether ``path`` holds (a regular file, not a link) the volume of ``manifest`` its name says."""
    entry = next((e for e in manifest["volumes"] if e["name"] == path.name), None)
    if entry is None or path.is_symlink() or not path.is_file() or path.stat().st_size != entry["bytes"]:
        return False
    return file_sha256(path) == entry["sha256"]


def gathered(kept: Path, manifest: dict) -> Collected:
    """The set whose manifest is ``kept``: joined where every volume is there (once: a whole there already of its
    SHA-256 is kept as it is)."""
    folder, stem = kept.parent, stem_of(kept) or ""
    present = sum(1 for e in manifest["volumes"] if (folder / e["name"]).is_file())
    count, whole = len(manifest["volumes"]), folder / manifest["whole"]["name"]
    if present < count:
        return Collected(stem, folder, present, count, None)
    done = whole.is_file() and not whole.is_symlink() and whole.stat().st_size == manifest["whole"]["bytes"]
    if not (done and file_sha256(whole) == manifest["whole"]["sha256"]):
        join(kept, whole)
    return Collected(stem, folder, present, count, whole)


def refuse_linked(into: Path) -> None:
    """InputError (one line) where the collection folder ``into`` or one of its sets' folders is a symbolic link."""
    for path in [into, *(into.iterdir() if into.is_dir() and not into.is_symlink() else ())]:
        if path.is_symlink():
            raise InputError(f"{path}: a symbolic link; volumes are never gathered through one")
