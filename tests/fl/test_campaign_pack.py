"""What a GPU lease's packing (lab.campaign.pack, behind ``python -m lab.campaign watch`` and scripts/gpu-campaign.sh)
leaves in $OUT: only its own files are written over or removed (a user's records-2.tgz, ddpm_sets.tar, state-1.tar
and state-3.tar survive every pack, and the packing's own archives take free names beside them); a limit that is no
number of files is refused in one line, exit 2, before anything is removed; and a symbolic link in the store (a log,
a run's file, a run folder) is never followed into the archives."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from lab.campaign import pack
from lab.campaign.__main__ import main as campaign_main
from tests.scripts.test_gpu_campaign import generator_folder

USERS = {"records-2.tgz": b"my own records", "ddpm_sets.tar": b"my sets", "state-1.tar": b"my state 1",
         "state-3.tar": b"my state 3"}  # fmt: skip


def store_with_a_run(store: Path) -> dict:
    """A store with one unfinished run (its checkpoint), a log, a DDPM folder trained here; the campaign's status."""
    run = store / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {"rounds": 5}}))
    (run / "metrics.jsonl").write_text('{"round": 1}\n')
    (run / "checkpoint.pt").write_bytes(b"state of r")
    (store / "logs").mkdir()
    (store / "logs" / "r.log").write_text("round 1\n")
    generator_folder(store / "synthetic", 0)
    row = {"name": "r", "run": "runs/r", "priority": 1, "needs": "", "after": "", "state": "running"}
    return {"tasks": [row]}


def members(path: Path) -> list[str]:
    with tarfile.open(path) as archive:
        return archive.getnames()


def test_a_users_files_in_out_survive_and_the_packings_own_take_free_names(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    status = store_with_a_run(store)
    out.mkdir()
    for name, data in USERS.items():
        (out / name).write_bytes(data)
    first = pack.pack(status, store, out)
    ours = sorted(p.name for p in first.files)
    assert ours == ["ddpm_sets-1.tar", "records-1.tgz", "state-2.tar"]  # around the user's names
    assert "runs/r/checkpoint.pt" in members(out / "state-2.tar") and "r" in first.resumable
    assert any("4 files the packing did not write" in note for note in first.notes), first.notes
    assert sorted(p.name for p in pack.pack(status, store, out).files) == ours  # its own, written over in place
    (store / "runs" / "r" / "checkpoint.pt").unlink()  # no state to bring back now: its own state-2.tar goes
    third = pack.pack(status, store, out)
    assert "state-2.tar" not in {p.name for p in third.files} and not (out / "state-2.tar").exists()
    assert sorted(p.name for p in out.iterdir()) == sorted([*USERS, "ddpm_sets-1.tar", "records-1.tgz"])
    for name, data in USERS.items():
        assert (out / name).read_bytes() == data, name
    (out / "records-1.tgz").write_bytes(b"the user's now")  # changed since the packing wrote it: no longer its own
    pack.pack(status, store, out)
    assert (out / "records-1.tgz").read_bytes() == b"the user's now" and (out / "records-3.tgz").is_file()


@pytest.mark.parametrize(
    ("variable", "value"), [("CAMPAIGN_MAX_FILES", "-1"), ("CAMPAIGN_MAX_FILES", "0"), ("CAMPAIGN_MAX_FILES", "two"),
                            ("CAMPAIGN_MAX_TOTAL_MIB", "-60")],
)  # fmt: skip
def test_a_limit_that_is_no_number_of_files_is_refused_in_one_line_and_removes_nothing(
    tmp_path, monkeypatch, capsys, variable, value
):
    store, out = tmp_path / "store", tmp_path / "out"
    status = store_with_a_run(store)
    before = pack.pack(status, store, out).files  # the previous pack's files
    kept = {p.name: p.read_bytes() for p in before}
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.setenv(variable, value)
    capsys.readouterr()
    assert campaign_main(["watch", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{variable}='{value}'" in err and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == kept


def test_a_linked_log_run_file_or_run_folder_is_never_packed(tmp_path):
    store, out, outside = tmp_path / "store", tmp_path / "out", tmp_path / "outside"
    status = store_with_a_run(store)
    outside.mkdir()
    secret = b"SECRET-" + os.urandom(8).hex().encode()
    (outside / "id_rsa").write_bytes(secret)
    (outside / "run").mkdir()
    (outside / "run" / "metrics.jsonl").write_bytes(secret)
    (store / "logs" / "evil.log").symlink_to(outside / "id_rsa")
    (store / "runs" / "r" / "summary.json").symlink_to(outside / "id_rsa")  # a record file that is a link
    (store / "runs" / "linked").symlink_to(outside / "run", target_is_directory=True)
    os.mkfifo(store / "logs" / "pipe.log")  # not a file: never read (it would block)
    packed = pack.pack(status, store, out)
    names = [n for p in packed.files for n in members(p)]
    assert "logs/r.log" in names and "runs/r/config.json" in names and "runs/r/checkpoint.pt" in names
    assert not {"logs/evil.log", "logs/pipe.log", "runs/r/summary.json", "runs/linked/metrics.jsonl"} & set(names)
    for path in packed.files:
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                assert secret not in archive.extractfile(member).read(), (path, member.name)
    note = next(n for n in packed.notes if "symbolic link" in n)
    assert note.startswith("3 symbolic links") and all(n in note for n in ("evil.log", "summary.json", "linked"))
