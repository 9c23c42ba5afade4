"""The run ledger (figures.ledger): runs enter it by their small records only, a conflicting run is refused without
overwriting anything, a build on it trains nothing and names what is missing, and the check fails when one metrics
row of the ledger changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import figures.flruns as flruns
import figures.ledger as ledger
import lab.records.ledger as records
from figures.__main__ import main
from figures.artefacts import Build
from figures.report import BEGIN, END
from fl.config import load_config

REPO = Path(__file__).resolve().parents[2]
LEDGER = REPO / "results" / "ledger"


def make_run(folder: Path, rounds: int = 3, seed: int = 0, code: str = "abc", of: int | None = None) -> Path:
    """A small fl.run-like folder: config, metrics, provenance, a checkpoint the ledger must skip, and a summary where
    the run is finished. ``rounds`` rows of a config of ``of`` rounds (``rounds``: a finished run); an unfinished
    run (``rounds`` < ``of``) has no summary, as fl.run leaves it: a summary that ends before its config's rounds
    without diverging is one `figures check` and `ledger add` refuse."""
    of = rounds if of is None else of
    config = load_config(REPO / "configs" / "fmnist_quick.toml", [f"train.seed={seed}", f"train.rounds={of}"])
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    rows = [{"round": t, "test_accuracy": 0.1 * t, "communication": t} for t in range(1, rounds + 1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "provenance.json").write_text(json.dumps({"code_version": code, "git": "g", "changes": []}))
    if rounds >= of:
        (folder / "summary.json").write_text(json.dumps({"rounds": rounds}))
    (folder / "checkpoint.pt").write_bytes(b"x" * 100)
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def test_a_run_enters_with_its_small_records_only(tmp_path):
    run = make_run(tmp_path / "store" / "runs" / "a_run")
    message = records.add(run, tmp_path / "L", device="NVIDIA H200", note="n")
    entry = tmp_path / "L" / "runs" / "a_run"
    assert "added" in message and (tmp_path / "L" / flruns.LEDGER_MARK).exists()
    assert sorted(f.name for f in entry.iterdir()) == [
        "config.json", "ledger.json", "metrics.jsonl", "provenance.json", "summary.json",
    ]  # fmt: skip
    meta = json.loads((entry / "ledger.json").read_text())
    assert meta["device"] == "NVIDIA H200" and meta["git"] == "g" and meta["source"] == str(run.resolve())
    assert "unchanged" in records.add(run, tmp_path / "L")


def test_a_store_run_enters_under_its_key_whatever_store_it_ran_in(tmp_path):
    run = make_run(tmp_path / "elsewhere" / flruns.RUNS / "0123456789ab")
    records.add(run, tmp_path / "L")
    config = load_config(REPO / "configs" / "fmnist_quick.toml", ["train.seed=0", "train.rounds=3"])
    assert (tmp_path / "L" / flruns.RUNS / flruns.run_key(config) / "metrics.jsonl").exists()
    moved = load_config(
        REPO / "configs" / "fmnist_quick.toml", ["train.seed=0", "train.rounds=3", 'method.cache_dir="/x"']
    )
    assert flruns.run_key(moved) == flruns.run_key(config)  # where generators are cached is no part of the name
    names = {flruns.run_key(load_config(REPO / "configs" / "fmnist_quick.toml", [f"algorithm.name='{a}'"]))
             for a in ("fedavg", "fedprox", "scaffold", "feddyn", "fedpvr", "fedavgm")}  # fmt: skip
    assert len(names) == 6  # a default-valued key is left out of the name, the algorithm's (method's) name never


def test_a_run_further_along_replaces_its_entry(tmp_path):
    records.add(make_run(tmp_path / "a" / "r", rounds=2, of=4), tmp_path / "L")  # unfinished: no summary yet
    assert "added" in records.add(make_run(tmp_path / "b" / "r", rounds=4), tmp_path / "L")
    assert len((tmp_path / "L" / "runs" / "r" / "metrics.jsonl").read_text().splitlines()) == 4


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"seed": 1}, "its config differs"),
        ({"code": "other"}, "its provenance code_version"),
        ({"rows": True}, "its metrics disagree"),
    ],
)
def test_a_conflicting_run_is_refused_and_nothing_is_overwritten(tmp_path, change, why):
    records.add(make_run(tmp_path / "a" / "r"), tmp_path / "L")
    before = snapshot(tmp_path / "L")
    other = make_run(tmp_path / "b" / "r", seed=change.get("seed", 0), code=change.get("code", "abc"))
    if change.get("rows"):
        (other / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.9, "communication": 1}\n')
        (other / "summary.json").unlink()  # the run agrees with itself: one round of three, unfinished
    with pytest.raises(ledger.InputError, match=why) as error:
        records.add(other, tmp_path / "L")
    assert "\n" not in str(error.value) and "nothing was overwritten" in str(error.value)
    assert snapshot(tmp_path / "L") == before


def test_a_file_over_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "MAX_FILE", 10)
    with pytest.raises(ledger.InputError, match="over the ledger's 2 MB per file"):
        records.add(make_run(tmp_path / "a" / "r"), tmp_path / "L")
    assert not (tmp_path / "L" / "runs").exists()


def test_the_cli_adds_lists_and_refuses_with_one_line(tmp_path, capsys):
    ok, bad = make_run(tmp_path / "a" / "r"), make_run(tmp_path / "b" / "r", seed=3)
    assert main(["ledger", "add", str(ok), "--ledger", str(tmp_path / "L"), "--device", "cpu"]) == 0
    assert main(["ledger", "add", str(bad), "--ledger", str(tmp_path / "L")]) == 1
    out = capsys.readouterr().out
    assert out.count("refused") == 2 and "its config differs" in out
    assert main(["ledger", "list", "--ledger", str(tmp_path / "L")]) == 0
    listing = capsys.readouterr().out
    assert "runs/r" in listing and "3 of 3 (done)" in listing and "abc" in listing and "cpu" in listing
    assert main(["ledger", "add", str(tmp_path / "nothing"), "--ledger", str(tmp_path / "L")]) == 1


def test_a_build_on_the_ledger_trains_nothing_and_names_what_is_missing(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a run started on the ledger")

    monkeypatch.setattr(flruns, "run_one", refuse)
    monkeypatch.setattr(flruns, "run_processes", refuse)
    records.ensure(tmp_path / "L")
    built = ledger.rebuild(tmp_path / "L", ["table1", "fig2"])
    assert built["table1", "cpu"] == "none of its 24 runs is in the ledger"
    assert built["fig2", "cpu"] == "The simulator's summary is not in the ledger."


DYNAFED = sorted(LEDGER.glob("runs/dynafed_fmnist_a001_*paper*")) + sorted(
    LEDGER.glob("runs/dynafed_fmnist_a001_fedavg_from19*")
)


@pytest.mark.skipif(not DYNAFED, reason="no DynaFed paper-scale runs in results/ledger")
def test_the_check_fails_when_one_metrics_row_changes(tmp_path, capsys):
    copy = tmp_path / "L"
    records.ensure(copy)
    for run in DYNAFED:
        shutil.copytree(run, copy / "runs" / run.name)
    assert records.seal(copy)[0] == []  # the copies' manifest: the ledger's whole once it lists every entry
    report = tmp_path / "REPORT.md"
    report.write_text(f"# Measured results\n\nHand text.\n\n{BEGIN}\n{END}\n")  # a report: its marker lines
    assert main(["report", "--ledger", str(copy), "--report", str(report)]) == 0
    assert "Hand text." in report.read_text() and "### dynafed-table1 (paper)" in report.read_text()
    assert main(["check", "dynafed-table1", "--ledger", str(copy), "--report", str(report)]) == 0

    def lower_the_last_accuracy(run: Path) -> Path:
        metrics = copy / "runs" / run.name / "metrics.jsonl"
        rows = metrics.read_text().splitlines()
        row = json.loads(rows[-1])
        row["test_accuracy"] = round(row["test_accuracy"] - 0.05, 4)
        metrics.write_text("\n".join([*rows[:-1], json.dumps(row)]) + "\n")
        return metrics

    # an unfinished run (no summary.json): only the rebuilt numbers can tell; its last row is the common round
    partial = min((r for r in DYNAFED if not (r / "summary.json").exists()),
                  key=lambda r: len((r / "metrics.jsonl").read_text().splitlines()))  # fmt: skip
    lower_the_last_accuracy(partial)
    capsys.readouterr()
    assert main(["check", "dynafed-table1", "--ledger", str(copy), "--report", str(report)]) == 1
    assert "differs from the file the entry was added with" in capsys.readouterr().out  # its recorded sha256
    # a finished run: its summary.json no longer agrees with its rows, and the ledger check names the file
    metrics = lower_the_last_accuracy(DYNAFED[-1])
    assert main(["check", "dynafed-table1", "--ledger", str(copy), "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{metrics}: ") and "disagrees with summary.json: final_test_accuracy" in out


def test_the_report_is_what_the_ledger_gives(capsys):
    """CI's check: every generated number of results/REPORT.md is rebuilt from results/ledger, offline (~2 s since
    the rebuild draws no figure: in the default suite)."""
    assert main(["check", "--ledger", str(LEDGER), "--report", str(REPO / "results" / "REPORT.md")]) == 0, (
        capsys.readouterr().out
    )


def test_the_rebuild_names_every_figure_and_draws_none(monkeypatch):
    """The check compares numbers and figure names, so its rebuild draws nothing (`figures check` took 41 s with
    the figures drawn into a folder it then deleted, 3 s without); a build outside the rebuild still draws."""
    import matplotlib.figure

    def refuse(*args, **kwargs):
        raise AssertionError("a figure was drawn")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", refuse)
    built = ledger.rebuild(LEDGER)
    assert Build("cpu", Path("unused")).draw  # a build outside the rebuild draws: no setting left behind by it
    results = [result for result in built.values() if isinstance(result, dict)]
    assert len(results) >= 10 and all(result["figures"] for result in results)
    if DYNAFED:
        assert any(name.startswith("dsyn_") for name in built["dynafed-table1", "paper"]["figures"])
    with pytest.raises(AssertionError, match="a figure was drawn"):
        flruns.save(Build("cpu", Path(".")), matplotlib.figure.Figure(), "unused")
