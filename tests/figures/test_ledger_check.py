"""The check that the run ledger is whole (figures.ledger_check): on copies of results/ledger damaged one way each,
``python -m figures check`` exits non-zero with one line naming the damaged file, no traceback and no warning, and
builds nothing; the undamaged copy passes; ``report`` never writes over a damaged ledger nor falls back to typed
"record lost" numbers for a row whose runs the ledger holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import figures.ledger as ledger
from figures.__main__ import main
from figures.ledger_check import verify
from figures.report import BEGIN, END

REPO = Path(__file__).resolve().parents[2]
LEDGER = REPO / "results" / "ledger"
REPORT = REPO / "results" / "REPORT.md"
TABLE1_RUN = "_runs/0483144d7966"  # a finished run that table1 (cpu) rests on

pytestmark = pytest.mark.skipif(not (LEDGER / TABLE1_RUN / "summary.json").exists(), reason="no results/ledger")


@pytest.fixture
def copies(tmp_path) -> tuple[Path, Path]:
    """A copy of results/ledger (about 11 MB) and one of REPORT.md."""
    shutil.copytree(LEDGER, tmp_path / "ledger")
    shutil.copy2(REPORT, tmp_path / "REPORT.md")
    return tmp_path / "ledger", tmp_path / "REPORT.md"


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def edit_final_accuracy(run: Path) -> Path:
    rows = lines_of(run / "metrics.jsonl")
    last = json.loads(rows[-1])
    last["test_accuracy"] = round(last["test_accuracy"] - 0.1, 4)
    (run / "metrics.jsonl").write_text("\n".join([*rows[:-1], json.dumps(last)]) + "\n")
    return run / "metrics.jsonl"


def junk_at_root(ledger_copy: Path) -> Path:
    (ledger_copy / "junk.bin").write_bytes(b"\0" * 3 * 2**20)
    return ledger_copy / "junk.bin"


def junk_in_run(run: Path) -> Path:
    (run / "notes.txt").write_text("a stray note\n")
    return run / "notes.txt"


def junk_run_folder(ledger_copy: Path) -> Path:
    folder = ledger_copy / "runs" / "junk"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    (folder / "metrics.jsonl").write_text("")
    return folder


def junk_keyed_folder(ledger_copy: Path) -> Path:
    folder = ledger_copy / "_runs" / "0123456789ab"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"data": 3}))
    return folder


def empty_metrics(run: Path) -> Path:
    (run / "metrics.jsonl").write_text("")
    return run / "metrics.jsonl"


def half_the_rows(run: Path) -> Path:
    rows = lines_of(run / "metrics.jsonl")
    (run / "metrics.jsonl").write_text("\n".join(rows[: len(rows) // 2]) + "\n")
    return run / "metrics.jsonl"


def torn_last_line(run: Path) -> Path:
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[: len(text) - 40])
    return run / "metrics.jsonl"


def invalid_summary(run: Path) -> Path:
    (run / "summary.json").write_text('{"rounds": 20, "final_test_accuracy": ')
    return run / "summary.json"


def delete_run(run: Path) -> Path:
    shutil.rmtree(run)
    return run


def delete_simulator_summary(ledger_copy: Path) -> Path:
    shutil.rmtree(ledger_copy / "sims" / "figB2" / "cpu")
    return ledger_copy / "sims" / "figB2" / "cpu"


def rows_swapped(run: Path) -> Path:
    rows = lines_of(run / "metrics.jsonl")
    rows[3], rows[4] = rows[4], rows[3]
    (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    return run / "metrics.jsonl"


def cut_torch_file(ledger_copy: Path) -> Path:
    path = ledger_copy / "runs" / "dynafed_fmnist_a001_code_w32_r50_n300_dsa" / "dynafed_synthesis.pt"
    path.write_bytes(path.read_bytes()[:100_000])
    return path


ON_RUN: dict[str, Callable[[Path], Path]] = {
    "final accuracy edited in metrics only": edit_final_accuracy,
    "junk file in a run": junk_in_run,
    "metrics emptied": empty_metrics,
    "metrics cut to half its rows": half_the_rows,
    "torn last line": torn_last_line,
    "invalid summary": invalid_summary,
    "run deleted": delete_run,
    "rows out of order": rows_swapped,
}
ON_LEDGER: dict[str, Callable[[Path], Path]] = {
    "3 MB junk file at the root": junk_at_root,
    "junk run folder with an invalid config": junk_run_folder,
    "junk _runs folder whose config is no run config": junk_keyed_folder,
    "simulator summary deleted": delete_simulator_summary,
    "torch file cut short": cut_torch_file,
}


def damage(how: str, ledger_copy: Path) -> Path:
    """Damage the copy one way; the path the check must name."""
    return ON_RUN[how](ledger_copy / TABLE1_RUN) if how in ON_RUN else ON_LEDGER[how](ledger_copy)


def test_the_undamaged_ledger_is_whole(copies):
    assert verify(*copies) == []
    assert verify(LEDGER, REPORT) == []


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("how", [*ON_RUN, *ON_LEDGER])
def test_each_damage_fails_the_check_with_one_line_naming_the_file(copies, how, capsys, monkeypatch):
    ledger_copy, report = copies

    def no_build(*args, **kwargs):
        raise AssertionError("an artefact was rebuilt from a damaged ledger")

    monkeypatch.setattr(ledger, "rebuild", no_build)  # the builders never see a damaged entry
    named = damage(how, ledger_copy)
    found = verify(ledger_copy, report)
    assert len(found) == 1 and found[0].startswith(f"{named}: "), found
    capsys.readouterr()
    assert main(["check", "--ledger", str(ledger_copy), "--report", str(report)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and "Traceback" not in out
    assert out.splitlines() == [
        found[0],
        f"figures check: 1 problem(s) in the run ledger {ledger_copy}; {report} not compared",
    ]


def test_the_messages_say_what_is_wrong(copies):
    ledger_copy, report = copies
    run = ledger_copy / TABLE1_RUN
    summary = json.loads((run / "summary.json").read_text())
    edit_final_accuracy(run)
    [line] = verify(ledger_copy, report)
    assert f"final_test_accuracy {summary['final_test_accuracy']!r} in summary.json" in line
    half_the_rows(run)
    [line] = verify(ledger_copy, report)
    assert "rounds 20 in summary.json, 10 from the rows" in line
    torn_last_line(run)
    assert "line 10 of 10, its last, is torn" in verify(ledger_copy, report)[0]
    junk_at_root(ledger_copy)
    junk = next(line for line in verify(ledger_copy, report) if "junk.bin" in line)
    assert "stray file" in junk and "3.0 MB is over the ledger's 2 MB per file" in junk
    delete_run(run)
    assert f"{run}: missing: {report}'s table1 (cpu) block rests on it" in "\n".join(verify(ledger_copy, report))


def test_a_damaged_ledger_leaves_the_report_as_it_was(copies, capsys):
    ledger_copy, report = copies
    before = report.read_bytes()
    delete_run(ledger_copy / TABLE1_RUN)
    assert main(["report", "--ledger", str(ledger_copy), "--report", str(report)]) == 1
    assert report.read_bytes() == before
    assert f"{ledger_copy / TABLE1_RUN}: missing" in capsys.readouterr().out


def test_a_row_whose_runs_the_ledger_holds_never_falls_back_to_typed_numbers(copies, monkeypatch):
    """With no REPORT naming them, a run deleted from fig4 still refuses fig4's typed "record lost" numbers: the
    build that failed read runs the ledger holds. Rows lost from the start (no run of theirs in the ledger) keep
    them."""
    ledger_copy, _ = copies
    typed = SimpleNamespace(claim="Fig. 4", artefact=("fig4", "cpu"), lost=("typed", "held"))
    lost_from_the_start = SimpleNamespace(claim="FedCOG", artefact=("fedcog-table1", "paper"), lost=("typed", "x"))
    monkeypatch.setattr(ledger, "ROWS", (typed, lost_from_the_start))
    fig4 = sorted(ledger_copy.glob("_runs/*"))
    report = REPORT.read_text()
    runs = report.split("### fig4 (cpu)", 1)[1].split("Ledger runs", 1)[1].split("\n", 1)[0]
    victim = next(run for run in fig4 if f"`_runs/{run.name}`" in runs)
    shutil.rmtree(victim)
    with pytest.raises(ledger.Damaged) as refused:
        ledger.sections(ledger_copy, ["fig4", "fedcog-table1"])
    [line] = refused.value.lines
    assert line.startswith("claims row 'Fig. 4': fig4 (cpu) did not rebuild although the ledger holds 11 of its runs")
    assert victim.name in line


def test_the_undamaged_copy_passes_the_full_check_on_what_it_gives(copies, capsys):
    """``check`` through the CLI on the undamaged copy, against a report written from it (the simulators' blocks
    and Table 1's: seconds; the whole report is the slow test of test_ledger.py)."""
    ledger_copy, _ = copies
    names = ["fig2", "lemma1", "figB2", "table1"]
    report = ledger_copy.parent / "FRESH.md"
    claims, blocks = ledger.sections(ledger_copy, names)
    report.write_text(f"# Measured results\n\n{claims}\n\n{blocks}\n")
    assert BEGIN in report.read_text() and END in report.read_text()
    assert main(["check", *names, "--ledger", str(ledger_copy), "--report", str(report)]) == 0, capsys.readouterr()
    torn_last_line(ledger_copy / TABLE1_RUN)
    assert main(["check", *names, "--ledger", str(ledger_copy), "--report", str(report)]) == 1


def test_the_cli_names_the_file_with_no_traceback_and_no_warning(copies):
    """The process itself, with every warning an error: one line naming the torn file, then the verdict."""
    ledger_copy, report = copies
    named = torn_last_line(ledger_copy / TABLE1_RUN)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-W", "error", "-m", "figures", "check", "--ledger", str(ledger_copy), "--report",
               str(report)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert done.returncode == 1 and done.stderr == "", done.stderr
    assert done.stdout.splitlines()[0].startswith(f"{named}: line 20 of 20, its last, is torn")
    assert len(done.stdout.splitlines()) == 2
