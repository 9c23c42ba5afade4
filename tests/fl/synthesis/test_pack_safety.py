"""What ``python -m fl.synthesis pack|unpack`` may write and delete (issue 44, classes 3 and 5), on small hand-made
generator caches (no generator is trained): pack replaces or removes only archives it wrote from the same cache
(another cache's parts and a user's own ``NAME.tar`` are refused in one line unless ``--overwrite``), ``--name`` is a
plain file name; unpack refuses a decompression bomb, a member over the cap, a symbolic link in the cache folder
and a manifest name with a newline or another control character, writing nothing."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

import fl.synthesis.pack as pack_module
from fl.synthesis.__main__ import main
from fl.synthesis.fedssyn import cache_key


def fake_cache(cache: Path, tag: str, clients: int = 3, size: int = 600_000) -> Path:
    """``clients`` finished folders whose names hash their keys, one set of ``size`` random bytes each."""
    rng = np.random.default_rng(len(tag))
    for i in range(clients):
        generator = {"client": i, "tag": tag, "config": {"generator": "ddpm"}}
        folder = cache / f"client{i}-{cache_key(generator)}"
        folder.mkdir(parents=True)
        set_key = {"n_tilde": 8, "tag": tag}
        name = f"synthetic-{cache_key(set_key)}.npz"
        (folder / name).write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        (folder / name.replace(".npz", ".json")).write_text("{}")
        (folder / "generator.json").write_text("{}")
        (folder / "key.json").write_text(json.dumps({"generator": generator, "sets": {name: set_key}}))
    return cache


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    if code:
        assert err.count("\n") == 1 and err.startswith("python -m fl.synthesis: error:"), err
    return code, err


# ------------------------------------------------------------------------------------------------- pack


def test_pack_never_deletes_another_caches_parts(tmp_path, capsys):
    a, b, out = fake_cache(tmp_path / "a", "A"), fake_cache(tmp_path / "b", "B"), tmp_path / "out"
    assert run(["pack", a, out, "--max-mib", "1.5"], capsys)[0] == 0
    parts = files(out)
    assert {"synthetic_sets-1.tar", "synthetic_sets-2.tar"} <= set(parts)
    code, err = run(["pack", b, out], capsys)
    assert code == 2 and "holds the sets of another cache" in err and files(out) == parts
    assert run(["pack", a, out, "--max-mib", "1.5"], capsys)[0] == 0  # the same cache again: replaced
    assert run(["pack", a, out], capsys)[0] == 0  # one archive now: its own older parts go
    assert sorted(p.name for p in out.glob("*.tar")) == ["synthetic_sets.tar"]
    assert run(["pack", b, out, "--overwrite"], capsys)[0] == 0


def test_pack_never_overwrites_a_users_archive(tmp_path, capsys):
    a, out = fake_cache(tmp_path / "a", "A"), tmp_path / "out"
    out.mkdir()
    (out / "synthetic_sets.tar").write_text("my own archive")
    code, err = run(["pack", a, out], capsys)
    assert code == 2 and "not an archive pack wrote here" in err
    assert files(out) == {"synthetic_sets.tar": b"my own archive"}
    assert run(["pack", a, out, "--name", "other"], capsys)[0] == 0
    (out / "other.tar").write_bytes((out / "other.tar").read_bytes()[:-1024])  # changed since pack wrote it
    code, err = run(["pack", a, out, "--name", "other"], capsys)
    assert code == 2 and "changed since pack wrote it" in err
    assert run(["pack", a, out, "--overwrite"], capsys)[0] == 0
    assert tarfile.is_tarfile(out / "synthetic_sets.tar")


@pytest.mark.parametrize("name", ["../x", "sub/x", ".hidden", "x\ny", ""])
def test_pack_names_a_plain_file(tmp_path, capsys, name):
    a, out = fake_cache(tmp_path / "a", "A", clients=1, size=10), tmp_path / "top" / "out"
    code, err = run(["pack", a, out, "--name", name], capsys)
    assert code == 2 and "plain file name" in err and not (tmp_path / "top").exists()


# ----------------------------------------------------------------------------------------------- unpack


def archive_of(path: Path, members: dict[str, bytes], gz: bool = False) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def crafted(folder_name: str | None = None, set_bytes: bytes = b"x" * 100, file_name: str | None = None) -> dict:
    """The members of a one-folder pack (its manifest and files), optionally under another folder or file name."""
    generator = {"client": 0, "config": {"generator": "ddpm"}}
    folder = folder_name or f"client0-{cache_key(generator)}"
    set_key = {"n": 1}
    name = file_name or f"synthetic-{cache_key(set_key)}.npz"
    payloads = {"key.json": json.dumps({"generator": generator, "sets": {name: set_key}}).encode(),
                "generator.json": b"{}", name: set_bytes}  # fmt: skip
    digests = {f: hashlib.sha256(p).hexdigest() for f, p in payloads.items()}
    manifest = {"format": 1, "folders": {folder: {"keys": {"generator": generator, "sets": {name: set_key}},
                                                  "files": digests}}}  # fmt: skip
    return {"manifest.json": json.dumps(manifest).encode(), **{f"{folder}/{f}": p for f, p in payloads.items()}}


def test_unpack_streams_a_pack_into_place(tmp_path, capsys):
    a = fake_cache(tmp_path / "a", "A")
    assert run(["pack", a, tmp_path / "out"], capsys)[0] == 0
    assert run(["unpack", tmp_path / "out" / "synthetic_sets.tar", "--cache-dir", tmp_path / "c"], capsys)[0] == 0
    unpacked = {k: v for k, v in files(tmp_path / "c").items() if not k.endswith("packed.json")}
    assert unpacked == files(a)


def test_unpack_refuses_a_decompression_bomb_before_writing(tmp_path, capsys, monkeypatch):
    """8 MiB of zeros gzip to a few kB: over 8 times the archive's size (the floor lowered to 1 MiB here)."""
    monkeypatch.setattr(pack_module, "MIN_EXPANSION", 2**20)
    bomb = archive_of(tmp_path / "bomb.tar.gz", crafted(set_bytes=bytes(8 * 2**20)), gz=True)
    assert bomb.stat().st_size < 100_000
    code, err = run(["unpack", bomb, "--cache-dir", tmp_path / "cache"], capsys)
    assert code == 2 and "refused as a decompression bomb" in err and not (tmp_path / "cache").exists()
    monkeypatch.setattr(pack_module, "MIN_EXPANSION", 64 * 2**20)
    monkeypatch.setattr(pack_module, "MAX_MEMBER_BYTES", 2**20)
    code, err = run(["unpack", bomb, "--cache-dir", tmp_path / "cache"], capsys)
    assert code == 2 and "more than a pack's file may hold" in err and not (tmp_path / "cache").exists()


def test_unpack_never_follows_a_link_in_the_cache(tmp_path, capsys):
    members = crafted()
    archive = archive_of(tmp_path / "p.tar", members)
    folder_name = next(n for n in members if n != "manifest.json").split("/")[0]
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    (cache / folder_name).symlink_to(elsewhere, target_is_directory=True)
    code, err = run(["unpack", archive, "--cache-dir", cache], capsys)
    assert code == 2 and "a symbolic link in the cache folder" in err and not any(elsewhere.iterdir())
    (cache / folder_name).unlink()
    (cache / folder_name).mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("mine")
    (cache / folder_name / "generator.json").symlink_to(victim)
    code, err = run(["unpack", archive, "--cache-dir", cache], capsys)
    assert code == 2 and "a symbolic link" in err and victim.read_text() == "mine"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"folder_name": None, "newline": True}, "not a generator folder"),
        ({"file_name": "synthetic-0123456789abcdef.npz\n"}, "not a file a pack holds"),
        ({"file_name": "notes\x07.txt"}, "not a file a pack holds"),
    ],
)
def test_unpack_names_are_matched_whole(tmp_path, capsys, change, message):
    members = crafted(file_name=change.get("file_name"))
    if change.get("newline"):
        manifest = json.loads(members.pop("manifest.json"))
        (name,) = manifest["folders"]
        manifest["folders"][name + "\n"] = manifest["folders"].pop(name)
        members = {k.replace(name, name + "\n"): v for k, v in members.items()}
        members["manifest.json"] = json.dumps(manifest).encode()
    archive = archive_of(tmp_path / "p.tar", members)
    code, err = run(["unpack", archive, "--cache-dir", tmp_path / "cache"], capsys)
    assert code == 2 and message in err and not (tmp_path / "cache").exists()


def test_pack_reads_nothing_through_a_link_and_names_the_folder_it_leaves_out(tmp_path, capsys):
    """Fourth sweep, case 60: a cache folder whose generator.json (or key.json) is a link to a user's private file
    is left out, named; the private bytes never reach an archive. A damaged key.json is a note, not a traceback."""
    cache, out = fake_cache(tmp_path / "c", "L", size=1000), tmp_path / "out"
    private = tmp_path / "private.json"
    private.write_text('{"secret": "user private key material"}')
    linked, damaged = sorted(cache.iterdir())[:2]
    (linked / "generator.json").unlink()
    (linked / "generator.json").symlink_to(private)
    (damaged / "key.json").write_text('{"generator": "\x01')
    assert run(["pack", cache, out], capsys)[0] == 0
    packed = b"".join(out.joinpath(name).read_bytes() for name in files(out) if name.endswith(".tar"))
    assert b"user private key material" not in packed and linked.name.encode() not in packed
    assert damaged.name.encode() not in packed
