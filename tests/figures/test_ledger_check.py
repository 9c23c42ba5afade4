"""The check that the run ledger is whole (lab.records.check): on copies of results/ledger damaged one way each,
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
from figures.ledger import verify
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
        f"figures check: 1 problem(s) in the run ledger {ledger_copy}; {report} not compared; restore the ledger "
        f"(git checkout -- {ledger_copy}) or re-add the runs named (figures ledger add)",
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
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"{named}: ") and "line 20 of 20, its last, is torn" in first
    assert len(done.stdout.splitlines()) == 2


NAMED_RUN = "runs/fedcog_fmnist_niid1_seed0"


def summary_deleted(ledger_copy: Path) -> Path:
    (ledger_copy / TABLE1_RUN / "summary.json").unlink()
    return ledger_copy / TABLE1_RUN / "summary.json"


def seed_changed_in_a_named_run(ledger_copy: Path) -> Path:
    path = ledger_copy / NAMED_RUN / "config.json"
    config = json.loads(path.read_text())
    config["train"]["seed"] = 7
    path.write_text(json.dumps(config, indent=2))
    return path


def code_version_edited(ledger_copy: Path) -> Path:
    path = ledger_copy / TABLE1_RUN / "provenance.json"
    entry = json.loads(path.read_text())
    entry["code_version"] = "0123456789ab"
    path.write_text(json.dumps(entry, indent=2))
    return path


def device_edited(ledger_copy: Path) -> Path:
    path = ledger_copy / TABLE1_RUN / "ledger.json"
    entry = json.loads(path.read_text())
    entry["device"] = "NVIDIA H100"
    path.write_text(json.dumps(entry, indent=2))
    return path


def fake_run_added(ledger_copy: Path) -> Path:
    """A self-consistent fake: seed 2's run copied as seed 3, its config's seed set to match, its ledger.json fresh."""
    fake = ledger_copy / "runs" / "fedcog_fmnist_niid1_seed3"
    shutil.copytree(ledger_copy / "runs" / "fedcog_fmnist_niid1_seed2", fake)
    config = json.loads((fake / "config.json").read_text())
    config["train"]["seed"] = 3
    (fake / "config.json").write_text(json.dumps(config, indent=2))
    (fake / "ledger.json").write_text(json.dumps({"source": "by hand", "device": "cpu"}))
    return fake


def duplicated_under_another_name(ledger_copy: Path) -> Path:
    copy = ledger_copy / "runs" / "fedcog_fmnist_niid1_seed0_again"
    shutil.copytree(ledger_copy / NAMED_RUN, copy)
    return copy


def fedcog_as_hfmds(ledger_copy: Path) -> Path:
    shutil.copytree(ledger_copy / "runs" / "fedcog_fmnist_niid1_seed0_fedcog",
                    ledger_copy / "runs" / "hfmds_fmnist_copied_seed0_hfmds")  # fmt: skip
    return ledger_copy / "runs" / "hfmds_fmnist_copied_seed0_hfmds"


MISSES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "a finished run's summary.json deleted": (summary_deleted, "missing"),
    "train.seed changed 0 -> 7 in a named run": (seed_changed_in_a_named_run, "its name says seed 0"),
    "code_version edited in provenance.json": (code_version_edited, "differs from the file the entry was added with"),
    "ledger.json's device edited": (device_edited, "differ from those recorded when the entry was added"),
    "a self-consistent fake run added": (fake_run_added, "records no digests"),
    "a run duplicated under another name": (duplicated_under_another_name, "the same run as runs/fedcog_fmnist"),
    "a FedCOG run copied under an HFMDs name": (fedcog_as_hfmds, "its name's arm (hfmds) runs 'hfmds'"),
}


@pytest.mark.parametrize("how", MISSES)
def test_what_the_ledger_recorded_is_checked(copies, how, capsys):
    ledger_copy, report = copies
    damage_it, said = MISSES[how]
    named = damage_it(ledger_copy)
    found = verify(ledger_copy, report)
    assert found and all(line.startswith(str(named)) for line in found), found
    assert any(said in line for line in found), found
    capsys.readouterr()
    assert main(["check", "--ledger", str(ledger_copy), "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert "figures report" not in out  # damage is never advised to be rebuilt over


def test_check_with_a_name_compares_that_artefacts_claims_row(copies, capsys):
    ledger_copy, report = copies
    text = report.read_text()
    row = next(
        line for line in text.splitlines() if "python -m figures fedcog-table1 " in line and line.startswith("| ")
    )
    report.write_text(text.replace(row, row.replace("| not resolved |", "| held |", 1)))
    assert main(["check", "fedcog-table1", "--ledger", str(ledger_copy), "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert "+| FedCOG Table 1" in out or "-| FedCOG Table 1" in out
    assert "git checkout" in out.splitlines()[-1]
