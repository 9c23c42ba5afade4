"""The loopback deployment's wait (fl.flower.loopback.Loopback.run) fails fast, in a RuntimeError whose first line
says why, when the run has ended without the file it waits for (its ServerApp refused the run folder: fourth sweep,
case 51, once a wait of 1800 s) or when a process of the deployment has exited; Flower's commands are stood in for
(``flwr run`` and ``flwr ls``), so nothing of Flower runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import fl.flower.loopback as loopback
from fl.flower.loopback import Loopback, started_run


def fake_flwr(monkeypatch, statuses: list[str], on_ls=None, started: str = "Successfully started run 42\n") -> list:
    """``flwr run`` prints ``started``; each ``flwr ls`` says the next of ``statuses`` (then calls ``on_ls``)."""
    asked = []

    def run(command, **kwargs):
        if command[:2] == ["flwr", "ls"]:
            asked.append(command)
            if on_ls is not None:
                on_ls()
            status = statuses[min(len(asked), len(statuses)) - 1]
            return subprocess.CompletedProcess(command, 0, json.dumps({"success": True, "runs": [{"status": status}]}))
        return subprocess.CompletedProcess(command, 0, started, "")

    monkeypatch.setattr(loopback.subprocess, "run", run)
    return asked


def test_the_wait_ends_at_once_when_the_run_ended_without_its_file(tmp_path, monkeypatch):
    asked = fake_flwr(monkeypatch, ["running", "finished:failed"])
    link = Loopback(1, tmp_path / "loop")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"Flower run 42 ended \(finished:failed\) without writing .*summary.json"):
        link.run({"out": str(tmp_path / "run")}, tmp_path / "run" / "summary.json", timeout=600, status_every=0)
    assert time.monotonic() - start < 60 and len(asked) == 2
    assert asked[0][2:5] == ["loopback", "--run-id", "42"]


def test_the_wait_returns_once_its_file_appears(tmp_path, monkeypatch):
    summary = tmp_path / "run" / "summary.json"
    summary.parent.mkdir()
    fake_flwr(monkeypatch, ["running"], on_ls=lambda: summary.write_text("{}"))
    assert Loopback(1, tmp_path / "loop").run({"out": "x"}, summary, timeout=600, status_every=0) < 60


def test_the_wait_ends_at_once_when_a_process_of_the_deployment_exited(tmp_path, monkeypatch):
    asked = fake_flwr(monkeypatch, ["running"], started="")  # no run id: no flwr ls
    link = Loopback(1, tmp_path / "loop")
    link.procs, link.names = [subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])], ["superlink"]
    link.procs[0].wait(timeout=60)
    with pytest.raises(RuntimeError, match=r"Flower superlink exited \(3\); see .*superlink.log"):
        link.run({"out": "x"}, tmp_path / "never", timeout=600)
    assert not asked


def test_the_run_id_is_read_from_flwr_runs_output():
    assert started_run("🎊 Successfully started run 1234567 in federation default\n") == "1234567"
    assert started_run("something else") is None
