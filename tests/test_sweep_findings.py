"""The hostile sweep's findings of issue 69 (P1-P4, B4-B9, L1, L6), one test per fix at its root: ``ledger add``
imports no plug-in a config names, writes nothing through a link planted in the ledger, no plug-in is imported from
any folder one of our tools writes, the campaign writes nothing through a linked ``campaign`` or ``logs`` folder,
``--overwrite`` is passed only for a folder the tool made, and ``fl.quality --out`` never replaces a user's file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lab.records.ledger as records
from tests.figures.test_ledger import make_run, snapshot
from theory.errors import InputError

REPO = Path(__file__).resolve().parents[1]
ZEN = "Beautiful is better than ugly"


def ledger_add(run: Path, ledger: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "figures", "ledger", "add", str(run), "--ledger", str(ledger)]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)


def test_p4_adding_a_run_again_imports_no_plugin_its_config_names(tmp_path):
    run = make_run(tmp_path / "store" / "runs" / "r", rounds=2)
    config = json.loads((run / "config.json").read_text())
    config["algorithm"] = {"name": "this:x"}  # importing `this` prints the Zen of Python
    config.pop("algorithm_fields", None)
    (run / "config.json").write_text(json.dumps(config))
    provenance = json.loads((run / "provenance.json").read_text())
    provenance["plugins"] = {"algorithm.name": {"spec": "this:x", "sha256": None}}
    (run / "provenance.json").write_text(json.dumps(provenance))
    first = ledger_add(run, tmp_path / "L")
    assert first.returncode == 0 and "added" in first.stdout, first.stdout + first.stderr
    second = ledger_add(run, tmp_path / "L")  # the entry exists: its config is compared with the run's
    assert ZEN not in second.stdout + second.stderr
    assert second.returncode == 0 and "already in the ledger" in second.stdout, second.stdout + second.stderr


@pytest.mark.parametrize("planted", ["runs", "runs/r", ".ledger"])
def test_b4_b5_b6_ledger_add_refuses_a_link_in_the_ledger_and_changes_nothing(tmp_path, planted):
    ledger = tmp_path / "L"
    records.add(make_run(tmp_path / "store" / "runs" / "first", rounds=3), ledger)
    run = make_run(tmp_path / "store" / "runs" / "r", rounds=2)
    if planted == "runs/r":  # an entry made before, then the user's folder linked in its place
        records.add(run, ledger)
        for f in (ledger / "runs" / "r").iterdir():
            f.unlink()
        (ledger / "runs" / "r").rmdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "NOTES.md").write_text("mine\n")
    (outside / "config.json").write_text((run / "config.json").read_text())
    target = ledger / planted
    if planted == "runs":
        (ledger / "runs").rename(tmp_path / "moved")
    elif planted == ".ledger":
        (ledger / ".ledger").unlink()
        outside = tmp_path / "mark"
        outside.write_text("a user's file\n")
    target.symlink_to(outside, target_is_directory=outside.is_dir())
    before, ledger_before = snapshot(tmp_path / "outside"), snapshot(ledger)
    mark_before = outside.stat().st_mtime_ns
    with pytest.raises(InputError, match="symbolic link; refused") as refused:
        records.add(run, ledger)
    assert "\n" not in str(refused.value)
    assert snapshot(tmp_path / "outside") == before and snapshot(ledger) == ledger_before
    assert outside.stat().st_mtime_ns == mark_before and target.is_symlink()
    if planted == ".ledger":
        with pytest.raises(InputError, match="symbolic link; refused"):
            records.ensure(ledger)
        assert outside.stat().st_mtime_ns == mark_before


# --- P1-P3: every folder one of our tools writes is data: no plug-in is imported from it --------------------------


def pyc(folder: Path, name: str, marker: Path) -> None:
    """A sourceless ``name.pyc`` in ``folder`` whose import writes ``marker`` (and defines a partitioner ``part``)."""
    import py_compile
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"{name}.py"
    source.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\ndef part(*a):\n    pass\n")
    py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")), doraise=True)
    source.unlink()
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)


@pytest.fixture()
def user(tmp_path, monkeypatch):
    """The user's working directory (on the import path), sys.path and the modules planted forgotten after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHUFFLEFL_RUNS", raising=False)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith(("store", "evil", "cache", "out", "project")):
            del sys.modules[name]


def owned_run(folder: Path, tool: str = "fl.run") -> Path:
    folder.mkdir(parents=True)
    (folder / ".shufflefl-output").write_text(tool + "\n")
    return folder


CASES = {  # where the canary lies -> the module path naming it; each folder laid out as the tool leaves it
    "a CLI's output folder (.shufflefl-output only)": "out.evil",
    "an unfinished sweep (no sweep.json yet)": "out.sweep_a.evil",
    "a figures store's _runs (--runs)": "store._runs.evil",
    "a store's runs": "store.runs.evil",
    "a figures store's _synthetic": "store._synthetic.evil",
    "a figures store's root": "store.evil",
    "a generator cache": "cache.evil",
    "a generator's cache folder (the working directory)": "evil",
}


def lay_out(case: str, user: Path) -> None:
    if case.startswith("a CLI's"):
        owned_run(user / "out", "sims.quadratic")
    elif case.startswith("an unfinished sweep"):
        owned_run(user / "out", "fl.sweep")
        (user / "out" / "sweep_a").mkdir()
    elif "store" in case:
        owned_run(user / "store" / "_runs" / "abc")
        owned_run(user / "store" / "runs" / "fedcog_seed0")
        (user / "store" / "_synthetic" / "client0-0123456789abcdef").mkdir(parents=True)
        (user / "store" / "_synthetic" / "client0-0123456789abcdef" / "key.json").write_text("{}")
    else:
        (user / "cache" / "client0-0123456789abcdef").mkdir(parents=True)
        (user / "cache" / "client0-0123456789abcdef" / "key.json").write_text("{}")
        if "working directory" in case:  # a name with a dash is no module path: the import path leads there
            os.chdir(user / "cache" / "client0-0123456789abcdef")


@pytest.mark.parametrize("case", CASES)
def test_p1_p3_no_plugin_is_imported_from_any_folder_our_tools_write(user, case):
    from fl import plugins

    lay_out(case, user)
    module = CASES[case]
    pyc(Path.cwd().joinpath(*module.split(".")[:-1]), "evil", user / "MARKER")
    with pytest.raises(InputError, match=r"a folder this package writes.*refused, nothing imported"):
        plugins.resolve(f"{module}:part", "data.partition", what="a partitioner")
    assert not (user / "MARKER").exists() and module not in sys.modules


def test_p1_resuming_a_store_run_naming_a_pyc_in_the_stores_runs_runs_nothing(user, capsys):
    from fl.run import main as run_main

    run = make_run(user / "store" / "_runs" / "abc", rounds=2)
    (run / ".shufflefl-output").write_text("fl.run\n")
    config = json.loads((run / "config.json").read_text())
    config["data"]["partition"] = "store._runs.evil:part"
    (run / "config.json").write_text(json.dumps(config))
    pyc(user / "store" / "_runs", "evil", user / "MARKER")
    assert run_main(["--resume", "store/_runs/abc", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused, nothing imported" in err, err
    assert not (user / "MARKER").exists()


def test_p1_p3_a_users_own_plugin_beside_their_run_folders_still_runs(user):
    """The control: a project holding its runs (out/, runs/NAME/) is not data itself; its plug-in runs."""
    from fl import plugins

    owned_run(user / "project" / "out")
    owned_run(user / "project" / "runs" / "r")
    pyc(user / "project", "mine", user / "MARKER")
    assert callable(plugins.resolve("project.mine:part", "data.partition", what="a partitioner"))
    assert (user / "MARKER").read_text() == "ran"


# --- B7-B9: the campaign writes nothing through a linked STORE/campaign or STORE/logs -----------------------------


@pytest.mark.parametrize("linked", ["campaign", "logs"])
@pytest.mark.parametrize("command", [["watch", "0"], ["unpack", "records-1.tgz"], ["start", "all"], ["schedule"]])
def test_b7_b8_b9_a_linked_campaign_or_logs_folder_is_refused_in_one_line_before_anything_is_written(
    tmp_path, monkeypatch, capsys, linked, command
):
    from lab.campaign import pack
    from lab.campaign.__main__ import main as campaign_main
    from tests.fl.test_campaign_pack import store_with_a_run

    store, out, outside = tmp_path / "store", tmp_path / "out", tmp_path / "outside"
    status = store_with_a_run(store)
    (store / "campaign").mkdir(exist_ok=True)
    (store / "campaign" / "status.json").write_text(json.dumps(status | {"limit": 1}))
    outside.mkdir()
    (outside / "mine.txt").write_text("a user's file\n")
    for child in (store / linked).iterdir():
        child.unlink()
    (store / linked).rmdir()
    (store / linked).symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.chdir(tmp_path)
    assert campaign_main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "symbolic link; refused" in err and f"store/{linked}" in err, err
    assert snapshot(outside) == {"mine.txt": b"a user's file\n"} and not out.exists()
    with pytest.raises(InputError, match="symbolic link; refused"):
        pack.pack(status, store, out)
    assert snapshot(outside) == {"mine.txt": b"a user's file\n"}


# --- L1: --overwrite only for a folder the tool made ----------------------------------------------------------------


def users_folder(folder: Path) -> dict:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("my own notes, not a run's\n")
    (folder / "checkpoint.pt").write_bytes(b"my own weights")
    return snapshot(folder)


def test_l1_resumable_sh_never_overwrites_a_folder_of_a_users_files(tmp_path):
    out = tmp_path / "mine"
    before = users_folder(out)
    fake = tmp_path / "python"  # records the arguments fl.run was given, runs nothing
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n')
    fake.chmod(0o755)
    made = tmp_path / "made"  # a start cut short: fl.run's mark, no config.json yet
    made.mkdir()
    (made / ".shufflefl-output").write_text("fl.run\n")
    script = f". {REPO / 'scripts' / 'resumable.sh'}; run {out} --set train.rounds=1; run {made} --set train.rounds=1"
    subprocess.run(["bash", "-c", script], check=True, env=os.environ | {"PYTHON": str(fake)}, timeout=60)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "--overwrite" not in calls[0].split() and f"--out {out}" in calls[0], calls
    assert "--overwrite" in calls[1].split(), calls
    assert snapshot(out) == before


def test_l1_a_fleet_spec_passes_overwrite_only_for_a_folder_fl_run_made(tmp_path, monkeypatch):
    from lab.campaign import schedule

    store = tmp_path / "store"
    mine, made, new = store / "runs" / "mine", store / "runs" / "made", store / "runs" / "new"
    users_folder(mine)
    (store / "logs").mkdir()  # the scheduler's loop makes it before any launch
    made.mkdir(parents=True)
    (made / ".shufflefl-output").write_text("fl.run\n")
    rows = [{"name": p.name, "command": ["bash", "-c", "run", "x", str(p), "--set", "train.rounds=1"], "gib": 0}
            for p in (mine, made, new)]  # fmt: skip
    monkeypatch.setattr(schedule.subprocess, "Popen", lambda *a, **k: type("P", (), {"pid": 1})())
    schedule.start_fleet(rows, store, {"PYTHON": "python"}, {})
    spec = json.loads((store / "campaign" / "fleet-mine.json").read_text())
    assert ["--overwrite" in entry for entry in spec] == [False, True, True]  # new: nothing there to lose
    assert (mine / "metrics.jsonl").read_text() == "my own notes, not a run's\n"


# --- L6: fl.quality --out never replaces a file it did not write ----------------------------------------------------


def test_l6_quality_refuses_an_existing_out_file_it_did_not_write(tmp_path):
    from fl.quality import OWN_KEYS, own_report

    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "own notes"}\n')
    command = [sys.executable, "-m", "fl.quality", str(tmp_path / "cache"), "--generator", "ddpm", "--seed", "0",
               "--out", str(mine)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "did not write" in done.stderr and mine.read_text() == '{"my": "own notes"}\n'
    report = tmp_path / "report.json"
    report.write_text(json.dumps(dict.fromkeys(OWN_KEYS, 0)))
    own_report(report)  # one of its own reports: written over, as before
    own_report(tmp_path / "new.json")
