"""``python -m lab.campaign`` on bad input (issue 69, class 7): a bad CAMPAIGN_* variable, a CAMPAIGN_PLAN that is
torn, missing or incomplete, a malformed status.json, a store or OUT it cannot write: one line each naming the
input, exit 2, never a traceback, and nothing started (no status written)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.campaign.__main__ import main as campaign_main

PLAN = [{"name": "t", "priority": 1, "command": ["true"]}]


@pytest.fixture()
def store(tmp_path, monkeypatch) -> Path:
    """An empty store, a valid one-task plan, no CAMPAIGN_* variable of the caller's environment."""
    for name in [n for n in os.environ if n.startswith("CAMPAIGN_") or n == "DDPM_WORKERS"]:
        monkeypatch.delenv(name)
    store = tmp_path / "store"
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    monkeypatch.setenv("CAMPAIGN_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    monkeypatch.setenv("CAMPAIGN_PLAN", str(tmp_path / "plan.json"))
    return store


def one_line(capsys, *said: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m lab.campaign: error: "), err
    assert "Traceback" not in err and all(s in err for s in said), err


@pytest.mark.parametrize(
    "name, value",
    [
        ("CAMPAIGN_JOBS", "abc"), ("CAMPAIGN_JOBS", "0"), ("CAMPAIGN_GIB_PER_RUN", "x"), ("CAMPAIGN_SECONDS", "-1"),
        ("CAMPAIGN_SECONDS", "soon"), ("CAMPAIGN_POLL_SECONDS", "-1"), ("CAMPAIGN_REPORT_SECONDS", "nan"),
        ("CAMPAIGN_FLEET", "1.5"), ("DDPM_WORKERS", "many"), ("CAMPAIGN_MAX_FILES", "-1"),
        ("CAMPAIGN_MAX_FILE_MIB", "inf"), ("CAMPAIGN_RATES", "no/such/rates.json"),
    ],
)  # fmt: skip
def test_a_bad_variable_is_one_line_before_anything_starts(store, monkeypatch, capsys, name, value):
    monkeypatch.setenv(name, value)
    assert campaign_main(["start", "all"]) == 2
    one_line(capsys, name if name != "CAMPAIGN_RATES" else value)
    assert not (store / "campaign" / "status.json").exists()


def test_a_bad_report_interval_is_one_line_before_the_first_report(store, monkeypatch, capsys):
    monkeypatch.setenv("CAMPAIGN_REPORT_SECONDS", "every minute")
    assert campaign_main(["watch", "1"]) == 2
    one_line(capsys, "CAMPAIGN_REPORT_SECONDS")


PLANS = {
    "torn": ('[{"name": "t", "priority": 1, "comm', "not JSON"),
    "not a list": ('{"name": "t"}', "not a list of tasks"),
    "empty": ("[]", "not a list of tasks"),
    "no priority": ('[{"name": "t", "command": ["true"]}]', "has no priority"),
    "no command": ('[{"name": "t", "priority": 1}]', "neither a command"),
    "args without run": ('[{"name": "t", "priority": 1, "args": []}]', "its run is None"),
    "unknown field": ('[{"name": "t", "priority": 1, "command": ["true"], "colour": 1}]', "no field 'colour'"),
    "bad type": ('[{"name": "t", "priority": "high", "command": ["true"]}]', "its priority is 'high'"),
    "a name with a slash": ('[{"name": "../t", "priority": 1, "command": ["true"]}]', "its name is '../t'"),
    "twice": ('[{"name": "t", "priority": 1, "command": ["a"]}, {"name": "t", "priority": 2, "command": ["b"]}]',
              "comes twice"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PLANS))
def test_a_torn_or_incomplete_plan_is_one_line_naming_it(store, tmp_path, monkeypatch, capsys, case):
    text, said = PLANS[case]
    (tmp_path / "plan.json").write_text(text)
    assert campaign_main(["start", "all"]) == 2
    one_line(capsys, f"CAMPAIGN_PLAN={tmp_path / 'plan.json'}", said)
    assert not (store / "campaign" / "status.json").exists()


@pytest.mark.parametrize("where", ["missing", "a folder"])
def test_a_plan_that_cannot_be_read_is_one_line(store, tmp_path, monkeypatch, capsys, where):
    path = tmp_path / ("none.json" if where == "missing" else "folder")
    if where == "a folder":
        path.mkdir()
    monkeypatch.setenv("CAMPAIGN_PLAN", str(path))
    assert campaign_main(["start", "all"]) == 2
    one_line(capsys, f"CAMPAIGN_PLAN={path}", "cannot be read")


ROW = {"name": "t", "priority": 1, "command": ["true"], "groups": ["all"], "run": "", "record": "", "needs": "",
       "after": "", "slots": 1, "large_state": False, "gib": 0.0, "minutes": 0.0, "state": "running",
       "pid": None}  # fmt: skip
STATUSES = {
    "torn": '{"tasks": [], "limit": 2, "sta',
    "a row without its state": json.dumps({"tasks": [{k: v for k, v in ROW.items() if k != "state"}], "limit": 2}),
    "a run that is a number": json.dumps({"tasks": [ROW | {"run": 5}], "limit": 2}),
    "a state of its own": json.dumps({"tasks": [ROW | {"state": "sleeping"}], "limit": 2}),
    "a deadline that is no time": json.dumps({"tasks": [ROW], "limit": 2, "deadline": "soon"}),
    "a row that is a name": json.dumps({"tasks": [{"name": 1}], "limit": 2}),
}


@pytest.mark.parametrize("command", [["watch", "1"], ["schedule"]])
@pytest.mark.parametrize("case", sorted(STATUSES))
def test_a_malformed_status_is_one_line_naming_it(store, capsys, case, command):
    (store / "campaign").mkdir(parents=True)
    (store / "campaign" / "status.json").write_text(STATUSES[case])
    assert campaign_main(command) == 2
    one_line(capsys, str(store / "campaign" / "status.json"))


def test_a_whole_status_still_reads(store, capsys):
    """The rows the scheduler writes pass the check (here a waiting task of an ended campaign)."""
    (store / "campaign").mkdir(parents=True)
    status = {"tasks": [ROW | {"state": "done", "rc": 0}], "limit": 2, "limit_why": "CAMPAIGN_JOBS", "pid": None,
              "started": 1.8e9, "ended": 1.8e9, "deadline": None}  # fmt: skip
    (store / "campaign" / "status.json").write_text(json.dumps(status))
    assert campaign_main(["watch", "1"]) == 0


def unwritable(tmp_path: Path) -> Path:
    """A folder nothing can be made in: a read-only one, or, for root (whom modes do not stop), /sys."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").mkdir()
    except PermissionError:
        return folder
    (folder / "probe").rmdir()
    if not Path("/sys").is_dir():
        pytest.skip("root, and no /sys to stand for a read-only folder")
    return Path("/sys")


def test_a_read_only_store_or_out_is_one_line_naming_the_path(store, tmp_path, monkeypatch, capsys):
    closed = unwritable(tmp_path)
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(closed / "store"))
    for command in (["start", "all"], ["unpack", str(tmp_path / "state-1.tar")]):
        if command[0] == "unpack":
            import tarfile

            with tarfile.open(tmp_path / "state-1.tar", "w"):
                pass
        assert campaign_main(command) == 2
        one_line(capsys, str(closed))
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(store))
    monkeypatch.setenv("OUT", str(closed / "out"))
    assert campaign_main(["watch", "1"]) == 2
    one_line(capsys, str(closed / "out"))
