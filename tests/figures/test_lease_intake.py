"""A lease brought home (``figures ledger add --from-lease``, lab.records.lease.bring_home) by the rules the campaign's
``unpack`` keeps, in one implementation (issue 69, class 4): an archive with a symbolic or hard link, a device or
FIFO, or a name twice is refused in one line before anything is written; a run in the store of another config under
the lease run's name (a finished 4-round run whose rows begin as the lease's 10-round run's do) is compared by its
config first and keeps its folder, the lease's state going beside it; only a run whose ``checkpoint.pt`` the intake
placed is said to be resumable. And ``ledger add`` refuses a summary that ends before its config's rounds without
diverging, as ``figures check`` does (class 5)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

import lab.records.lease as lease
import lab.records.ledger as records
from figures.__main__ import main as figures_main
from tests.figures.test_ledger import make_run, snapshot

ROWS = [{"round": t, "test_accuracy": 0.1 * t} for t in range(1, 7)]


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def config(rounds: int, device: str = "cuda") -> bytes:
    return json.dumps({"train": {"rounds": rounds, "device": device}}).encode()


def state_of(name: str = "X", rounds: int = 10, checkpoint: bool = True) -> list[tuple[str, bytes]]:
    """A run's state as the campaign packs it: round 6 of ``rounds``."""
    files = [(f"runs/{name}/config.json", config(rounds)), (f"runs/{name}/metrics.jsonl", jsonl(ROWS))]
    return files + ([(f"runs/{name}/checkpoint.pt", b"state of round 6")] if checkpoint else [])


def lease_of(folder: Path, *groups: list[tuple[str, bytes]]) -> Path:
    every = [(lease.LEASE_FILE, json.dumps({"store": "/device/store"}).encode())]
    lease.write_archives(list(groups), folder, lease.STATE, 2**20, 8, 2**24, every=every)
    return folder


def finished_here(store: Path, rounds: int, device: str = "cpu") -> Path:
    run = store / "runs" / "X"
    run.mkdir(parents=True)
    (run / "config.json").write_bytes(config(rounds, device))
    (run / "metrics.jsonl").write_bytes(jsonl(ROWS[:rounds]))
    (run / "summary.json").write_text("{}")
    return run


def outcome(lines: list[str], name: str) -> str:
    (line,) = [line for line in lines if line.split()[1:2] == [f"{name}:"]]
    return line


def add_from_lease(folder: Path, tmp_path: Path, capsys) -> tuple[int, str, str]:
    argv = ["ledger", "add", "--from-lease", str(folder), "--ledger", str(tmp_path / "L"),
            "--runs", str(tmp_path / "store")]  # fmt: skip
    code = figures_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def member(archive: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize(
    "bad, said",
    [
        (("runs/Y/checkpoint.pt", b"", tarfile.SYMTYPE, "/etc/passwd"), "is a symbolic link"),
        (("runs/Y/checkpoint.pt", b"", tarfile.LNKTYPE, "runs/X/checkpoint.pt"), "is a hard link"),
        (("runs/Y/checkpoint.pt", b"", tarfile.FIFOTYPE), "is not a file"),
        (("runs/Y/checkpoint.pt", b"", tarfile.CHRTYPE), "is not a file"),
        (("runs/X/checkpoint.pt", b"another state"), "comes twice"),
    ],
)
@pytest.mark.parametrize("archive_name", ["state-1.tar", "records-1.tgz"])
def test_a_lease_archive_with_a_link_a_device_or_a_name_twice_is_refused_before_anything_is_written(
    tmp_path, capsys, bad, said, archive_name
):
    folder = tmp_path / "lease"
    folder.mkdir()
    path = folder / archive_name
    with tarfile.open(path, "w:gz" if archive_name.endswith(".tgz") else "w") as archive:
        for name, data in [(lease.LEASE_FILE, b"{}"), *state_of()]:
            member(archive, name, data)
        member(archive, *bad)
    code, out, err = add_from_lease(folder, tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and str(path) in err and said in err and "nothing was unpacked" in err
    assert "resumable" not in out and not (tmp_path / "store").exists() and not (tmp_path / "L").exists()


def test_a_runs_state_in_two_archives_of_one_lease_is_refused(tmp_path, capsys):
    folder = tmp_path / "lease"
    folder.mkdir()
    for k in (1, 2):  # the packing puts a run's state in one archive: a second copy would silently win
        with tarfile.open(folder / f"state-{k}.tar", "w") as archive:
            for name, data in [(lease.LEASE_FILE, b"{}"), *state_of()]:
                member(archive, name, data)
    code, _, err = add_from_lease(folder, tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "the state of runs/X is in another state archive" in err
    assert not (tmp_path / "store").exists()


def test_a_finished_run_of_another_config_here_keeps_its_folder_and_the_leases_state_goes_beside_it(tmp_path):
    store = tmp_path / "store"
    here = finished_here(store, 4)  # 4 rounds of its config: its rows are the first 4 of the lease's
    before = snapshot(here)
    lines, refused = lease.bring_home(lease_of(tmp_path / "lease", state_of()), tmp_path / "L", store)
    assert refused == 0 and snapshot(here) == before  # compared by config first: never "kept the copy here"
    (aside,) = [p for p in (store / "runs").iterdir() if p.name.startswith("X.lease-")]
    assert (aside / "checkpoint.pt").read_bytes() == b"state of round 6" and not (aside / lease.OURS).exists()
    line = outcome(lines, "X")
    assert line.startswith("placed     X:") and "holds a run of another config" in line and str(aside) in line


def test_the_same_run_here_as_far_on_another_device_is_kept_and_not_called_resumable(tmp_path):
    store = tmp_path / "store"
    here = finished_here(store, 10, device="cpu")  # train.device is what a resume may change: the same run
    (here / "metrics.jsonl").write_bytes(jsonl(ROWS))
    (here / "summary.json").unlink()
    lines, _ = lease.bring_home(lease_of(tmp_path / "lease", state_of()), tmp_path / "L", store)
    line = outcome(lines, "X")
    assert line.startswith("placed     X:") and "kept the copy here" in line and "resumable" not in line
    assert not (here / "checkpoint.pt").exists() and sorted(p.name for p in (store / "runs").iterdir()) == ["X"]


def test_only_a_run_whose_checkpoint_came_home_is_resumable(tmp_path):
    store = tmp_path / "store"
    folder = lease_of(tmp_path / "lease", state_of("A"), state_of("B", checkpoint=False))
    lines, _ = lease.bring_home(folder, tmp_path / "L", store)
    assert outcome(lines, "A").startswith("resumable  A: round 6 done; python -m fl.run --resume")
    assert (store / "runs" / "A" / "checkpoint.pt").read_bytes() == b"state of round 6"
    line = outcome(lines, "B")
    assert line.startswith("placed     B:") and "resumable" not in line and "unpacked (6 rounds)" in line


def test_the_campaign_and_the_intake_place_a_state_by_one_implementation(tmp_path, monkeypatch, capsys):
    """The same archive through ``python -m lab.campaign unpack``: the same refusal of another config's run here."""
    from lab.campaign.__main__ import main as campaign_main

    store = tmp_path / "store"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    finished_here(store, 4)
    (archive,) = lease_of(tmp_path / "lease", state_of()).glob("state-*.tar")
    assert campaign_main(["unpack", str(archive)]) == 0
    assert "holds a run of another config (the same name), left alone" in capsys.readouterr().out
    assert lease.place_run is not None and lease.run_identity({"train": {"device": "cpu"}}) == {"train": {}}


def test_ledger_add_refuses_a_summary_that_ends_before_its_configs_rounds_without_diverging(tmp_path):
    run = make_run(tmp_path / "store" / "runs" / "r", rounds=3, of=5)
    (run / "summary.json").write_text(json.dumps({"rounds": 3}))  # a fake: finished at 3 of 5, not diverged
    with pytest.raises(records.InputError) as error:
        records.add(run, tmp_path / "L")
    text = str(error.value)
    assert "\n" not in text and "figures check would reject it" in text and "nothing was written" in text
    assert "says the run finished at round 3 of its config's 5 without diverging" in text
    assert not (tmp_path / "L" / "runs").exists() or not any((tmp_path / "L" / "runs").iterdir())
    rows = (run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(rows[-1]) | {"diverged": True}  # it stopped because its model became NaN at round 3
    (run / "metrics.jsonl").write_text("\n".join([*rows[:-1], json.dumps(last)]) + "\n")
    (run / "summary.json").write_text(json.dumps({"rounds": 3, "diverged_at_round": 3}))
    assert "added" in records.add(run, tmp_path / "L")
    # and an unfinished run (no summary) is taken at any round
    assert "added" in records.add(make_run(tmp_path / "store" / "runs" / "u", rounds=2, of=5), tmp_path / "L")
