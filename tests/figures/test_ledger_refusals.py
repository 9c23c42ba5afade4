"""What the run ledger refuses (issue 44, classes 3 and 4), on one real ``fl.run`` run: ``ledger add`` refuses a run
whose config.json was edited after it started (provenance keeps its sha256), whose provenance.json was altered
after it finished (summary.json keeps its sha256), whose summary disagrees with its metrics or whose metrics are
torn; ``--ledger`` on a folder of other files never turns it into a ledger; ``ledger list`` names a missing folder
and shows a torn metrics file in one row; ``report`` refuses a ledger with no entries and leaves REPORT as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from figures.__main__ import main
from fl.data.formats import write_pickle_batch
from fl.run import main as run_main


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One finished fl.run run (MLP, 2 rounds) on a tiny CIFAR-10 named by data.data_root."""
    base = tmp_path_factory.mktemp("ledger-run")
    folder = base / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 20) for i in range(1, 6)] + [("test_batch", 20)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        write_pickle_batch(folder / name, {"data": data, "labels": rng.integers(0, 10, n).tolist()})
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{base / 'data'}'", "data.partition='iid'", "data.clients=2",
        "model.name='mlp'", "train.rounds=2", "train.device='cpu'", "train.estimate_every=0",
    ]  # fmt: skip
    out = base / "runs" / "r"
    assert run_main([a for s in settings for a in ("--set", s)] + ["--out", str(out), "--quiet", "--workers", "1"]) == 0
    return out


def copy_of(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs" / run.name
    shutil.copytree(run, target)
    return target


def call(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def edit_json(path: Path, change) -> None:
    tree = json.loads(path.read_text())
    change(tree)
    path.write_text(json.dumps(tree, indent=2))


def test_the_run_as_written_enters(finished, tmp_path, capsys):
    recorded = json.loads((finished / "provenance.json").read_text())
    assert len(recorded["config_sha256"]) == 64
    assert len(json.loads((finished / "summary.json").read_text())["provenance_sha256"]) == 64
    code, out, _ = call(["ledger", "add", copy_of(finished, tmp_path), "--ledger", tmp_path / "L"], capsys)
    assert code == 0 and "added as" in out


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda run: edit_json(run / "config.json", lambda c: c["train"].update(lr=[0.5])), "config.json was edited"),
        (lambda run: edit_json(run / "summary.json", lambda s: s.update(final_test_accuracy=0.99)),
         "summary.json disagrees with its metrics.jsonl (final_test_accuracy 0.99"),
        (lambda run: edit_json(run / "provenance.json", lambda p: p.update(code_version="0" * 12)),
         "provenance.json was altered"),
        (lambda run: (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text()[:-40]),
         "metrics.jsonl: line 2 of 2, its last, is torn"),
    ],
    ids=["config edited", "summary disagrees", "provenance altered", "metrics torn"],
)  # fmt: skip
def test_an_altered_run_is_refused_in_one_line(finished, tmp_path, capsys, damage, why):
    run = copy_of(finished, tmp_path)
    damage(run)
    code, out, _ = call(["ledger", "add", run, "--ledger", tmp_path / "L"], capsys)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2 and why in lines[0] and "nothing was written" in lines[0], out
    assert not (tmp_path / "L").exists()


def test_a_folder_of_other_files_never_becomes_a_ledger(finished, tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    code, out, err = call(["ledger", "add", copy_of(finished, tmp_path), "--ledger", mine], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "not a run ledger" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    code, _, err = call(["ledger", "list", "--ledger", mine], capsys)
    assert code == 2 and "not a run ledger" in err


def test_list_names_a_missing_folder_and_a_torn_metrics_or_summary_file(finished, tmp_path, capsys):
    code, out, err = call(["ledger", "list", "--ledger", tmp_path / "nonexistent"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "no such ledger folder" in err
    assert call(["ledger", "add", copy_of(finished, tmp_path), "--ledger", tmp_path / "L"], capsys)[0] == 0
    (entry,) = (tmp_path / "L" / "runs").iterdir()
    metrics = (entry / "metrics.jsonl").read_text()
    (entry / "metrics.jsonl").write_text(metrics[:-40])
    code, out, err = call(["ledger", "list", "--ledger", tmp_path / "L"], capsys)
    assert code == 0 and err == "" and "damaged metrics.jsonl" in out
    (entry / "metrics.jsonl").write_text(metrics)
    (entry / "summary.json").write_text((entry / "summary.json").read_text()[:-10])  # a summary cut short
    code, out, err = call(["ledger", "list", "--ledger", tmp_path / "L"], capsys)
    assert code == 0 and err == "" and "damaged metrics.jsonl or summary.json" in out


def test_report_refuses_a_ledger_with_no_entries(tmp_path, capsys):
    empty = tmp_path / "L"
    empty.mkdir()
    (empty / ".ledger").touch()
    report = tmp_path / "REPORT.md"
    shutil.copy(Path(__file__).resolve().parents[2] / "results" / "REPORT.md", report)
    before = report.read_bytes()
    code, out, err = call(["report", "--ledger", empty, "--report", report], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "holds no entries" in err
    assert report.read_bytes() == before
    code, _, err = call(["report", "--ledger", tmp_path / "nonexistent", "--report", report], capsys)
    assert code == 2 and "no such ledger folder" in err and report.read_bytes() == before
