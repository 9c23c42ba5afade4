"""``figures ledger add`` applies the ledger check's rules (issue 69, classes 5 and 8): a run whose seed contradicts
its name, a summary that is a FIFO, the same run under a second name and a quick simulator run filed as a paper one
are refused in one line with nothing written, where before add said "added" and ``figures check`` then rejected the
entry; the check itself flags a quick simulator summary standing for the paper scale."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import lab.records.ledger as records
from lab.records.check import verify
from tests.figures.test_ledger import make_run, snapshot
from theory.errors import InputError


def test_a_seed_that_contradicts_the_runs_name_is_refused(tmp_path):
    run = make_run(tmp_path / "store" / "runs" / "r_seed3", rounds=2, seed=0)
    with pytest.raises(InputError, match=r"figures check would reject it: .*train.seed is 0, its name says seed 3"):
        records.add(run, tmp_path / "L")
    assert not (tmp_path / "L" / "runs" / "r_seed3").exists()
    assert not [p for p in (tmp_path / "L" / "runs").iterdir()]  # no staging folder left either
    assert "added" in records.add(make_run(tmp_path / "store" / "runs" / "r_seed0", rounds=2), tmp_path / "L")


def test_a_summary_that_is_a_fifo_is_refused_without_reading_it(tmp_path):
    run = make_run(tmp_path / "store" / "runs" / "r", rounds=2)
    (run / "summary.json").unlink()
    os.mkfifo(run / "summary.json")
    with pytest.raises(InputError, match=r"summary\.json: not a plain file"):
        records.add(run, tmp_path / "L")  # returns at once: a read would block on the FIFO
    assert not (tmp_path / "L" / "runs").exists()


def test_the_same_run_under_a_second_name_is_refused(tmp_path):
    first = make_run(tmp_path / "store" / "runs" / "a", rounds=5)  # its config's rounds: a whole entry
    records.add(first, tmp_path / "L")
    before = snapshot(tmp_path / "L")
    second = tmp_path / "elsewhere" / "runs" / "b"
    shutil.copytree(first, second)
    with pytest.raises(InputError, match=r"the same run as runs/a \(identical metrics rows\)"):
        records.add(second, tmp_path / "L")
    assert snapshot(tmp_path / "L") == before
    assert not verify(tmp_path / "L")


def quick_summary(folder, quick: bool) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"config": {"preset": "paper-quick"}, "quick": quick}))


def test_a_quick_simulator_run_is_never_filed_as_a_paper_run(tmp_path):
    run = tmp_path / "out" / "fig2" / "paper" / "run"
    quick_summary(run, quick=True)
    with pytest.raises(InputError, match=r"a quick run .* cannot stand for the paper scale"):
        records.add(run, tmp_path / "L")
    assert not (tmp_path / "L" / "sims").exists()
    quick = tmp_path / "out" / "fig2" / "quick" / "run"
    quick_summary(quick, quick=True)
    assert "added" in records.add(quick, tmp_path / "L")  # at its own scale it is what it says
    entry = tmp_path / "L" / "sims" / "fig2" / "quick"
    shutil.copytree(entry, tmp_path / "L" / "sims" / "fig2" / "paper")  # filed by hand as the paper run
    assert any("cannot stand for the paper scale" in line for line in verify(tmp_path / "L"))
