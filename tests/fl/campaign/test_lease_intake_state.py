"""A lease's state brought in by ``python -m lab.campaign unpack`` (issue 69, class 4): a run here of another config
under the same name (a finished 4-round run; the lease's 10-round run whose rows begin as its do) keeps its folder
and the lease's state goes beside it, never dropped; an archive with a link, a hard link or a name twice is refused
in one line before anything is written, never unpacked as a resumable run without its checkpoint; and the packing
never lists a run whose checkpoint it could not read as resumable."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from lab.campaign import pack
from lab.campaign.__main__ import main as campaign_main

ROWS = [{"round": t, "test_accuracy": 0.1 * t} for t in range(1, 7)]


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def member(archive: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def state_archive(path: Path, extra=()) -> Path:
    """A state archive of run X at round 6 of 10 (and ``extra`` members: (name, data, kind, link))."""
    with tarfile.open(path, "w") as archive:
        member(archive, "lease.json", json.dumps({"store": "/device/store"}).encode())
        member(archive, "runs/X/config.json", json.dumps({"train": {"rounds": 10, "device": "cuda"}}).encode())
        member(archive, "runs/X/metrics.jsonl", jsonl(ROWS))
        member(archive, "runs/X/checkpoint.pt", b"state of round 6")
        for args in extra:
            member(archive, *args)
    return path


def finished_here(store: Path, rounds: int, device: str = "cpu") -> Path:
    run = store / "runs" / "X"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {"rounds": rounds, "device": device}}))
    (run / "metrics.jsonl").write_bytes(jsonl(ROWS[:rounds]))
    (run / "summary.json").write_text("{}")
    return run


def test_a_finished_run_of_another_config_here_never_drops_the_leases_state(tmp_path, monkeypatch, capsys):
    store = tmp_path / "store"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    here = finished_here(store, 4)
    before = {p.name: p.read_bytes() for p in here.iterdir()}
    assert campaign_main(["unpack", str(state_archive(tmp_path / "state-1.tar"))]) == 0
    out = capsys.readouterr().out
    assert "holds a run of another config" in out
    assert {p.name: p.read_bytes() for p in here.iterdir()} == before  # the run here, untouched
    (aside,) = [p for p in (store / "runs").iterdir() if p.name.startswith("X.lease-")]
    assert (aside / "checkpoint.pt").read_bytes() == b"state of round 6" and str(aside) in out
    assert not (aside / ".shufflefl-intake").exists()


def test_the_same_run_here_on_another_device_is_still_the_same_run(tmp_path, monkeypatch, capsys):
    """train.device is what a resume may change: a copy here that is as far is kept, as before."""
    store = tmp_path / "store"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    finished_here(store, 10)
    (store / "runs" / "X" / "metrics.jsonl").write_bytes(jsonl(ROWS))
    assert campaign_main(["unpack", str(state_archive(tmp_path / "state-1.tar"))]) == 0
    assert "kept the copy here" in capsys.readouterr().out
    assert sorted(p.name for p in (store / "runs").iterdir()) == ["X"]


@pytest.mark.parametrize(
    "bad, said",
    [
        (("runs/Y/checkpoint.pt", b"", tarfile.SYMTYPE, "/etc/passwd"), "is a symbolic link"),
        (("runs/Y/checkpoint.pt", b"", tarfile.LNKTYPE, "runs/X/checkpoint.pt"), "is a hard link"),
        (("runs/X/checkpoint.pt", b"another state"), "comes twice"),
        (("runs/Y/checkpoint.pt", b"", tarfile.FIFOTYPE), "is not a file"),
    ],
)
def test_an_archive_with_a_link_or_a_name_twice_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, capsys, bad, said
):
    store = tmp_path / "store"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    archive = state_archive(tmp_path / "state-1.tar", [bad])
    assert campaign_main(["unpack", str(archive)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and str(archive) in captured.err and said in captured.err
    assert "resumable" not in captured.out and not store.exists()


def test_the_packing_never_lists_a_run_whose_checkpoint_is_a_link_as_resumable(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    run = store / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"round": 1}\n')
    (tmp_path / "elsewhere.pt").write_bytes(b"not the run's")
    (run / "checkpoint.pt").symlink_to(tmp_path / "elsewhere.pt")
    row = {"name": "r", "run": "runs/r", "priority": 1, "needs": "", "after": "", "state": "failed"}
    packed = pack.pack({"tasks": [row]}, store, out)
    assert "r" not in packed.resumable and "symbolic link" in packed.restart["r"]
