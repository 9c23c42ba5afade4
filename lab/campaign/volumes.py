"""A large run's state out of a lease in volumes, over successive calls of the device tool (the format:
:mod:`lab.records.volumes`). An unfinished run whose state does not fit one archive (a DynaFed arm: its clients'
Adam moments, 206 MB) is cut into ``STORE/campaign/volumes/NAME/``: a state archive of that run alone, as volumes of
at most CAMPAIGN_MAX_FILE_MIB, and their manifest. Each pack puts into OUT as many of its volumes as the tool's
limits leave room for, those not yet sent in an earlier call first (then, with room left, the others again: a call
whose files were lost), each with its manifest; ``sent.json`` there records which volume went out in which call (a
call is one ``watch``: each of its packs chooses again, and its last choice is what went out). The cut follows the
run (cut again when its files change) until a volume of it has gone out in an earlier call; from then on it stays
until every volume has gone out, so that what comes home is one state.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab.records.lease import STATE, taken, write_tar
from lab.records.volumes import MANIFEST, read_manifest, split, stem_of
from theory.errors import InputError
from theory.output import refuse_link, replace_durably, write_text_atomically

SENT = "sent.json"  # in STORE/campaign/volumes/NAME: {"source": its files' sizes and times, "manifest", "sent"}


@dataclass
class Large:
    """An unfinished run whose state does not fit one archive: its task, its folder (``runs/NAME``) in the store,
    and the files its state takes (read only when it is cut)."""

    name: str
    run: str
    folder: Path
    names: list[str]


@dataclass
class Sent:
    """What one pack sent of the large states: the files written into OUT; the tasks whose every volume has gone
    out (with this call); a line for each that is still partial; and the runs whose state could not be read."""

    files: list[Path] = field(default_factory=list)
    complete: list[str] = field(default_factory=list)
    partial: dict[str, str] = field(default_factory=dict)
    restart: dict[str, str] = field(default_factory=dict)


@dataclass
class Cut:
    """A large state cut into volumes: its manifest, the volumes' entries, the record, the volumes sent before."""

    item: Large
    manifest: Path
    entries: list[dict]
    record: dict
    earlier: set[str]


def fingerprint(item: Large) -> list:
    """The sizes and times of the run's state files: a change says the run went on."""
    found = []
    for name in item.names:
        path = item.folder / name
        if path.is_file() and not path.is_symlink():
            info = path.stat()
            found.append([name, info.st_size, info.st_mtime_ns])
    return found


def load(folder: Path) -> dict:
    """The record of a cut (``sent.json``); {} where there is none or it is damaged (the state is cut again)."""
    try:
        record = json.loads((folder / SENT).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    ok = isinstance(record, dict) and isinstance(record.get("sent"), dict) and isinstance(record.get("manifest"), str)
    ok = ok and "/" not in record["manifest"] and record["manifest"].endswith(MANIFEST)  # a name in its folder
    return record if ok else {}


def cut(
    item: Large, store: Path, read: Callable[[Large], list | None], max_file: int, every: list, call: str
) -> Cut | str:
    """The run's cut in ``STORE/campaign/volumes/NAME``: the one there where it is whole and either the run's files
    are as they were or a volume of it went out in an earlier call and some have not yet; else the state read now
    (``read``: its files, None where its checkpoint could not be read) cut anew. A string: why there is none."""
    folder = store / "campaign" / "volumes" / item.run.split("/", 1)[1]
    refuse_link(folder.parent, "the campaign's volumes folder")
    refuse_link(folder, "the campaign's volumes folder")
    record, source = load(folder), fingerprint(item)
    manifest = old = (folder / record["manifest"]) if record else None
    try:
        entries = read_manifest(manifest)["volumes"] if manifest else []
    except InputError:
        entries = []
    whole = bool(entries) and all((folder / e["name"]).is_file() for e in entries)
    names = {e["name"] for e in entries}
    earlier = {v for v, c in record.get("sent", {}).items() if c != call and v in names}
    if whole and (record.get("source") == source or 0 < len(earlier) < len(entries)):
        return Cut(item, manifest, entries, record, earlier)
    files = read(item)
    if files is None:
        return "its checkpoint.pt is a symbolic link or not a file, never read: its state did not come back"
    folder.mkdir(parents=True, exist_ok=True)
    tar = folder / f"{STATE}-{folder.name}.tar"
    replace_durably(tar, lambda tmp: write_tar(tmp, [*every, *files]))
    manifest = split(tar, folder, f"{STATE}-{folder.name}", max_file)
    tar.unlink()
    entries = read_manifest(manifest)["volumes"]
    same = old is not None and old.name == manifest.name
    if old is not None and not same:  # the earlier cut's files, ours: the ones its manifest names
        for path in [old, *(folder / n for n in names)]:
            path.unlink(missing_ok=True)
    record = {"source": source, "manifest": manifest.name, "sent": record.get("sent", {}) if same else {}}
    write_text_atomically(folder / SENT, json.dumps(record, indent=1))
    return Cut(item, manifest, entries, record, earlier if same else set())


def choose(cuts: list[Cut], files_left: int, bytes_left: int) -> dict[str, list[dict]]:
    """Each cut's volumes for this call, within ``files_left`` files and ``bytes_left`` bytes (a cut's manifest
    counted with its first volume): the volumes not sent before first, the cuts in order, then the others again."""
    order = [(c, e) for c in cuts for e in c.entries if e["name"] not in c.earlier]
    order += [(c, e) for c in cuts for e in c.entries if e["name"] in c.earlier]
    chosen: dict[str, list[dict]] = {c.item.name: [] for c in cuts}
    for c, entry in order:
        first = not chosen[c.item.name]
        files, size = 1 + first, entry["bytes"] + (c.manifest.stat().st_size if first else 0)
        if files <= files_left and size <= bytes_left:
            chosen[c.item.name].append(entry)
            files_left, bytes_left = files_left - files, bytes_left - size
    return chosen


def send(
    large: list[Large], read: Callable[[Large], list | None], store: Path, out: Path, room: tuple[int, int, int],
    every: list, call: str, ours: Callable[[Path], bool],
) -> Sent:  # fmt: skip
    """The large states' volumes for this call into ``out`` (``room``: files left, bytes left, the largest file),
    the record of what went out updated; only the packing's own files in ``out`` (``ours``) are written over or
    removed, a volume whose name another file holds is left for a later call."""
    sent, cuts = Sent(), []
    for item in large:
        found = cut(item, store, read, room[2], every, call)
        if isinstance(found, str):
            sent.restart[item.name] = found
        else:
            cuts.append(found)
    chosen = choose(cuts, room[0], room[1])
    for c in cuts:
        volumes = [c.manifest.parent / e["name"] for e in chosen[c.item.name]]
        volumes = [p for p in volumes if not taken(out / p.name, ours)]
        if taken(out / c.manifest.name, ours):  # another's file holds its manifest's name: none goes out now
            volumes = []
        written = [copy(p, out) for p in ([c.manifest, *volumes] if volumes else [])]
        sent.files += written
        went = {p.name for p in written} - {c.manifest.name}
        c.record["sent"] = {v: k for v, k in c.record["sent"].items() if k != call} | dict.fromkeys(went, call)
        write_text_atomically(c.manifest.parent / SENT, json.dumps(c.record, indent=1))
        said(c, went, sent)
    for old in out.iterdir() if out.is_dir() else []:  # the packing's earlier volumes not sent now
        if stem_of(old) is not None and old not in sent.files and ours(old):
            old.unlink()
    return sent


def copy(path: Path, out: Path) -> Path:
    """``path`` into ``out`` under its name, written whole (:func:`theory.output.replace_durably`)."""
    target = out / path.name
    replace_durably(target, lambda tmp: shutil.copyfile(path, tmp))
    return target


def said(c: Cut, went: set[str], sent: Sent) -> None:
    """The summary's word on a cut after this call: complete, or how many of its volumes are out and what brings
    the rest."""
    out, count = c.earlier | went, len(c.entries)
    if len(out) == count:
        sent.complete.append(c.item.name)
        return
    new = len(went - c.earlier)
    calls = math.ceil((count - len(out)) / new) if new else 0
    more = (f"{calls} more call{'s' * (calls > 1)} of `bash scripts/gpu-campaign.sh wait 0` on the warm machine bring "
            "the rest") if new else "no room in this call: `wait 0` again once there is"  # fmt: skip
    sent.partial[c.item.name] = (f"{len(out)} of {count} volumes of its state back with this call ({new} new; "
                                 f"{c.manifest.name.removesuffix(MANIFEST)}); {more}")  # fmt: skip
