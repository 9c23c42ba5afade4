"""A large state through the campaign (issue #70, lab.campaign.volumes), on small stand-ins with the tool's limits
lowered: an unfinished run whose state does not fit one archive goes out in volumes over successive calls (each call
within the limits, the volumes not yet sent first, what went out recorded in the store), the summary says how many
are back and what brings the rest; the cut follows the run until a volume has gone out, then stays; ``unpack`` on a
lease and the intake at home gather volumes over several calls and place the run once all are there. DynaFed's arms
are tasks of a large state, and a resumed run is predicted for the rounds it has left."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from lab.campaign import pack, tasks
from lab.campaign.__main__ import main as campaign_main
from lab.campaign.predict import predicted_minutes
from lab.records.lease import bring_home
from lab.records.volumes import MANIFEST

ROW = {"name": "r", "run": "runs/r", "priority": 4, "needs": "", "after": "", "large_state": True, "state": "running",
       "command": ["true"], "slots": 1, "gib": 0.0, "minutes": 0.0}  # fmt: skip


@pytest.fixture
def lease(tmp_path, monkeypatch) -> Path:
    """A lease's store with the unfinished run r (a 140,000-byte checkpoint) and the campaign's status; the limits
    lowered to volumes of 0.03 MiB, 0.07 MiB a call: 5 volumes, 2 a call beside the records."""
    monkeypatch.setenv("CAMPAIGN_MAX_FILE_MIB", "0.03")
    monkeypatch.setenv("CAMPAIGN_MAX_TOTAL_MIB", "0.07")
    store = tmp_path / "lease"
    run = store / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {"rounds": 10}}))
    (run / "metrics.jsonl").write_text('{"round": 1}\n{"round": 2}\n')
    (run / "checkpoint.pt").write_bytes(os.urandom(140_000))
    (store / "campaign").mkdir()
    status = {"tasks": [ROW], "limit": 1, "started": time.time() - 60, "ended": time.time(), "pid": None}
    (store / "campaign" / "status.json").write_text(json.dumps(status))
    return store


def call(store: Path, name: str) -> tuple[pack.Packed, list[str]]:
    """One call's pack into its own OUT (emptied before each call): what it said and the names it left there."""
    out = store.parent / "calls" / name
    packed = pack.pack(json.loads((store / "campaign" / "status.json").read_text()), store, out, call=name)
    return packed, sorted(p.name for p in out.iterdir())


def volumes(names: list[str]) -> list[int]:
    return [int(n.rsplit(".", 2)[-2].split("-of-")[0]) for n in names if n.endswith(".vol")]


def test_volumes_go_out_over_calls_the_unsent_first_and_the_summary_says_how_many_are_back(lease):
    first, names = call(lease, "a")
    assert volumes(names) == [1, 2] and "records-1.tgz" in names and sum(n.endswith(MANIFEST) for n in names) == 1
    assert "r" not in first.resumable and first.partial["r"].startswith("2 of 5 volumes of its state back")
    assert "2 more calls of `bash scripts/gpu-campaign.sh wait 0`" in first.partial["r"]
    assert call(lease, "a")[1] == names  # every pack of one call chooses the same
    (record,) = (lease / "campaign" / "volumes").glob("r/sent.json")
    assert sorted(json.loads(record.read_text())["sent"].values()) == ["a", "a"]
    second, names = call(lease, "b")
    assert volumes(names) == [3, 4] and second.partial["r"].startswith("4 of 5 volumes")
    third, names = call(lease, "c")
    assert volumes(names) == [1, 5] and "r" in third.resumable and not third.partial  # the last, then one again


def test_the_cut_follows_the_run_until_a_volume_has_gone_out_then_stays_until_all_have(lease):
    checkpoint = lease / "runs" / "r" / "checkpoint.pt"
    stem = lambda names: next(n for n in names if n.endswith(MANIFEST))  # noqa: E731
    _, before = call(lease, "a")
    checkpoint.write_bytes(os.urandom(140_000))
    _, names = call(lease, "a")
    assert stem(names) != stem(before)  # nothing had gone out: the new state is cut
    assert not list((lease / "campaign" / "volumes" / "r").glob(stem(before).removesuffix(MANIFEST) + "*"))
    checkpoint.write_bytes(os.urandom(140_000))
    for name in ("b", "c"):  # volumes of call a went out: the cut stays until every volume has
        assert stem(call(lease, name)[1]) == stem(names)
    checkpoint.write_bytes(os.urandom(140_000))
    assert stem(call(lease, "d")[1]) != stem(names)


def test_watch_ends_with_the_volumes_back_so_far_and_what_brings_the_rest(lease, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(lease))
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert campaign_main(["watch", "0"]) == 0
    out = capsys.readouterr().out
    assert "in volumes (1): r (2 of 5 volumes of its state back with this call" in out, out
    assert "wait 0" in out and "restart (0)" in out


def test_unpack_gathers_volumes_over_several_calls_and_places_the_run_once_all_are_there(
    lease, tmp_path, monkeypatch, capsys
):
    for name in "abc":
        call(lease, name)
    calls = tmp_path / "calls"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(tmp_path / "next"))
    capsys.readouterr()
    assert campaign_main(["unpack", *map(str, (calls / "a").iterdir())]) == 0
    assert "r: 2 of 5 volumes of its state so far" in capsys.readouterr().out
    assert not (tmp_path / "next" / "runs").exists()
    later = [p for p in (calls / "b").iterdir() if p.name.endswith(".vol")]  # without the manifest: gathered before
    assert campaign_main(["unpack", *map(str, later)]) == 0
    assert "r: 4 of 5 volumes" in capsys.readouterr().out
    assert campaign_main(["unpack", *map(str, (calls / "c").iterdir())]) == 0
    assert "runs/r: unpacked (2 rounds, resumable)" in capsys.readouterr().out
    run = tmp_path / "next" / "runs" / "r"
    assert (run / "checkpoint.pt").read_bytes() == (lease / "runs" / "r" / "checkpoint.pt").read_bytes()
    assert campaign_main(["unpack", *map(str, (calls / "c").iterdir())]) == 0  # again: nothing changes
    assert "kept the copy here" in capsys.readouterr().out


def test_unpack_refuses_a_damaged_volume_in_one_line_before_anything_is_written(lease, tmp_path, monkeypatch, capsys):
    call(lease, "a")
    files = sorted((tmp_path / "calls" / "a").iterdir())
    damaged = next(p for p in files if p.name.endswith(".vol"))
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"!")
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(tmp_path / "next"))
    assert campaign_main(["unpack", *map(str, files)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged" in err and damaged.name in err, err
    assert not (tmp_path / "next").exists()


def test_the_intake_at_home_gathers_volumes_from_several_calls_folders(lease, tmp_path):
    for name in "abc":
        call(lease, name)
    calls, home = tmp_path / "calls", tmp_path / "home"
    lines, _ = bring_home([calls / "a"], tmp_path / "ledger", home)
    (said,) = [line for line in lines if line.split()[1:2] == ["r:"]]
    assert said.startswith("partial    r: round 2; 2 of 5 volumes of its state so far"), lines
    assert not (home / "runs" / "r").exists()
    lines, _ = bring_home([calls / "b", calls / "c"], tmp_path / "ledger", home)  # the later calls' folders
    (said,) = [line for line in lines if line.split()[1:2] == ["r:"]]
    assert said.startswith("resumable  r: round 2 done"), lines
    assert (home / "runs" / "r" / "checkpoint.pt").read_bytes() == (lease / "runs/r/checkpoint.pt").read_bytes()


def test_dynafeds_arms_are_the_tasks_of_a_large_state(tmp_path):
    large = {t.name for t in tasks.plan(tmp_path) if t.large_state}
    assert large == {t.name for t in tasks.plan(tmp_path) if t.name.startswith("dynafed")} and len(large) == 10


def test_a_resumed_run_is_predicted_for_the_rounds_it_has_left(tmp_path):
    task = next(t for t in tasks.plan(tmp_path) if t.name == "dynafed_fmnist_a001_paper_n1000_dsa_seed1")
    whole = predicted_minutes(task, tmp_path)
    (tmp_path / task.run).mkdir(parents=True)
    (tmp_path / task.run / "metrics.jsonl").write_text('{"round": 1}\n' * 150)
    assert 0 < predicted_minutes(task, tmp_path) < whole / 3  # past its synthesis at round 20, 50 of 200 rounds left
