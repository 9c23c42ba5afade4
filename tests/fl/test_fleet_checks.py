"""A fleet checks every entry before any entry's folder changes (fifth sweep, cases 111-116): a later entry's missing
``--init-from`` checkpoint, a ``--resume`` folder whose config or checkpoint is damaged, missing data, a folder
another process runs in, or an ``--init-from`` into a folder the fleet itself rewrites refuses the spec in one line
naming the entry, before an earlier entry's ``--overwrite`` removes its finished run and before any folder is made;
a path holding a NUL byte is one line, never a traceback; an entry naming no run (fl.run's default config) is
refused; a spec of more than :data:`fl.fleet.MAX_ENTRIES` entries is refused before anything is read further."""

from __future__ import annotations

import pytest

import fl.fleet as fleet_module
from fl.atomic import locked
from fl.fleet import MAX_ENTRIES
from fl.run import main as run_main
from fl.runfolder import RUN_LOCK
from tests.fl.test_fleet_specs import fleet_of, sets


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def finished_run(root, out) -> dict[str, bytes]:
    """A finished run in ``out`` (two rounds, one kept checkpoint); its files."""
    assert run_main([*sets(root, "train.keep_round=1"), "--out", str(out), "--quiet"]) == 0
    return files(out)


def damaged_resume(root, tmp_path) -> list[str]:
    run = tmp_path / "c"
    run.mkdir()
    (run / "config.json").write_text('{"data": 5')
    return ["--resume", str(run)]


def damaged_checkpoint(root, tmp_path) -> list[str]:
    run = tmp_path / "c"
    finished_run(root, run)
    (run / "summary.json").unlink()  # a started run, continued by the fleet
    (run / "checkpoint.pt").write_bytes(b"not a checkpoint")
    return ["--resume", str(run)]


def started_of_damaged_checkpoint(root, tmp_path) -> list[str]:
    run = tmp_path / "c"
    finished_run(root, run)
    (run / "summary.json").unlink()
    (run / "checkpoint.pt").write_bytes(b"not a checkpoint")
    return [*sets(root, "train.keep_round=1"), "--out", str(run)]  # its own config: continued, as a resume


BAD_SECOND = {
    "missing --init-from": (lambda root, tmp: [*sets(root), "--out", str(tmp / "b"),
                                               "--init-from", str(tmp / "nowhere" / "checkpoint.pt")], "nowhere"),
    "damaged --resume config": (damaged_resume, "config.json of the run is unreadable"),
    "damaged --resume checkpoint": (damaged_checkpoint, "checkpoint.pt"),
    "started run, damaged checkpoint": (started_of_damaged_checkpoint, "checkpoint.pt"),
    "missing data": (lambda root, tmp: [*sets(root, f"data.dataset='npz:{tmp / 'gone.npz'}'"), "--out",
                                        str(tmp / "b")], "gone.npz"),
    "missing data root": (lambda root, tmp: [*sets(root, f"data.data_root='{tmp / 'no-root'}'"), "--out",
                                             str(tmp / "b")], "no-root"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_SECOND))
def test_a_bad_later_entry_refuses_the_spec_before_an_overwrite_removes_a_finished_run(
    cifar_root, tmp_path, capsys, case
):
    """Cases 111-113: entry 1 starts a finished run again (--overwrite); entry 2 is refused by what it names. The
    refusal is one line naming entry 2, and entry 1's run is as it was; no folder is made."""
    out = tmp_path / "a"
    before = finished_run(cifar_root, out)
    make, said = BAD_SECOND[case]
    second = make(cifar_root, tmp_path)
    c = {p.name: p.read_bytes() for p in (tmp_path / "c").iterdir()} if (tmp_path / "c").is_dir() else None
    code, err = fleet_of(tmp_path, [[*sets(cifar_root), "--out", str(out), "--overwrite"], second], capsys)
    assert code == 2 and err.count("\n") == 1 and "entry 2" in err and said in err, err
    assert "Traceback" not in err
    assert files(out) == before  # entry 1's finished run kept
    assert not (tmp_path / "b").exists()  # nothing made
    if c is not None:
        assert {p.name: p.read_bytes() for p in (tmp_path / "c").iterdir()} == c


def test_a_folder_another_process_runs_in_refuses_the_spec_before_anything_changes(cifar_root, tmp_path, capsys):
    """A later entry's run folder held by another run (its lock): refused before entry 1's --overwrite."""
    out, busy = tmp_path / "a", tmp_path / "busy"
    before = finished_run(cifar_root, out)
    finished_run(cifar_root, busy)
    (busy / "summary.json").unlink()  # started: the fleet would continue it
    entries = [[*sets(cifar_root), "--out", str(out), "--overwrite"], ["--resume", str(busy)]]
    with locked(busy / RUN_LOCK, busy=f"run directory {busy}"):  # as another fl.run holds it
        code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and err.count("\n") == 1 and "entry 2" in err and "is in use by another process" in err, err
    assert files(out) == before


def test_an_init_from_into_a_folder_the_fleet_rewrites_is_refused(cifar_root, tmp_path, capsys):
    """Entry 2 starts from a checkpoint of the run entry 1 starts again (--overwrite): its checkpoint would be gone
    or rewritten while entry 2 reads it. From a folder whose run is finished and left as it is, it is allowed
    (tests/fl/test_fleet.py)."""
    out = tmp_path / "a"
    before = finished_run(cifar_root, out)
    kept = out / "checkpoint_round1.pt"
    entries = [[*sets(cifar_root), "--out", str(out), "--overwrite"],
               [*sets(cifar_root), "--out", str(tmp_path / "b"), "--init-from", str(kept)]]  # fmt: skip
    code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and err.count("\n") == 1 and "entry 2" in err and "entry 1 writes" in err, err
    assert files(out) == before and not (tmp_path / "b").exists()


def test_no_folder_is_made_before_every_entry_passed_its_checks(cifar_root, tmp_path, capsys):
    """Case 116's second half: two good entries and a bad third; neither good entry's folder is made."""
    entries = [[*sets(cifar_root), "--out", str(tmp_path / "r0")], [*sets(cifar_root), "--out", str(tmp_path / "r1")],
               [*sets(cifar_root), "--out", str(tmp_path / "r2"), "--init-from", str(tmp_path / "no.pt")]]  # fmt: skip
    code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and err.count("\n") == 1 and "entry 3" in err, err
    assert not any((tmp_path / f"r{k}").exists() for k in range(3))


ODD_PATHS = {  # each flag's entry, its path replaced by ODD
    "--out": ["--config", "toy.toml", "--out", "ODD"],
    "--resume": ["--resume", "ODD"],
    "--config": ["--config", "ODD", "--out", "r"],
    "--init-from": ["--config", "toy.toml", "--out", "r", "--init-from", "ODD"],
    "--tensorboard": ["--config", "toy.toml", "--out", "r", "--tensorboard", "ODD"],
    "--mlflow": ["--config", "toy.toml", "--out", "r", "--mlflow", "ODD"],
}


@pytest.mark.parametrize("flag", list(ODD_PATHS))
@pytest.mark.parametrize("odd", ["a\0b", "a\ud800b"])
def test_a_path_holding_a_nul_byte_is_one_line_naming_the_entry(tmp_path, monkeypatch, capsys, flag, odd):
    """Case 114: every path an entry names (also as --flag=value), a NUL byte or a lone surrogate in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toy.toml").write_text("[train]\nrounds = 1\n")
    entry = [odd if arg == "ODD" else arg for arg in ODD_PATHS[flag]]
    at = entry.index(odd)
    joined = [*entry[: at - 1], f"{flag}={odd}", *entry[at + 1 :]]
    for second in (entry, joined):
        code, err = fleet_of(tmp_path, [["--config", "toy.toml", "--out", "first"], second], capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert f"entry 2: {flag} " in err and "no path or value may" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json", "toy.toml"]


@pytest.mark.parametrize("entry", [["--workers", "1"], ["--quiet"], ["--device", "cpu"], ["--set", "train.rounds=1"]])
def test_an_entry_that_names_no_run_is_refused_never_the_default_config(tmp_path, monkeypatch, capsys, entry):
    """Case 115: flags alone (or --set without --out) would train fl.run's default config into results/runs."""
    monkeypatch.chdir(tmp_path)
    code, err = fleet_of(tmp_path, [entry], capsys)
    assert code == 2 and err.count("\n") == 1 and "entry 1: names no run" in err, err
    assert "--config" in err and "--resume" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]  # no results/runs/default


def test_a_spec_of_more_entries_than_the_bound_is_refused_before_any_is_checked(tmp_path, monkeypatch, capsys):
    """Case 116: refused in one line before any entry is parsed, let alone checked or made."""
    monkeypatch.chdir(tmp_path)
    checked = []
    monkeypatch.setattr(fleet_module, "parsed_entry", lambda *args: checked.append(args))
    entries = [["--config", "toy.toml", "--out", f"r{k}"] for k in range(MAX_ENTRIES + 1)]
    code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and err.count("\n") == 1 and f"{MAX_ENTRIES + 1:,} entries, over the {MAX_ENTRIES:,}" in err
    assert checked == [] and sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
