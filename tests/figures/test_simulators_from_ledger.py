"""fig2, lemma1 and figB2 built with ``--runs`` on the run ledger read the ledger's simulator summaries
(``sims/<run>/<scale>/summary.json``) and run no simulator; ``--rerun-sims``, or a store that is no ledger, runs
them as before."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import sims.mnist.__main__ as mnist
import sims.quadratic.__main__ as quadratic
from figures.__main__ import main

REPO = Path(__file__).resolve().parents[2]
LEDGER = REPO / "results" / "ledger"
SUMMARIES = {name: LEDGER / "sims" / name / "cpu" / "summary.json" for name in ("fig2", "figB2")}


class Simulated(Exception):
    """A simulator's main was called."""


@pytest.fixture
def no_simulator(monkeypatch):
    def refuse(*args, **kwargs):
        raise Simulated

    monkeypatch.setattr(quadratic, "main", refuse)
    monkeypatch.setattr(mnist, "main", refuse)


@pytest.mark.skipif(not all(p.exists() for p in SUMMARIES.values()), reason="no simulator summaries in the ledger")
def test_the_simulator_artefacts_read_the_ledger_and_run_nothing(tmp_path, no_simulator, capsys):
    start = time.perf_counter()
    argv = ["figB2", "fig2", "lemma1", "--scale", "cpu", "--runs", str(LEDGER), "--root", str(tmp_path)]
    assert main(argv) == 0
    assert time.perf_counter() - start < 30
    figb2 = json.loads((tmp_path / "figB2" / "cpu" / "result.json").read_text())
    assert len(figb2["rows"]) == len(json.loads(SUMMARIES["figB2"].read_text())["rows"])
    p = json.loads(SUMMARIES["fig2"].read_text())["p"]
    for name in ("fig2", "lemma1"):
        assert [row[0] for row in json.loads((tmp_path / name / "cpu" / "result.json").read_text())["rows"]] == p
    assert "built" in capsys.readouterr().out
    with pytest.raises(Simulated):  # asked for: the simulator runs again (into --root, never into the ledger)
        main([*argv, "--force", "--rerun-sims"])


def test_a_store_that_is_no_ledger_still_runs_the_simulator(tmp_path, no_simulator):
    with pytest.raises(Simulated):
        main(["fig2", "--scale", "quick", "--runs", str(tmp_path / "store"), "--root", str(tmp_path)])


def test_a_summary_missing_from_the_ledger_is_named_in_one_line(tmp_path, no_simulator, capsys):
    ledger = tmp_path / "L"
    ledger.mkdir()
    (ledger / ".ledger").touch()
    assert main(["figB2", "--scale", "paper", "--runs", str(ledger), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sims/figB2/paper" in err and "--rerun-sims" in err


@pytest.mark.skipif(not SUMMARIES["fig2"].exists(), reason="no fig2 summary in the ledger")
def test_a_build_on_the_ledger_is_never_reused_so_it_shows_what_the_ledger_holds_now(tmp_path, no_simulator, capsys):
    ledger = tmp_path / "L"
    (ledger / "sims" / "fig2" / "cpu").mkdir(parents=True)
    (ledger / ".ledger").touch()
    summary = json.loads(SUMMARIES["fig2"].read_text())
    path = ledger / "sims" / "fig2" / "cpu" / "summary.json"
    path.write_text(json.dumps(summary))
    argv = ["fig2", "--scale", "cpu", "--runs", str(ledger), "--root", str(tmp_path / "out")]
    result = tmp_path / "out" / "fig2" / "cpu" / "result.json"
    assert main(argv) == 0
    assert [row[0] for row in json.loads(result.read_text())["rows"]] == summary["p"]
    summary["p"] = [round(p + 0.01, 2) for p in summary["p"]]  # the ledger changed since (a column added, say)
    path.write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(argv) == 0
    assert "built" in capsys.readouterr().out
    assert [row[0] for row in json.loads(result.read_text())["rows"]] == summary["p"]


def test_a_store_that_is_no_ledger_reuses_a_done_result(tmp_path, capsys, monkeypatch):
    argv = ["fig2", "--scale", "quick", "--runs", str(tmp_path / "store"), "--root", str(tmp_path)]
    assert main(argv) == 0
    monkeypatch.setattr(quadratic, "main", lambda *a, **k: (_ for _ in ()).throw(Simulated()))
    capsys.readouterr()
    assert main(argv) == 0
    assert "reused" in capsys.readouterr().out
