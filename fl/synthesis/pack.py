"""Synthetic sets made on one machine (a GPU lease), reused on another: pack a generator cache's sets, unpack them.

A Fedssyn generator cache (:func:`fl.synthesis.fedssyn.synthesize_client`) holds one folder per client,
``client{i}-{key}``, with the key a hash of what determines the trained generator: the dataset, D_i (its sample
indices), the training settings, the run seed and i, written out in the folder's ``key.json`` together with the key
of every synthetic set (ñ, sample_epoch, sample_steps, seed). :func:`pack` copies, of every finished folder, the
synthetic sets (``synthetic-*.npz`` and their ``.json``), ``generator.json`` (subset size and class counts, losses,
seconds, parameters: the small metadata) and ``key.json`` into tar files of at most ``max_bytes`` each (a file the
device tool brings back must stay under 16 MiB), each with a ``manifest.json`` of its folders' keys and files'
SHA-256. The generators' weights stay behind (a width-32 DDPM's last checkpoint is 5.5 MB, twenty of them more than
a lease brings back).

:func:`unpack` checks every archive before writing anything: each folder's name is the hash of its recorded key
(so a folder cannot be renamed onto another client's or another D_i's key), each set's file name the hash of its
set key, each file its SHA-256; a file already in the cache must be identical. It writes the folders into the
cache with a ``packed.json`` marker. A run then finds a folder only where its own D_i, settings and seed hash to
the same key, so sets made for another D_i (another dataset, partition or seed) are never used: such a run trains
its own generators. A run that asks an unpacked folder for a set it lacks (another ñ, say) stops with one line.

    python -m fl.synthesis pack CACHE_DIR OUT_DIR [--name ddpm_sets] [--max-mib 15] [--generator ddpm]
    python -m fl.synthesis unpack ARCHIVE... [--cache-dir results/synthetic]
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from fl.atomic import write_atomically
from fl.synthesis.fedssyn import KEY_FILE, PACKED_FILE, cache_key
from theory.errors import InputError

MANIFEST = "manifest.json"
FOLDER = re.compile(r"^client(\d+)-([0-9a-f]{16})$")
SET = re.compile(r"^synthetic-([0-9a-f]{16})\.(npz|json)$")
DEFAULT_MAX_BYTES = 15 * 2**20  # under the device tool's 16 MiB per file, with room for the tar headers


@dataclass(frozen=True)
class Folder:
    """A finished client folder: its name, the files to pack (name -> path) and its keys."""

    name: str
    files: dict[str, Path]
    keys: dict

    @property
    def size(self) -> int:
        return sum(512 + -(-p.stat().st_size // 512) * 512 for p in self.files.values())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_folder_name(name: str, keys: dict) -> None:
    """InputError unless ``name`` is client{i}-{hash of the generator key} with i the key's client."""
    match = FOLDER.match(name)
    generator = keys.get("generator")
    if not match or not isinstance(generator, dict):
        raise InputError(f"{name}: not a generator folder with a recorded key")
    if int(match.group(1)) != generator.get("client") or match.group(2) != cache_key(generator):
        raise InputError(f"{name}: the folder's name does not match its recorded key (client, D_i, settings, seed)")


def finished_folders(cache_dir: Path, generator: str | None = None) -> tuple[list[Folder], list[str]]:
    """The folders of ``cache_dir`` that can be packed (training done, key recorded, at least one set whose file
    name matches its recorded key), sorted by name; and a note for every client folder left out, with why."""
    folders, notes = [], []
    for folder in sorted(cache_dir.glob("client*-*")):
        if not folder.is_dir() or not FOLDER.match(folder.name):
            continue
        keys_path = folder / KEY_FILE
        if not (folder / "generator.json").exists() or not keys_path.exists():
            notes.append(f"{folder.name}: not finished (no generator.json or {KEY_FILE})")
            continue
        keys = json.loads(keys_path.read_text())
        try:
            _check_folder_name(folder.name, keys)
        except InputError as error:
            notes.append(str(error))
            continue
        if generator is not None and keys["generator"].get("config", {}).get("generator") != generator:
            continue
        files = {"generator.json": folder / "generator.json", KEY_FILE: keys_path}
        for set_name, set_key in keys.get("sets", {}).items():
            npz, meta = folder / set_name, folder / set_name.replace(".npz", ".json")
            if (
                SET.match(set_name)
                and set_name == f"synthetic-{cache_key(set_key)}.npz"
                and npz.exists()
                and meta.exists()
            ):
                files[npz.name], files[meta.name] = npz, meta
        if len(files) == 2:
            notes.append(f"{folder.name}: no synthetic set yet")
            continue
        folders.append(Folder(folder.name, files, keys))
    return folders, notes


def pack(cache_dir: Path, out_dir: Path, name: str = "synthetic_sets", max_bytes: int = DEFAULT_MAX_BYTES,
         generator: str | None = None) -> tuple[list[Path], list[str]]:  # fmt: skip
    """Pack the finished folders of ``cache_dir`` into ``out_dir/NAME.tar`` (or ``NAME-1.tar``, ``NAME-2.tar``,
    ... where one file would exceed ``max_bytes``), each written whole before it replaces an older one; older parts
    of that name beyond the new count are removed. Returns the archives and the notes of
    :func:`finished_folders`. Nothing to pack: no archive, and none removed."""
    if not cache_dir.is_dir():
        raise InputError(f"{cache_dir}: no such generator cache")
    folders, notes = finished_folders(cache_dir, generator)
    if not folders:
        return [], notes
    parts: list[list[Folder]] = [[]]
    room, used = max_bytes - 10240 - 1024, 0  # the tar's end blocks; the manifest's header and padding
    for folder in folders:
        cost = folder.size + len(json.dumps({folder.name: _entry(folder, "0" * 64)})) + 64
        if cost > room:
            raise InputError(f"{folder.name}: {cost} bytes, more than one archive may hold ({max_bytes})")
        if parts[-1] and used + cost > room:
            parts.append([])
            used = 0
        parts[-1].append(folder)
        used += cost
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [f"{name}.tar"] if len(parts) == 1 else [f"{name}-{k}.tar" for k in range(1, len(parts) + 1)]
    written = []
    for archive_name, part in zip(names, parts, strict=True):
        path = out_dir / archive_name
        write_atomically(path, lambda tmp, part=part: _write_archive(tmp, part))
        if path.stat().st_size > max_bytes:
            raise InputError(f"{path}: {path.stat().st_size} bytes, over the limit of {max_bytes}")
        written.append(path)
    pattern = re.compile(rf"{re.escape(name)}(-\d+)?\.tar")
    for path in out_dir.iterdir():
        if pattern.fullmatch(path.name) and path not in written:
            path.unlink()
    return written, notes


def _entry(folder: Folder, digest: str | None = None) -> dict:
    files = {f: digest or _sha256(p.read_bytes()) for f, p in sorted(folder.files.items())}
    return {"keys": folder.keys, "files": files}


def _write_archive(path: Path, folders: list[Folder]) -> None:
    manifest = {"format": 1, "folders": {folder.name: _entry(folder) for folder in folders}}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as archive:
        _add(archive, MANIFEST, json.dumps(manifest).encode())
        for folder in folders:
            for file, source in sorted(folder.files.items()):
                _add(archive, f"{folder.name}/{file}", source.read_bytes())


def _add(archive: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(payload), 0o644, 0
    archive.addfile(info, io.BytesIO(payload))


def read_archive(path: Path) -> tuple[dict, dict[str, dict[str, bytes]]]:
    """The manifest and every folder's files of one archive, checked (see the module docstring): InputError
    naming the archive and what is wrong."""
    try:
        with tarfile.open(path, "r") as archive:
            members = {m.name: m for m in archive.getmembers() if m.isfile()}
            if MANIFEST not in members:
                raise InputError(f"{path}: no {MANIFEST}: not a pack of synthetic sets")
            manifest = json.loads(archive.extractfile(members[MANIFEST]).read())
            contents: dict[str, dict[str, bytes]] = {}
            for folder_name, entry in manifest.get("folders", {}).items():
                _check_folder_name(folder_name, entry.get("keys", {}))
                sets = entry["keys"].get("sets", {})
                contents[folder_name] = {}
                for file, digest in entry.get("files", {}).items():
                    if "/" in file or file.startswith("."):
                        raise InputError(f"{folder_name}/{file}: not a file name")
                    if SET.match(file):
                        npz = file.removesuffix(".json") + ".npz" if file.endswith(".json") else file
                        if npz != f"synthetic-{cache_key(sets.get(npz, {}))}.npz":
                            raise InputError(f"{folder_name}/{file}: its name does not match its recorded set key")
                    member = members.get(f"{folder_name}/{file}")
                    if member is None:
                        raise InputError(f"{folder_name}/{file}: in the manifest, not in the archive")
                    payload = archive.extractfile(member).read()
                    if _sha256(payload) != digest:
                        raise InputError(f"{folder_name}/{file}: its SHA-256 differs from the manifest's")
                    contents[folder_name][file] = payload
    except (tarfile.TarError, json.JSONDecodeError, KeyError, AttributeError) as error:
        raise InputError(f"{path}: not a readable pack of synthetic sets ({error})") from None
    except InputError as error:
        raise InputError(f"{path}: {error}") from None
    return manifest, contents


def unpack(archives: list[Path], cache_dir: Path) -> list[str]:
    """Check every archive (:func:`read_archive`) and every file already in ``cache_dir``, then write the folders
    (with a ``packed.json`` marker where no weights are there); nothing is written when any check fails. Returns
    the folders written or completed."""
    plan: dict[Path, bytes] = {}
    for archive in archives:
        _, contents = read_archive(archive)
        for folder_name, files in contents.items():
            folder = cache_dir / folder_name
            for file, payload in files.items():
                target = folder / file
                if file == KEY_FILE:
                    payload = _merged_keys(target, plan.get(target), payload)
                elif target.exists() and target.read_bytes() != payload:
                    raise InputError(f"{target}: already in the cache and different from {archive.name}'s")
                plan[target] = payload
            if not any(folder.glob("generator_epoch*.pt")):
                marker = {"archive": archive.name, "sets": sorted(f for f in files if f.endswith(".npz"))}
                plan[folder / PACKED_FILE] = json.dumps(marker).encode()
    for target, payload in plan.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, lambda tmp, payload=payload: tmp.write_bytes(payload))
    return sorted({target.parent.name for target in plan})


def _merged_keys(existing: Path, planned: bytes | None, incoming: bytes) -> bytes:
    """A folder's key.json when it is already in the cache (or planned by an earlier archive): the generator key
    must agree; the set keys are united."""
    theirs = json.loads(incoming)
    if planned is not None:
        mine = json.loads(planned)
    elif existing.exists():
        mine = json.loads(existing.read_text())
    else:
        return incoming
    if mine.get("generator") not in (None, theirs["generator"]):
        raise InputError(f"{existing}: records another generator key than the pack's")
    return json.dumps({"generator": theirs["generator"], "sets": {**mine.get("sets", {}), **theirs["sets"]}}).encode()
