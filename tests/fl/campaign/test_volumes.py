"""A run's state too large for one file of the device tool, in volumes (issue #70, lab.records.volumes): cut with a
manifest and joined back byte for byte; a missing, extra, damaged or reordered volume, a link or a manifest that does
not add up is refused in one line before anything is written; volumes that arrive over several calls are gathered,
a partial set kept and never joined. And a stand-in of a DynaFed arm's real state (206 MB) leaves a lease in calls
of at most 8 files of 15 MiB, 60 MiB together, and is joined at home equal to its SHA-256."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from lab.campaign import pack
from lab.campaign.__main__ import main as campaign_main
from lab.records.volumes import MANIFEST, collect, join, split
from theory.errors import InputError

MiB = 2**20


def small_set(tmp_path: Path, size: int = 10_000, max_bytes: int = 3_000) -> tuple[Path, bytes]:
    """A whole of ``size`` random bytes cut into volumes of ``max_bytes`` in ``tmp_path/vols``: (manifest, bytes)."""
    data = os.urandom(size)
    (tmp_path / "state-r.tar").write_bytes(data)
    (tmp_path / "vols").mkdir()
    return split(tmp_path / "state-r.tar", tmp_path / "vols", "state-r", max_bytes), data


def volume(manifest: Path, k: int) -> Path:
    return manifest.parent / json.loads(manifest.read_text())["volumes"][k - 1]["name"]


def test_a_whole_is_cut_into_volumes_of_at_most_the_limit_and_joined_back_byte_for_byte(tmp_path):
    manifest, data = small_set(tmp_path)
    said = json.loads(manifest.read_text())
    key = hashlib.sha256(data).hexdigest()
    assert manifest.name == f"state-r-{key[:12]}{MANIFEST}" and said["whole"] == {
        "name": "state-r.tar", "bytes": 10_000, "sha256": key}  # fmt: skip
    assert [v["name"] for v in said["volumes"]] == [f"state-r-{key[:12]}.0{k}-of-04.vol" for k in range(1, 5)]
    assert [v["bytes"] for v in said["volumes"]] == [3000, 3000, 3000, 1000]
    assert b"".join(volume(manifest, k).read_bytes() for k in range(1, 5)) == data  # `cat` joins them
    join(manifest, tmp_path / "joined.tar")
    assert (tmp_path / "joined.tar").read_bytes() == data


def spoil(manifest: Path, how: str) -> str:
    """Spoil a set of four volumes ``how``; what the refusal says."""
    first, second = volume(manifest, 1), volume(manifest, 2)
    if how == "missing":
        second.unlink()
        return "1 of 4 volumes missing"
    if how == "damaged":
        second.write_bytes(b"x" + second.read_bytes()[1:])
        return "damaged"
    if how == "extra":
        shutil.copy(first, manifest.parent / first.name.replace("-of-04", "-of-05"))
        return "an extra volume"
    if how == "reordered":
        a, b = first.read_bytes(), second.read_bytes()
        first.write_bytes(b)
        second.write_bytes(a)
        return "holds the bytes of volume 2, not of volume 1 (out of order)"
    if how == "link":
        (manifest.parent.parent / "elsewhere").write_bytes(second.read_bytes())
        second.unlink()
        second.symlink_to(manifest.parent.parent / "elsewhere")
        return "a symbolic link, never followed"
    said = json.loads(manifest.read_text())
    said["volumes"][1]["bytes"] += 1  # the manifest no longer adds up
    manifest.write_text(json.dumps(said))
    return "its volumes add up to 10001 bytes, the whole is 10000"


@pytest.mark.parametrize("how", ["missing", "damaged", "extra", "reordered", "link", "manifest"])
def test_a_spoilt_set_is_refused_in_one_line_before_anything_is_written(tmp_path, how):
    manifest, _ = small_set(tmp_path)
    said = spoil(manifest, how)
    before = sorted(p.name for p in manifest.parent.iterdir())
    with pytest.raises(InputError) as refused:
        join(manifest, tmp_path / "joined.tar")
    assert said in str(refused.value) and "\n" not in str(refused.value), refused.value
    assert not (tmp_path / "joined.tar").exists() and sorted(p.name for p in manifest.parent.iterdir()) == before


@pytest.mark.parametrize("how", ["damaged", "extra", "reordered", "link", "manifest"])
def test_volumes_given_to_be_gathered_are_each_checked_before_anything_is_gathered(tmp_path, how):
    manifest, _ = small_set(tmp_path)
    said = spoil(manifest, how)
    with pytest.raises(InputError) as refused:
        collect(sorted(manifest.parent.iterdir()), tmp_path / "gathered")
    assert said in str(refused.value) and "\n" not in str(refused.value), refused.value
    assert not (tmp_path / "gathered").exists()


def test_volumes_arriving_over_several_calls_are_kept_until_the_set_is_whole_then_joined_once(tmp_path):
    manifest, data = small_set(tmp_path)
    first = [manifest, volume(manifest, 1), volume(manifest, 4)]
    (partial,) = collect(first, tmp_path / "gathered")
    assert (partial.present, partial.count, partial.joined) == (2, 4, None)
    assert not (partial.folder / "state-r.tar").exists()
    (whole,) = collect([volume(manifest, 2), volume(manifest, 3), volume(manifest, 1)], tmp_path / "gathered")
    assert whole.present == 4 and whole.joined.read_bytes() == data  # the manifest gathered before; a volume twice
    (again,) = collect([volume(manifest, 2)], tmp_path / "gathered")
    assert again.joined == whole.joined and again.joined.read_bytes() == data
    with pytest.raises(InputError, match="without their manifest"):
        collect([volume(manifest, 2)], tmp_path / "elsewhere")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(MiB), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.mark.slow  # 206 MB written, cut, copied over five calls and joined: ~10-30 s on 2 cores
def test_a_dynafed_sized_state_leaves_in_calls_within_the_tools_limits_and_is_joined_at_home_equal(
    tmp_path, monkeypatch, capsys
):
    store = tmp_path / "lease"
    run = store / "runs" / "arm"
    run.mkdir(parents=True)
    with (run / "checkpoint.pt").open("wb") as handle:  # the measured size of a DynaFed arm's checkpoint
        for _ in range(206):
            handle.write(os.urandom(1_000_000))
    (run / "config.json").write_text(json.dumps({"train": {"rounds": 200}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"round": t}) + "\n" for t in range(1, 31)))
    key = sha256(run / "checkpoint.pt")
    row = {"name": "arm", "run": "runs/arm", "priority": 4, "needs": "", "after": "", "large_state": True,
           "state": "running"}  # fmt: skip
    calls, packed = [], None
    while packed is None or "arm" not in packed.resumable:
        calls.append(tmp_path / "calls" / str(len(calls) + 1))  # OUT is emptied before each call
        packed = pack.pack({"tasks": [row]}, store, calls[-1], call=str(len(calls)))
        sizes = [p.stat().st_size for p in calls[-1].iterdir()]
        assert len(sizes) <= 8 and max(sizes) <= 15 * MiB and sum(sizes) <= 60 * MiB, sizes
        assert len(calls) < 10, packed.partial
    assert len(calls) == 5  # 14 volumes of 15 MiB, 3 a call beside the records (and the short last one first)
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(tmp_path / "home"))
    capsys.readouterr()
    assert campaign_main(["unpack", *(str(p) for call in calls[:2] for p in call.iterdir())]) == 0
    assert "7 of 14 volumes of its state so far" in capsys.readouterr().out
    assert not (tmp_path / "home" / "runs" / "arm").exists()  # a partial set is kept, never joined
    assert campaign_main(["unpack", *(str(p) for call in calls[2:] for p in call.iterdir())]) == 0
    assert "runs/arm: unpacked (30 rounds, resumable)" in capsys.readouterr().out
    assert sha256(tmp_path / "home" / "runs" / "arm" / "checkpoint.pt") == key
