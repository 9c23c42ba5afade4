"""The ledger knows all it holds (issue 66, section 3): ``results/ledger/manifest.json`` lists every entry (runs,
simulator summaries, quality reports, gpu-bench records) with the sha256 of each of its files; every ``ledger add``
(a run folder, ``.`` inside one, a simulator run, a quality report, a gpu-bench record, a lease's runs) records its
entry there under the ledger's lock; ``figures check`` fails, one line naming the entry or file, on an entry deleted
(whether or not an artefact reads it), an unknown entry added, an edited simulator summary, quality report or bench
record, a provenance that does not match its config, and a missing or damaged manifest. ``ledger seal`` writes the
manifest of a ledger whose check passes otherwise, and never of a damaged one. Entries are folders as any other of
the repository (not mkdtemp's 0700). Each test builds its own small ledger in tmp_path; results/ledger is only read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import lab.records.lease as lease
import lab.records.ledger as records
from figures.__main__ import main
from lab.records.check import MANIFEST, entries_on_disk, sealed, verify
from tests.figures.test_ledger import make_run, snapshot
from theory.errors import InputError

REPO = Path(__file__).resolve().parents[2]
QUALITY = REPO / "results" / "ledger" / "quality" / "ddpm-fmnist-seed0.json"
BENCH = REPO / "results" / "ledger" / "bench" / "2026-11-28-h100"
needs_records = pytest.mark.skipif(not (QUALITY.is_file() and BENCH.is_dir()), reason="no results/ledger records")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_with_digests(folder: Path, rounds: int = 3, seed: int = 0) -> Path:
    """A finished run whose provenance records its config's sha256 and whose summary records its provenance's, as
    fl.run writes them."""
    run = make_run(folder, rounds=rounds, seed=seed)
    provenance = json.loads((run / "provenance.json").read_text()) | {"config_sha256": sha(run / "config.json")}
    (run / "provenance.json").write_text(json.dumps(provenance))
    summary = json.loads((run / "summary.json").read_text()) | {"provenance_sha256": sha(run / "provenance.json")}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def simulator_run(out: Path) -> Path:
    run = out / "fig2" / "cpu" / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"config": {"preset": "cpu"}, "quick": False, "rho": 0.5}))
    return run


@pytest.fixture
def small(tmp_path) -> Path:
    """A ledger made by ``ledger add`` alone: two named runs, a keyed run, a simulator summary, a quality report and
    a gpu-bench record."""
    if not (QUALITY.is_file() and BENCH.is_dir()):
        pytest.skip("no results/ledger records to copy")
    ledger, src = tmp_path / "L", tmp_path / "src"
    for run in (run_with_digests(src / "runs" / "a_seed0"), run_with_digests(src / "runs" / "b_seed1", 4, seed=1),
                run_with_digests(src / "_runs" / "0123456789ab", 5), simulator_run(src / "sims")):  # fmt: skip
        assert "added as" in records.add(run, ledger)
    shutil.copy2(QUALITY, src / "report.json")  # any name: it enters under its report's name
    assert "added as" in records.add(src / "report.json", ledger)
    shutil.copytree(BENCH, src / BENCH.name)
    assert "added as" in records.add(src / BENCH.name, ledger)
    return ledger


def manifest(ledger: Path) -> dict:
    return json.loads((ledger / MANIFEST).read_text())["entries"]


def test_every_add_records_its_entry_and_the_ledger_is_whole(small):
    entries = manifest(small)
    keyed = next(name for name in entries if name.startswith("_runs/"))
    assert sorted(entries) == sorted(["runs/a_seed0", "runs/b_seed1", keyed, "sims/fig2/cpu",
                                      f"quality/{QUALITY.name}", f"bench/{BENCH.name}"])  # fmt: skip
    assert sorted(entries) == sorted(entries_on_disk(small))
    assert entries["runs/a_seed0"]["config.json"] == sha(small / "runs" / "a_seed0" / "config.json")
    assert sorted(entries["sims/fig2/cpu"]) == ["ledger.json", "summary.json"]
    assert entries[f"quality/{QUALITY.name}"] == sha(QUALITY)  # a file entry: its digest
    assert entries[f"bench/{BENCH.name}"] == {p.name: sha(p) for p in BENCH.iterdir()}
    text = (small / MANIFEST).read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"  # sorted, one file a line
    assert verify(small) == []


def delete_unreferenced_entry(ledger: Path) -> Path:
    shutil.rmtree(ledger / "runs" / "b_seed1")  # no artefact reads it: only the manifest knows it was there
    return ledger / "runs" / "b_seed1"


def add_unknown_entry(ledger: Path) -> Path:
    shutil.copytree(ledger / "bench" / BENCH.name, ledger / "bench" / "2099-01-01-h900")  # whole, but unknown
    return ledger / "bench" / "2099-01-01-h900"


def edit_simulator_summary(ledger: Path) -> Path:
    path = ledger / "sims" / "fig2" / "cpu" / "summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"rho": 0.25}))
    return path


def edit_quality_field(ledger: Path) -> Path:
    path = ledger / "quality" / QUALITY.name
    report = json.loads(path.read_text())
    report["label_agreement"] = 0.123456 if report["label_agreement"] != 0.123456 else 0.5  # still a fraction
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def edit_bench_field(ledger: Path) -> Path:
    path = ledger / "bench" / BENCH.name / "gpu.json"
    record = json.loads(path.read_text())
    record["device"] = "NVIDIA H900"
    path.write_text(json.dumps(record, indent=2))
    return path


def reseal(ledger: Path, entry: Path) -> None:
    """What a forger who knows the entry's ledger.json and the manifest would do: both written again."""
    record = json.loads((entry / "ledger.json").read_text())
    files = [entry / name for name in record["files"]]
    (entry / "ledger.json").write_text(json.dumps(sealed(record, files), indent=2))
    records.record_entries(ledger, [entry])


def provenance_not_its_config(ledger: Path) -> Path:
    entry = ledger / "runs" / "a_seed0"
    config = json.loads((entry / "config.json").read_text())
    config["train"]["lr"] = config["train"]["lr"] * 2  # another run's config, the run's name still true
    (entry / "config.json").write_text(json.dumps(config))
    reseal(ledger, entry)
    return entry / "config.json"


def summary_not_its_provenance(ledger: Path) -> Path:
    entry = ledger / "runs" / "a_seed0"
    provenance = json.loads((entry / "provenance.json").read_text()) | {"code_version": "0123456789ab"}
    (entry / "provenance.json").write_text(json.dumps(provenance))
    reseal(ledger, entry)
    return entry / "provenance.json"


def file_put_in_a_simulator_entry(ledger: Path) -> Path:
    (ledger / "sims" / "fig2" / "cpu" / "notes.txt").write_text("mine\n")
    return ledger / "sims" / "fig2" / "cpu" / "notes.txt"


def bench_log_deleted(ledger: Path) -> Path:
    (ledger / "bench" / BENCH.name / "bench.log").unlink()
    return ledger / "bench" / BENCH.name / "bench.log"


def manifest_deleted(ledger: Path) -> Path:
    (ledger / MANIFEST).unlink()
    return ledger / MANIFEST


def manifest_cut(ledger: Path) -> Path:
    path = ledger / MANIFEST
    path.write_text(path.read_text()[:-200])
    return path


DAMAGE: dict[str, tuple[Callable[[Path], Path], str]] = {
    "a deleted entry no artefact reads": (delete_unreferenced_entry, "missing: the ledger's manifest lists it"),
    "an unknown entry added": (add_unknown_entry, "not in the ledger's manifest"),
    "an edited simulator summary field": (edit_simulator_summary, "differs from the file the entry was added with"),
    "an edited quality field": (edit_quality_field, "differs from the file the entry was added with"),
    "an edited bench record field": (edit_bench_field, "differs from the file the entry was added with"),
    "a provenance that does not match its config (resealed)": (provenance_not_its_config,
                                                               "is not the config_sha256 its provenance.json records"),
    "a summary that does not match its provenance (resealed)": (summary_not_its_provenance,
                                                                "not the provenance_sha256 its summary.json records"),
    "a file put in a simulator entry": (file_put_in_a_simulator_entry, "not among the files the entry was added"),
    "a bench log deleted": (bench_log_deleted, "missing: the entry was added with it"),
    "the manifest deleted": (manifest_deleted, "missing: the ledger's 6 entries are listed nowhere"),
    "the manifest cut short": (manifest_cut, "not JSON (cut short or damaged)"),
}  # fmt: skip


@pytest.mark.parametrize("how", DAMAGE)
def test_check_fails_with_one_line_naming_what_was_damaged(small, how, capsys):
    damage_it, said = DAMAGE[how]
    named = damage_it(small)
    found = verify(small)
    assert len(found) == 1 and found[0].startswith(f"{named}: ") and said in found[0], found
    capsys.readouterr()
    report = small.parent / "REPORT.md"
    assert main(["check", "--ledger", str(small), "--report", str(report)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines()[0] == found[0] and "Traceback" not in out


def test_seal_writes_the_manifest_of_a_whole_ledger_only(small, capsys):
    before = (small / MANIFEST).read_bytes()
    (small / MANIFEST).unlink()
    seal = ["ledger", "seal", "--ledger", str(small), "--report", str(small.parent / "none.md")]
    assert main(seal) == 0
    assert "6 entries sealed (6 new, 0 changed, 0 gone" in capsys.readouterr().out
    assert (small / MANIFEST).read_bytes() == before and verify(small) == []
    metrics = small / "runs" / "a_seed0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text()[:-5])  # torn: damage is never sealed
    unsealed = snapshot(small)
    assert main(seal) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{metrics}: ") and "no manifest written" in out and snapshot(small) == unsealed


def test_a_quality_report_or_bench_record_already_in_place_is_recorded_once_and_never_again_after_an_edit(small):
    report = small / "quality" / "ddpm-fmnist-seed9.json"
    content = json.loads(QUALITY.read_text()) | {"seed": 9}
    report.write_text(json.dumps(content))  # as `fl.quality --out results/ledger/quality/...` writes it
    assert [line for line in verify(small) if "not in the ledger's manifest" in line]
    assert "recorded as it is" in records.add(report, small)
    assert verify(small) == [] and "unchanged" in records.add(report, small)
    report.write_text(json.dumps(content | {"noise_fraction": 0.0}))
    with pytest.raises(InputError, match=r"differs from what the ledger's manifest\.json recorded"):
        records.add(report, small)
    assert verify(small)  # still named by the check


@needs_records
def test_a_damaged_record_is_refused_in_one_line_and_nothing_written(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps(json.loads(QUALITY.read_text()) | {"noise_fraction": 2.0}))
    with pytest.raises(InputError, match="a fraction outside") as refused:
        records.add(tmp_path / "bad.json", tmp_path / "L")
    assert "\n" not in str(refused.value) and not (tmp_path / "L").exists()


@needs_records
def test_the_add_paths_of_the_cli_record_their_entries(tmp_path, monkeypatch, capsys):
    """`figures ledger add` as scripts/fedssyn-table1.sh calls it (with --note), and `.` inside a run folder: the
    entry is named as the folder, under its key for a store's keyed run."""
    ledger = tmp_path / "L"
    named = run_with_digests(tmp_path / "store" / "runs" / "c_seed0")
    keyed = run_with_digests(tmp_path / "store" / "_runs" / "feedfacecafe", 4)
    assert main(["ledger", "add", "--ledger", str(ledger), "--note", "a script", str(named)]) == 0
    monkeypatch.chdir(keyed)
    assert main(["ledger", "add", ".", "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert f"{keyed}: added as {ledger}/_runs/" in out
    monkeypatch.chdir(tmp_path / "store" / "runs")
    assert main(["ledger", "add", "./c_seed0/.", "--ledger", str(ledger)]) == 0
    assert "(unchanged)" in capsys.readouterr().out
    assert sorted(manifest(ledger)) == sorted(str(e.relative_to(ledger)) for e in records.entries(ledger))
    assert len(manifest(ledger)) == 2 and verify(ledger) == []
    assert sorted(p.name for p in ledger.iterdir()) == [".ledger", "_runs", "manifest.json", "runs"]
    monkeypatch.chdir("/")
    with pytest.raises(InputError, match="not a run folder"):
        records.add(Path("."), ledger)


def test_a_lease_brought_home_records_its_runs(tmp_path):
    src = run_with_digests(tmp_path / "device" / "runs" / "d_seed0")
    group = [(f"runs/d_seed0/{f.name}", f.read_bytes()) for f in sorted(src.iterdir()) if f.suffix != ".pt"]
    lease.write_archives([group], tmp_path / "lease", lease.RECORDS, 2**20, 8, 2**24, compress=True)
    lines, refused = lease.bring_home(tmp_path / "lease", tmp_path / "L", tmp_path / "store")
    assert refused == 0 and any("finished   d_seed0" in line for line in lines), lines
    assert list(manifest(tmp_path / "L")) == ["runs/d_seed0"] and verify(tmp_path / "L") == []


def test_new_entries_are_folders_as_any_other(tmp_path):
    mask = os.umask(0o022)
    try:
        records.add(run_with_digests(tmp_path / "store" / "runs" / "e_seed0"), tmp_path / "L")
        records.add(simulator_run(tmp_path / "sims"), tmp_path / "L")
    finally:
        os.umask(mask)
    for entry in (tmp_path / "L" / "runs" / "e_seed0", tmp_path / "L" / "sims" / "fig2" / "cpu"):
        assert entry.stat().st_mode & 0o777 == 0o755, oct(entry.stat().st_mode)


def test_the_ledgers_lock_keeps_a_second_process_out(tmp_path):
    records.add(run_with_digests(tmp_path / "store" / "runs" / "f_seed0"), tmp_path / "L")
    probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError:\n    print('held')")  # fmt: skip
    ask = [sys.executable, "-c", probe, str(tmp_path / "L")]
    with records.ledger_lock(tmp_path / "L"), records.ledger_lock(tmp_path / "L"):  # it nests in one process
        assert subprocess.run(ask, capture_output=True, text=True).stdout.strip() == "held"
    assert subprocess.run(ask, capture_output=True, text=True).stdout.strip() == "free"


def test_an_add_never_writes_over_a_damaged_manifest(tmp_path, capsys):
    ledger = tmp_path / "L"
    records.add(run_with_digests(tmp_path / "store" / "runs" / "g_seed0"), ledger)
    (ledger / MANIFEST).write_text("{}")  # no manifest's shape
    before = snapshot(ledger)
    run = run_with_digests(tmp_path / "store" / "runs" / "h_seed1", seed=1)
    assert main(["ledger", "add", str(run), "--ledger", str(ledger)]) == 1
    out = capsys.readouterr().out
    assert f"{ledger / MANIFEST}: not a ledger manifest" in out and snapshot(ledger) == before
