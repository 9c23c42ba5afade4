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

What :func:`pack` writes it records in ``OUT_DIR/.synthetic-pack.json`` (each archive's SHA-256 and the cache it
came from): it replaces or removes an archive of that name only where the record says it wrote it from the same
cache and the file is unchanged since; anything else there (a user's own ``NAME.tar``, another cache's parts) is
refused in one line unless ``overwrite``. ``NAME`` is a plain file name.

:func:`unpack` checks every archive before writing anything: each folder's name is the hash of its recorded key
(so a folder cannot be renamed onto another client's or another D_i's key; names are matched whole, so a newline
or any other control character fails), each set's file name the hash of its set key, each file its SHA-256; a file
already in the cache must be identical, and a symbolic link in the cache folder is refused, never followed. Members
are streamed, never read whole, and an archive may expand to at most :data:`EXPANSION` times its size
(:data:`MIN_EXPANSION` at least; a member at most :data:`MAX_MEMBER_BYTES`): a decompression bomb is refused before
anything is written. No read asks more than :data:`MAX_HEADER_READ` bytes (:func:`theory.output.capped_tar`, the
lease's archives' reader too): a GNU long name or pax header that claims a GiB is refused before it is read.
It writes the folders into the cache with a ``packed.json`` marker. A run then finds a folder
only where its own D_i, settings and seed hash to the same key, so sets made for another D_i (another dataset,
partition or seed) are never used: such a run trains its own generators. A run that asks an unpacked folder for a
set it lacks (another ñ, say) stops with one line.

    python -m fl.synthesis pack CACHE_DIR OUT_DIR [--name ddpm_sets] [--max-mib 15] [--generator ddpm] [--overwrite]
    python -m fl.synthesis unpack ARCHIVE... [--cache-dir results/synthetic]
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import lzma
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from fl.synthesis.fedssyn import KEY_FILE, PACKED_FILE, cache_key
from theory.errors import InputError
from theory.output import capped_tar, file_sha256, read_object, replace_durably, write_text_atomically

MANIFEST = "manifest.json"
FOLDER = re.compile(r"client([0-9]+)-([0-9a-f]{16})")  # matched whole (fullmatch): no newline, nothing after
SET = re.compile(r"synthetic-([0-9a-f]{16})\.(npz|json)")
DEFAULT_MAX_BYTES = 15 * 2**20  # under the device tool's 16 MiB per file, with room for the tar headers
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # an archive name: a plain file name, no folder
RECORD = ".synthetic-pack.json"  # in OUT_DIR: the archives pack wrote there (SHA-256, size, cache)
EXPANSION, MIN_EXPANSION = 8, 64 * 2**20  # an archive unpacks to at most max(MIN_EXPANSION, EXPANSION x its size)
MAX_MEMBER_BYTES = 2**30  # one file of a pack (a pack writes plain tar files of at most --max-mib)
MAX_MEMBERS = 100_000
MAX_MANIFEST_BYTES = 16 * 2**20
# the most one read of an archive may ask (theory.output.capped_tar): the manifest or a key.json whole, a member's
# 1 MiB blocks, a header's own data (a GNU long name, a pax header); a header claiming more is refused unread
MAX_HEADER_READ = MAX_MANIFEST_BYTES + 1
KEPT_FILES = ("generator.json", "key.json")  # besides the sets (SET), the files a pack holds of a folder


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


def _shown(name: str) -> str:
    """``name`` as a message shows it: quoted with escapes when it holds a newline or another control character."""
    return name if name.isprintable() else repr(name)


def _check_folder_name(name: str, keys: dict) -> None:
    """InputError unless ``name`` is client{i}-{hash of the generator key} with i the key's client."""
    match = FOLDER.fullmatch(name)
    generator = keys.get("generator") if isinstance(keys, dict) else None
    if not match or not isinstance(generator, dict):
        raise InputError(f"{_shown(name)}: not a generator folder with a recorded key")
    if int(match.group(1)) != generator.get("client") or match.group(2) != cache_key(generator):
        raise InputError(
            f"{_shown(name)}: the folder's name does not match its recorded key (client, D_i, settings, seed)"
        )


def finished_folders(cache_dir: Path, generator: str | None = None) -> tuple[list[Folder], list[str]]:
    """The folders of ``cache_dir`` that can be packed (training done, key recorded, at least one set whose file
    name matches its recorded key), sorted by name; and a note for every client folder left out, with why."""
    folders, notes = [], []
    for folder in sorted(cache_dir.glob("client*-*")):
        if not folder.is_dir() or not FOLDER.fullmatch(folder.name):
            continue
        keys_path = folder / KEY_FILE
        linked = sorted(p.name for p in folder.iterdir() if p.is_symlink())
        if folder.is_symlink() or linked:  # a file there may be anyone's: never read through a link, nor packed
            notes.append(f"{folder.name}: holds a symbolic link ({', '.join(linked) or 'the folder'}); left out")
            continue
        if not (folder / "generator.json").exists() or not keys_path.exists():
            notes.append(f"{folder.name}: not finished (no generator.json or {KEY_FILE})")
            continue
        try:
            keys = read_object(keys_path, "generator cache's key file")
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
                SET.fullmatch(set_name)
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
         generator: str | None = None, overwrite: bool = False) -> tuple[list[Path], list[str]]:  # fmt: skip
    """Pack the finished folders of ``cache_dir`` into ``out_dir/NAME.tar`` (or ``NAME-1.tar``, ``NAME-2.tar``,
    ... where one file would exceed ``max_bytes``), each written whole before it replaces an older one; older parts
    of that name beyond the new count are removed. Only archives pack wrote from this cache, unchanged since
    (:data:`RECORD`), are replaced or removed: any other file of those names is refused in one line, before
    anything is written, unless ``overwrite``. Returns the archives and the notes of :func:`finished_folders`.
    Nothing to pack: no archive, and none removed."""
    if not NAME.fullmatch(name):
        raise InputError(f"--name {name!r}: an archive name is a plain file name (letters, digits, '.', '_', '-')")
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
    record = _pack_record(out_dir)
    pattern = re.compile(rf"{re.escape(name)}(-[0-9]+)?\.tar")
    present = sorted(p for p in out_dir.iterdir() if pattern.fullmatch(p.name)) if out_dir.is_dir() else []
    if not overwrite:
        for path in present:
            why = _not_ours(path, record.get(path.name), cache_dir)
            if why:
                raise InputError(
                    f"{path}: {why}; pack into another folder or --name, or pass --overwrite to replace it"
                )
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [f"{name}.tar"] if len(parts) == 1 else [f"{name}-{k}.tar" for k in range(1, len(parts) + 1)]
    written = []
    for archive_name, part in zip(names, parts, strict=True):
        path = out_dir / archive_name
        replace_durably(path, lambda tmp, part=part: _write_archive(tmp, part))
        if path.stat().st_size > max_bytes:
            raise InputError(f"{path}: {path.stat().st_size} bytes, over the limit of {max_bytes}")
        written.append(path)
        record[archive_name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size,
                                "cache": str(cache_dir.resolve())}  # fmt: skip
    for path in present:
        if path not in written:
            path.unlink()
            record.pop(path.name, None)
    write_text_atomically(out_dir / RECORD, json.dumps(record, indent=2))
    return written, notes


def _pack_record(out_dir: Path) -> dict:
    """What pack wrote into ``out_dir`` (:data:`RECORD`): archive name -> sha256, bytes, cache; {} when none."""
    try:
        record = json.loads((out_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _not_ours(path: Path, entry: object, cache_dir: Path) -> str | None:
    """Why pack may not replace or remove ``path`` (its record ``entry``), None when it may: it wrote the file from
    ``cache_dir`` and the file is unchanged since."""
    if not isinstance(entry, dict) or not path.is_file() or path.is_symlink():
        return "not an archive pack wrote here"
    if entry.get("bytes") != path.stat().st_size or entry.get("sha256") != file_sha256(path):
        return "changed since pack wrote it"
    if entry.get("cache") != str(cache_dir.resolve()):
        return f"holds the sets of another cache ({entry.get('cache')})"
    return None


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


def _check_file_name(folder_name: str, file: str, sets: dict) -> None:
    """InputError unless ``file`` is one a pack holds of a folder: generator.json, key.json, or a set whose name is
    the hash of its recorded key (matched whole: a newline or other control character fails)."""
    if not isinstance(file, str) or (file not in KEPT_FILES and not SET.fullmatch(file)):
        raise InputError(f"{_shown(folder_name)}/{_shown(str(file))}: not a file a pack holds")
    if SET.fullmatch(file):
        npz = file.removesuffix(".json") + ".npz" if file.endswith(".json") else file
        if npz != f"synthetic-{cache_key(sets.get(npz, {}))}.npz":
            raise InputError(f"{folder_name}/{file}: its name does not match its recorded set key")


def _stream_sha256(source, size: int) -> str:
    digest, left = hashlib.sha256(), size
    for block in iter(lambda: source.read(1 << 20), b""):
        left -= len(block)
        if left < 0:
            raise InputError("a member longer than its header says")
        digest.update(block)
    return digest.hexdigest()


def _members(archive: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    """The archive's file members by name, read header by header: at most :data:`MAX_MEMBERS`, each at most
    :data:`MAX_MEMBER_BYTES`, all together at most what ``path`` may expand to (:data:`EXPANSION`)."""
    limit = max(MIN_EXPANSION, EXPANSION * path.stat().st_size)
    members, total = {}, 0
    for count, member in enumerate(archive, 1):
        if count > MAX_MEMBERS:
            raise InputError(f"more than {MAX_MEMBERS} members: not a pack of synthetic sets")
        if not member.isfile():
            continue
        if member.size > MAX_MEMBER_BYTES:
            raise InputError(f"{member.name!r}: {member.size} bytes, more than a pack's file may hold "
                             f"({MAX_MEMBER_BYTES})")  # fmt: skip
        total += member.size
        if total > limit:
            raise InputError(
                f"expands to more than {limit} bytes ({EXPANSION} times its size, {MIN_EXPANSION} at least): "
                "refused as a decompression bomb"
            )
        members[member.name] = member
    return members


def read_archive(path: Path) -> tuple[dict, dict[str, dict[str, tuple[str, int]]], dict[str, bytes]]:
    """The manifest of one archive and, of every folder's files, (SHA-256, size), checked (see the module
    docstring) with every member streamed; and the small key.json files' bytes by member name. InputError naming the
    archive and what is wrong."""
    try:
        with capped_tar(path, MAX_HEADER_READ, "a pack of synthetic sets") as archive:
            members = _members(archive, path)
            if MANIFEST not in members:
                raise InputError(f"no {MANIFEST}: not a pack of synthetic sets")
            if members[MANIFEST].size > MAX_MANIFEST_BYTES:
                raise InputError(f"its {MANIFEST} is over {MAX_MANIFEST_BYTES} bytes: not a pack of synthetic sets")
            manifest = json.loads(archive.extractfile(members[MANIFEST]).read())
            contents: dict[str, dict[str, tuple[str, int]]] = {}
            keys: dict[str, bytes] = {}
            for folder_name, entry in manifest.get("folders", {}).items():
                _check_folder_name(folder_name, entry.get("keys", {}))
                sets = entry["keys"].get("sets", {})
                contents[folder_name] = {}
                for file, digest in entry.get("files", {}).items():
                    _check_file_name(folder_name, file, sets)
                    member = members.get(f"{folder_name}/{file}")
                    if member is None:
                        raise InputError(f"{folder_name}/{file}: in the manifest, not in the archive")
                    if file == KEY_FILE:
                        if member.size > MAX_MANIFEST_BYTES:
                            raise InputError(f"{folder_name}/{file}: over {MAX_MANIFEST_BYTES} bytes")
                        keys[member.name] = archive.extractfile(member).read()
                        found = _sha256(keys[member.name])
                    else:
                        found = _stream_sha256(archive.extractfile(member), member.size)
                    if found != digest:
                        raise InputError(f"{folder_name}/{file}: its SHA-256 differs from the manifest's")
                    contents[folder_name][file] = (digest, member.size)
    except (tarfile.TarError, json.JSONDecodeError, KeyError, AttributeError, TypeError, EOFError, OSError,
            zlib.error, lzma.LZMAError) as error:  # fmt: skip
        said = " ".join(str(error).split())  # tarfile's messages may run over several lines
        raise InputError(f"{path}: not a readable pack of synthetic sets ({type(error).__name__}: {said})") from None
    except InputError as error:
        said = str(error)  # a read past the cap already names the archive (theory.output.CappedReads)
        raise InputError(said if said.startswith(f"{path}: ") else f"{path}: {said}") from None
    return manifest, contents, keys


def _no_link(cache_dir: Path, target: Path) -> None:
    """InputError when ``target`` or a folder between ``cache_dir`` and it is a symbolic link (never followed)."""
    for path in (target.parent, target):
        if path.is_symlink():
            raise InputError(f"{path}: a symbolic link in the cache folder; unpack does not follow links (remove it)")


def unpack(archives: list[Path], cache_dir: Path) -> list[str]:
    """Check every archive (:func:`read_archive`: names, keys, SHA-256, sizes, members streamed) and every file
    already in ``cache_dir`` (identical, no symbolic link), then write the folders (with a ``packed.json`` marker
    where no weights are there), streaming each member into place; nothing is written when any check fails.
    Returns the folders written or completed."""
    plan: dict[Path, tuple[Path, str, str] | bytes] = {}  # target -> (archive, member, sha256) or the bytes
    for archive in archives:
        _, contents, keys = read_archive(archive)
        for folder_name, files in contents.items():
            folder = cache_dir / folder_name
            for file, (digest, _) in files.items():
                target = folder / file
                _no_link(cache_dir, target)
                if file == KEY_FILE:
                    planned = plan.get(target)
                    plan[target] = _merged_keys(target, planned if isinstance(planned, bytes) else None,
                                                keys[f"{folder_name}/{file}"])  # fmt: skip
                    continue
                if target.exists() and (not target.is_file() or file_sha256(target) != digest):
                    raise InputError(f"{target}: already in the cache and different from {archive.name}'s")
                plan[target] = (archive, f"{folder_name}/{file}", digest)
            if not folder.is_symlink() and not any(folder.glob("generator_epoch*.pt")):
                marker = {"archive": archive.name, "sets": sorted(f for f in files if f.endswith(".npz"))}
                _no_link(cache_dir, folder / PACKED_FILE)
                plan[folder / PACKED_FILE] = json.dumps(marker).encode()
    opened: dict[Path, tarfile.TarFile] = {}
    try:
        with contextlib.ExitStack() as stack:
            for target, source in plan.items():
                target.parent.mkdir(parents=True, exist_ok=True)
                _no_link(cache_dir, target)
                if isinstance(source, bytes):
                    replace_durably(target, lambda tmp, payload=source: tmp.write_bytes(payload))
                    continue
                archive, name, digest = source
                if archive not in opened:  # headers read as the check read them: bounded (capped_tar)
                    opened[archive] = stack.enter_context(
                        capped_tar(archive, MAX_HEADER_READ, "a pack of synthetic sets")
                    )
                replace_durably(target, lambda tmp, a=opened[archive], n=name, d=digest: _extract(tmp, a, n, d))
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, KeyError) as error:
        raise InputError(f"{cache_dir}: an archive changed while being unpacked ({type(error).__name__})") from None
    return sorted({target.parent.name for target in plan})


def _extract(tmp: Path, archive: tarfile.TarFile, name: str, digest: str) -> None:
    """Stream member ``name`` of ``archive`` into ``tmp``; InputError when it is no longer what was checked."""
    source = archive.extractfile(archive.getmember(name))
    found, written = hashlib.sha256(), 0
    with tmp.open("wb") as handle:
        for block in iter(lambda: source.read(1 << 20), b""):
            written += len(block)
            if written > MAX_MEMBER_BYTES:
                raise InputError(f"{archive.name}: {name} grew while being unpacked")
            found.update(block)
            handle.write(block)
    if found.hexdigest() != digest:
        raise InputError(f"{archive.name}: {name} changed while being unpacked (its SHA-256 differs from the check's)")


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
