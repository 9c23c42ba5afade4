"""A GPU lease brought home (lab.records.lease, ``python -m figures ledger add --from-lease DIR``) on a fake lease
made of real tiny runs: the finished run enters the ledger with its provenance's device, the DDPM sets go into the
generator cache, the unfinished run's state goes into the run store, from where ``fl.run --resume`` ends it as an
uninterrupted run; and the archives' own rules (split under a size limit, a group left out whole, no path out)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

import lab.records.lease as lease
from figures.__main__ import main
from fl.run import main as run_main
from fl.synthesis.fedssyn import KEY_FILE, PACKED_FILE, cache_key
from fl.synthesis.pack import pack
from lab.records.check import KEPT
from tests.fl.conftest import interrupt_at
from theory.errors import InputError


def tiny(root: Path, out: Path, rounds: int = 4) -> list[str]:
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='iid'", "data.clients=4",
        "model.name='fedcog-cnn'", f"train.rounds={rounds}", "train.batch_size=16", "train.checkpoint_every=2",
        "train.device='cpu'", "train.local_steps=2",
    ]  # fmt: skip
    return [*(arg for setting in settings for arg in ("--set", setting)), "--out", str(out), "--quiet"]


def files_of(run: Path, names) -> list[tuple[str, bytes]]:
    return [(f"runs/{run.name}/{n}", (run / n).read_bytes()) for n in names if (run / n).exists()]


def rows(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("seconds")} for line in lines]


def test_a_lease_comes_home_runs_in_the_ledger_sets_in_the_cache_the_rest_resumable(cifar_root, tmp_path, monkeypatch):
    device = tmp_path / "device" / "runs"  # the lease's store
    assert run_main(tiny(cifar_root, device / "done")) == 0
    assert run_main(tiny(cifar_root, tmp_path / "straight")) == 0
    undo = interrupt_at(monkeypatch, 4)
    assert run_main(tiny(cifar_root, device / "cut")) == 2  # cut off: its checkpoint after round 2
    undo()
    # the lease's files, as scripts/campaign.py packs them
    folder = tmp_path / "lease"
    logs = [("logs/device.txt", b"NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\n")]
    lease.write_archives(
        [files_of(device / "done", KEPT), files_of(device / "cut", KEPT), logs], folder, lease.RECORDS, 2**20, 8, 2**24,
        compress=True,
    )  # fmt: skip
    branch = [("runs/branch/init_from.txt", b"/root/store/runs/done/checkpoint_round2.pt"),
              ("runs/branch/metrics.jsonl", b"")]  # fmt: skip
    state = files_of(device / "cut", ["checkpoint.pt", "config.json", "provenance.json", "metrics.jsonl"])
    every = [(lease.LEASE_FILE, json.dumps({"store": "/root/store"}).encode())]
    lease.write_archives([state, branch], folder, lease.STATE, 2**20 * 15, 8, 2**26, every=every)
    cache = tmp_path / "device" / "synthetic"
    key = {"client": 0, "config": {"generator": "ddpm"}, "data": "test"}
    generator = cache / f"client0-{cache_key(key)}"
    generator.mkdir(parents=True)
    set_key = {"n_tilde": 4}
    name = f"synthetic-{cache_key(set_key)}"
    (generator / KEY_FILE).write_text(json.dumps({"generator": key, "sets": {f"{name}.npz": set_key}}))
    for file in ("generator.json", f"{name}.json"):
        (generator / file).write_text("{}")
    (generator / f"{name}.npz").write_bytes(os.urandom(100))
    pack(cache, folder, lease.SETS, generator="ddpm")
    assert {"ddpm_sets.tar", "records-1.tgz", "state-1.tar"} <= {p.name for p in folder.iterdir()}

    ledger, store = tmp_path / "ledger", tmp_path / "store"
    argv = ["ledger", "add", "--from-lease", str(folder), "--ledger", str(ledger), "--runs", str(store)]
    assert main(argv) == 0
    entry = json.loads((ledger / "runs" / "done" / "ledger.json").read_text())
    assert entry["device"] == "cpu" and entry["note"] == f"GPU lease {folder}"  # the device its provenance names
    (kept,) = (store / "leases").iterdir()  # the lease's records, at home: the entry's source
    assert (
        entry["source"] == str((kept / "runs" / "done").resolve())
        and (kept / "runs" / "cut" / "metrics.jsonl").exists()
    )
    assert not (ledger / "runs" / "cut").exists() and not (store / "runs" / "done").exists()
    assert (store / "_synthetic" / generator.name / f"{name}.npz").exists()
    assert (store / "_synthetic" / generator.name / PACKED_FILE).exists()
    branched = (store / "runs" / "branch" / "init_from.txt").read_text()
    assert branched == "../done/checkpoint_round2.pt"  # relative to the run: this store, not the device's
    assert run_main(["--resume", str(store / "runs" / "cut"), "--quiet"]) == 0
    assert rows(store / "runs" / "cut") == rows(tmp_path / "straight")
    # again: the ledger has it, the store's copy is further along and stays
    assert main(argv) == 0
    assert rows(store / "runs" / "cut") == rows(tmp_path / "straight")


def test_the_device_comes_from_the_lease_when_the_provenance_names_none(tmp_path):
    (tmp_path / "logs").mkdir()
    assert lease.lease_device(tmp_path) is None
    (tmp_path / "logs" / "device.txt").write_text("NVIDIA H200, 143771 MiB, 580.159.03\n2.11.0 NVIDIA H200\n")
    assert lease.lease_device(tmp_path) == "NVIDIA H200"


def test_archives_split_under_their_limits_and_a_group_that_fits_nowhere_is_left_out(tmp_path):
    kib = 1024
    groups = [[(f"runs/r{k}/checkpoint.pt", bytes(100 * kib))] for k in range(5)]
    groups.insert(2, [("runs/big/checkpoint.pt", bytes(400 * kib))])
    written, left = lease.write_archives(groups, tmp_path, "state", 260 * kib, 3, 10**7)
    assert [p.name for p in written] == ["state-1.tar", "state-2.tar", "state-3.tar"] and left == [2]
    assert all(p.stat().st_size <= 260 * kib for p in written)
    names = [n for p in written for n in tarfile.open(p).getnames()]
    assert sorted(names) == sorted(f"runs/r{k}/checkpoint.pt" for k in range(5))
    written, left = lease.write_archives(groups[:2], tmp_path, "state", 260 * kib, 3, 150 * kib)  # the total
    assert len(written) == 1 and left == [1] and not (tmp_path / "state-2.tar").exists()  # older parts removed


def test_an_archive_naming_a_path_outside_is_refused(tmp_path):
    with tarfile.open(tmp_path / "state-1.tar", "w") as archive:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(InputError, match="would leave the folder"):
        lease.extract_state(tmp_path / "state-1.tar", tmp_path / "store")
    assert not (tmp_path / "outside.txt").exists()


def test_a_folder_without_lease_archives_is_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert main(["ledger", "add", "--from-lease", str(tmp_path), "--ledger", str(tmp_path / "L")]) == 2
    assert "no lease archives" in capsys.readouterr().err


def test_a_run_here_is_replaced_only_by_a_further_state_of_itself(tmp_path):
    here = tmp_path / "runs" / "r"
    here.mkdir(parents=True)
    (here / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5, "seconds": 1.0}\n')
    other = b'{"round": 1, "test_accuracy": 0.6}\n{"round": 2, "test_accuracy": 0.7}\n'  # another device's numbers
    (tmp_path / "runs" / "r.lease").mkdir()  # a user's folder of the name older intakes used: never touched
    (tmp_path / "runs" / "r.lease" / "mine.txt").write_text("keep")
    assert "left alone" in lease.place_run(here, {"metrics.jsonl": other, "checkpoint.pt": b"x"})
    assert len(lease.metric_rows((here / "metrics.jsonl").read_bytes())) == 1
    (aside,) = (tmp_path / "runs").glob("r.lease-*")
    assert (aside / "checkpoint.pt").read_bytes() == b"x" and (tmp_path / "runs" / "r.lease" / "mine.txt").exists()
    further = b'{"round": 1, "test_accuracy": 0.5, "seconds": 9.0}\n{"round": 2, "test_accuracy": 0.7}\n'
    assert "unpacked (2 rounds, resumable)" in lease.place_run(here, {"metrics.jsonl": further, "checkpoint.pt": b"y"})
    earlier = {"metrics.jsonl": b'{"round": 1, "test_accuracy": 0.5}\n', "checkpoint_round1.pt": b"k"}
    assert "kept the copy here" in lease.place_run(here, earlier)
    assert (here / "checkpoint.pt").read_bytes() == b"y" and (here / "checkpoint_round1.pt").read_bytes() == b"k"


def snapshot_of(folder: Path, runs: dict[str, int], finished: set[str] = frozenset(), started: float = 1.79e9) -> Path:
    """A fake lease snapshot: records of runs with so many rows (finished ones with a summary) and a status."""
    groups = []
    for name, n in runs.items():
        metrics = "".join(json.dumps({"round": r, "test_accuracy": r / 100}) + "\n" for r in range(1, n + 1))
        group = [(f"runs/{name}/metrics.jsonl", metrics.encode()), (f"runs/{name}/config.json", b"{}")]
        group += [(f"runs/{name}/summary.json", b"{}")] if name in finished else []
        groups.append(group)
    status = {"started": started, "tasks": [{"name": n, "run": f"runs/{n}", "state": "running"} for n in runs]}
    groups.append([("campaign/status.json", json.dumps(status).encode()), ("logs/x.log", str(runs).encode())])
    lease.write_archives(groups, folder, lease.RECORDS, 2**20, 8, 2**24, compress=True)
    return folder


def test_two_snapshots_of_one_lease_keep_each_runs_newest_records_in_either_order(tmp_path, monkeypatch):
    monkeypatch.setattr("lab.records.lease.add", lambda run, *a, **k: f"{run}: added as L/{run.name}")
    older = snapshot_of(tmp_path / "a", {"r1": 3, "r2": 5})
    newer = snapshot_of(tmp_path / "b", {"r1": 7, "r2": 4})  # r2's newest rows are in the older snapshot (cut off)
    for order, store in (((newer, older), tmp_path / "s1"), ((older, newer), tmp_path / "s2")):
        for folder in order:  # one after the other, as two intakes
            lines, _ = lease.bring_home(folder, tmp_path / "L", store)
        (home,) = (store / "leases").iterdir()
        assert len(lease.metric_rows((home / "runs" / "r1" / "metrics.jsonl").read_bytes())) == 7
        assert len(lease.metric_rows((home / "runs" / "r2" / "metrics.jsonl").read_bytes())) == 5
        assert (home / "logs" / "x.log").read_text() == str({"r1": 7, "r2": 4})  # the newer snapshot's logs
        lines, _ = lease.bring_home(order, tmp_path / "L", tmp_path / f"both-{store.name}")  # both in one call
        assert any(line.startswith("lost       r1: round 7") for line in lines)


def test_a_users_files_in_the_intakes_home_survive_the_next_snapshot(tmp_path, monkeypatch):
    """Fourth sweep, case 64: notes a user keeps in STORE/leases/NAME/ (and in a run's folder there) stay when the
    same lease is brought home again, from a newer snapshot or an older one."""
    monkeypatch.setattr("lab.records.lease.add", lambda run, *a, **k: f"{run}: added as L/{run.name}")
    older = snapshot_of(tmp_path / "a", {"r1": 3})
    newer = snapshot_of(tmp_path / "b", {"r1": 7})
    store = tmp_path / "s"
    lease.bring_home(older, tmp_path / "L", store)
    (home,) = (store / "leases").iterdir()
    notes = {home / "NOTES.md": "mine\n", home / "mine" / "a": "x\n", home / "runs" / "r1" / "why.txt": "y\n"}
    for path, text in notes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in (newer, older):
        lease.bring_home(folder, tmp_path / "L", store)
        assert {path: path.read_text() for path in notes} == notes
    assert len(lease.metric_rows((home / "runs" / "r1" / "metrics.jsonl").read_bytes())) == 7


def test_every_run_is_listed_by_outcome_and_the_report_command_is_said(tmp_path, monkeypatch):
    monkeypatch.setattr("lab.records.lease.add", lambda run, *a, **k: f"{run}: added as L/{run.name}")
    folder = snapshot_of(tmp_path / "a", {"done": 4, "cut": 2}, finished={"done"})
    lines, refused = lease.bring_home(folder, tmp_path / "L", tmp_path / "s")
    assert refused == 0
    assert any(line.startswith("finished   done: added as") for line in lines)
    assert any(line.startswith("lost       cut: round 2, still running") for line in lines)
    assert "python -m figures report" in lines[-1]


def test_two_leases_in_folders_of_one_name_stay_apart_and_a_users_folder_is_never_merged_into(tmp_path):
    one = snapshot_of(tmp_path / "x" / "lease", {"r": 2}, started=1.79e9)
    two = snapshot_of(tmp_path / "y" / "lease", {"r": 3}, started=1.80e9)
    store = tmp_path / "s"
    lease.bring_home(one, tmp_path / "L", store)
    lease.bring_home(two, tmp_path / "L", store)
    assert len(list((store / "leases").iterdir())) == 2
    with pytest.raises(InputError, match="snapshots of different leases"):
        lease.bring_home([one, two], tmp_path / "L", tmp_path / "t")
    mine = store / "leases" / lease.Snapshot(one, store).name
    (mine / lease.OURS).unlink()  # now it is not the intake's
    with pytest.raises(InputError, match="not made by the intake"):
        lease.bring_home(one, tmp_path / "L", store)
    assert not list((store / "leases").glob("*.merging-*"))


def test_the_intake_never_writes_through_a_link_planted_in_the_store(tmp_path):
    folder = snapshot_of(tmp_path / "a", {"r": 2})
    store, elsewhere = tmp_path / "s", tmp_path / "elsewhere"
    store.mkdir()
    elsewhere.mkdir()
    (store / "leases").symlink_to(elsewhere)
    with pytest.raises(InputError, match="symbolic link"):
        lease.bring_home(folder, tmp_path / "L", store)
    assert not any(elsewhere.iterdir())


def big_tar(path: Path, size: int, compress: bool = True) -> Path:
    """A small archive whose one member says (and holds) ``size`` zero bytes."""

    class Zeros(io.RawIOBase):
        def __init__(self, n):
            self.left = n

        def readable(self):
            return True

        def readinto(self, buffer):
            n = min(len(buffer), self.left)
            buffer[:n] = bytes(n)
            self.left -= n
            return n

    with tarfile.open(path, "w:gz" if compress else "w") as archive:
        info = tarfile.TarInfo("runs/big/metrics.jsonl")
        info.size = size
        archive.addfile(info, io.BufferedReader(Zeros(size)))
    return path


def test_a_small_archive_that_expands_past_the_cap_is_refused_before_it_is_read(tmp_path):
    path = big_tar(tmp_path / "records-1.tgz", 2 * lease.MAX_MEMBER)
    assert path.stat().st_size < 2**20
    with pytest.raises(InputError, match="over the cap"):
        lease.read_archive(path)
    with pytest.raises(InputError, match="over the cap"):
        lease.bring_home(tmp_path, tmp_path / "L", tmp_path / "s")
    assert not (tmp_path / "s" / "leases").exists() or not any((tmp_path / "s" / "leases").iterdir())


@pytest.mark.parametrize(
    "member, data, said",
    [
        ("campaign/status.json", b'{"started": 1e30, "tasks": []}', "not a time"),
        ("campaign/status.json", b'{"started": "yesterday"}', "not a time"),
        ("campaign/status.json", b"[1, 2]", "is a list"),
        ("campaign/status.json", b'{"started": 1.79e9, "tasks": "x"}', "not a list of tasks"),
        ("campaign/status.json", b'{"started": 1.79', "not JSON"),
        ("runs/r/provenance.json", b'{"device": ', "not JSON"),
        ("runs/r/provenance.json", b"[]", "is a list"),
    ],
)  # fmt: skip
def test_a_damaged_member_of_a_lease_is_one_line_naming_it(tmp_path, member, data, said):
    lease.write_archives([[(member, data)]], tmp_path, lease.RECORDS, 2**20, 8, 2**24, compress=True)
    with pytest.raises(InputError, match=said):
        lease.bring_home(tmp_path, tmp_path / "L", tmp_path / "s")


def test_binary_device_and_init_from_files_are_one_line_or_ignored(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "device.txt").write_bytes(b"\xff\xfe\x00binary")
    assert lease.lease_device(tmp_path) is None
    files = {"lease.json": b'{"store": "/root/store"}', "runs/r/init_from.txt": b"\x00\xff"}
    with pytest.raises(InputError, match=r"init_from\.txt"):
        lease.split_state(files, tmp_path / "state-1.tar", tmp_path / "s")


def test_a_lease_that_made_only_ddpm_sets_comes_home(tmp_path):
    """The 2026-11-28 lease: one task, a seed's DDPM sets; its records hold logs and status but no run folder."""
    folder = tmp_path / "lease"
    logs = [("logs/device.txt", b"NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\n"), ("logs/ddpm.log", b"done\n")]
    lease.write_archives([logs], folder, lease.RECORDS, 2**20, 8, 2**24, compress=True)
    cache = tmp_path / "device" / "synthetic"
    key = {"client": 3, "config": {"generator": "ddpm"}, "data": "test"}
    generator = cache / f"client3-{cache_key(key)}"
    generator.mkdir(parents=True)
    name = f"synthetic-{cache_key({'n_tilde': 2})}"
    (generator / KEY_FILE).write_text(json.dumps({"generator": key, "sets": {f"{name}.npz": {"n_tilde": 2}}}))
    for file in ("generator.json", f"{name}.json"):
        (generator / file).write_text("{}")
    (generator / f"{name}.npz").write_bytes(os.urandom(64))
    pack(cache, folder, lease.SETS, generator="ddpm")
    ledger, store = tmp_path / "ledger", tmp_path / "store"
    argv = ["ledger", "add", "--from-lease", str(folder), "--ledger", str(ledger), "--runs", str(store)]
    assert main(argv) == 0 and main(argv) == 0  # twice: the second finds it home already
    assert (store / "_synthetic" / generator.name / f"{name}.npz").exists()
    (kept,) = (store / "leases").iterdir()
    assert (kept / "logs" / "ddpm.log").read_text() == "done\n" and not list((kept / "runs").iterdir())
