"""``figures ledger add`` (lab.records.ledger.add) removes only what it wrote: a run added again replaces its entry's
records and keeps a user's file in it (a NOTES.md), a user's ``NAME.adding`` and ``NAME.replaced`` folders beside the
entry survive, and what an interrupted add left of its own (its marker in it) goes with the next add."""

from __future__ import annotations

import json

import lab.records.ledger as records
from tests.figures.test_ledger import make_run


def test_a_run_added_again_keeps_a_users_file_in_its_entry(tmp_path):
    records.add(make_run(tmp_path / "a" / "r", rounds=2, of=4), tmp_path / "L")
    entry = tmp_path / "L" / "runs" / "r"
    (entry / "NOTES.md").write_text("why this run matters\n")
    (entry / "mine").mkdir()
    (entry / "mine" / "plot.png").write_bytes(b"png")
    assert "added" in records.add(make_run(tmp_path / "b" / "r", rounds=4), tmp_path / "L")
    assert len((entry / "metrics.jsonl").read_text().splitlines()) == 4  # the records replaced
    assert json.loads((entry / "ledger.json").read_text())["source"] == str((tmp_path / "b" / "r").resolve())
    assert (entry / "NOTES.md").read_text() == "why this run matters\n" and (entry / "mine" / "plot.png").is_file()
    assert sorted(p.name for p in (tmp_path / "L" / "runs").iterdir()) == ["r"]  # nothing of add's own left
    assert [e.name for e in records.entries(tmp_path / "L")] == ["r"]


def test_a_users_adding_and_replaced_folders_beside_the_entry_survive(tmp_path):
    runs = tmp_path / "L" / "runs"
    records.add(make_run(tmp_path / "a" / "r", rounds=2, of=3), tmp_path / "L")
    for name in ("r.adding", "r.replaced"):
        (runs / name).mkdir(parents=True)
        (runs / name / "keep.txt").write_text(name)
    records.add(make_run(tmp_path / "b" / "r", rounds=3), tmp_path / "L")
    assert sorted(p.name for p in runs.iterdir()) == ["r", "r.adding", "r.replaced"]
    for name in ("r.adding", "r.replaced"):
        assert (runs / name / "keep.txt").read_text() == name
    assert len((runs / "r" / "metrics.jsonl").read_text().splitlines()) == 3


def test_what_an_interrupted_add_left_of_its_own_goes_with_the_next(tmp_path):
    records.add(make_run(tmp_path / "a" / "r", rounds=2, of=3), tmp_path / "L")
    dest = tmp_path / "L" / "runs" / "r"
    left = [records.own_folder(dest, "adding"), records.own_folder(dest, "replaced")]  # add's, cut off
    theirs = dest.with_name("r.abcdefgh.adding")  # of that shape, but without add's marker: a user's
    theirs.mkdir()
    records.add(make_run(tmp_path / "b" / "r", rounds=3), tmp_path / "L")
    assert not any(folder.exists() for folder in left) and theirs.is_dir()
