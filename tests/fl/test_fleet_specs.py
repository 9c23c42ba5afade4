"""A fleet spec (``python -m fl.fleet SPEC.json``) read as fl.run reads its flags (issue 69, class 9): an empty entry
is refused, never the default config trained; ``--overwrite`` in an entry starts its finished run again; ``--resume``
with an ``--out`` elsewhere (or ``--overwrite``) is refused as fl.run refuses it; two entries of one run folder are
refused naming both, before anything is made; and once a fleet is stopped, a second and third Ctrl-C wait for every
run's checkpoint instead of leaving without it."""

from __future__ import annotations

import json
import os
import signal

import pytest

import fl.fleet as fleet_module
from fl.batched import FLEET
from fl.fleet import main as fleet_main
from fl.fleet import run_fleet
from fl.loop import Interrupted
from fl.run import main as run_main
from tests.fl.test_fleet import tiny
from theory.cli import signals_as_interrupts
from theory.errors import InputError


def sets(root, *extra: str) -> list[str]:
    settings = ("data.dataset='cifar10'", f"data.data_root='{root}'", "data.clients=2", "model.name='mlp'",
                "train.rounds=2", "train.batch_size=32", "train.device='cpu'", "train.workers=1", *extra)  # fmt: skip
    return [arg for s in settings for arg in ("--set", s)]


def fleet_of(tmp_path, entries: list[list[str]], capsys) -> tuple[int, str]:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(entries))
    capsys.readouterr()
    code = fleet_main([str(spec)])
    return code, capsys.readouterr().err


def test_an_empty_entry_is_refused_never_the_default_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = fleet_of(tmp_path, [[]], capsys)
    assert code == 2 and err.count("\n") == 1 and "entry 1: empty" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]  # no results/runs/default


def test_overwrite_in_an_entry_starts_its_finished_run_again(cifar_root, tmp_path, capsys):
    out = tmp_path / "done"
    assert run_main([*sets(cifar_root), "--out", str(out), "--quiet"]) == 0
    code, err = fleet_of(tmp_path, [[*sets(cifar_root, "train.rounds=3"), "--out", str(out), "--overwrite"]], capsys)
    assert code == 0, err
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    assert json.loads((out / "config.json").read_text())["train"]["rounds"] == 3


@pytest.mark.parametrize("finished", [False, True])
def test_resume_with_an_out_elsewhere_or_overwrite_is_refused_as_fl_run_refuses_it(
    cifar_root, tmp_path, capsys, finished
):
    run = tmp_path / "run"
    assert run_main([*sets(cifar_root), "--out", str(run), "--quiet"]) == 0
    if not finished:
        (run / "summary.json").unlink()
    for extra, said in ((["--out", str(tmp_path / "other")], "drop --out"), (["--overwrite"], "use one of them")):
        code, err = fleet_of(tmp_path, [["--resume", str(run), *extra]], capsys)
        assert code == 2 and err.count("\n") == 1 and "entry 1" in err and said in err, err
    assert not (tmp_path / "other").exists()


def test_two_entries_of_one_run_folder_are_refused_naming_both(cifar_root, tmp_path, capsys):
    out = tmp_path / "shared"
    other = [*sets(cifar_root), "--out", str(tmp_path / "own")]
    entries = [[*sets(cifar_root), "--out", str(out)], other, [*sets(cifar_root, "train.seed=1"), "--out", str(out)]]
    code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and err.count("\n") == 1 and "entries 1 and 3 both write the run folder" in err, err
    assert str(os.getpid()) not in err and not out.exists() and not (tmp_path / "own").exists()


def test_a_second_and_third_signal_wait_for_the_runs_checkpoints(cifar_root, tmp_path, monkeypatch, capfd):
    """Each run stands in for fl.run: it arrives at the fleet's rendezvous every round; the first run's first round
    sends the first Ctrl-C; once stopped, each run sends two more and only then saves its checkpoint. Every run's
    checkpoint is saved, and the fleet ends in its one line (not a KeyboardInterrupt before the runs have saved)."""

    class Bare:
        def __init__(self, config):
            self.data, self.flat = None, type("Flat", (), {"model": None})()

    saved = []

    def execute(config, out, resume, quiet, start_from, exp, accept):
        seat = FLEET.get()
        first = (lambda: os.kill(os.getpid(), signal.SIGINT)) if seat.k == 0 else (lambda: None)
        try:
            seat.work(first)  # round 1, computed once every run has arrived: the first Ctrl-C
            while True:
                seat.work(lambda: None)  # a round's training, with the others'
        except KeyboardInterrupt:  # the fleet's stop, at this run's next round
            for _ in range(2):
                os.kill(os.getpid(), signal.SIGINT)
            out.mkdir()
            (out / "checkpoint.pt").write_text("saved")  # what fl.run saves on its way out
            saved.append(out)
            raise Interrupted(f"interrupted; continue with --resume {out}") from None

    monkeypatch.setattr(fleet_module, "Experiment", Bare)
    monkeypatch.setattr(fleet_module.SharedTensors, "share_data", lambda self, data: None)
    monkeypatch.setattr(fleet_module, "has_dropout", lambda model: False)
    monkeypatch.setattr(fleet_module, "execute", execute)
    runs = [(tiny(cifar_root, seed), tmp_path / f"run{seed}", False) for seed in range(3)]
    with signals_as_interrupts(), pytest.raises(InputError, match="fleet interrupted; 3 run"):
        run_fleet(runs)
    assert sorted(saved) == [out for _, out, _ in runs]
    assert all((out / "checkpoint.pt").read_text() == "saved" for _, out, _ in runs)
    assert capfd.readouterr().err.count("stopping: every run saves its checkpoint") == 1


def test_a_bad_later_entry_refuses_the_spec_before_an_earlier_overwrite_removes_a_run(cifar_root, tmp_path, capsys):
    """Fourth sweep, case 97: every entry is checked (flags and config) before any entry's folder changes."""
    out = tmp_path / "a"
    assert run_main([*sets(cifar_root), "--out", str(out), "--quiet"]) == 0
    before = sorted(p.name for p in out.iterdir())
    entries = [[*sets(cifar_root), "--out", str(out), "--overwrite"],
               [*sets(cifar_root, "train.nokey=1"), "--out", str(tmp_path / "b")]]  # fmt: skip
    code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and "entry 2" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in out.iterdir()) == before and not (tmp_path / "b").exists()


@pytest.mark.parametrize("entry", [["--help"], ["-h"], ["--print-config", "--out", "x"]])
def test_an_entry_that_runs_nothing_is_refused_in_one_line(tmp_path, capsys, entry):
    """Fourth sweep, cases 65-66: --help or --print-config in an entry is refused, naming it; nothing runs."""
    code, err = fleet_of(tmp_path, [entry], capsys)
    assert code == 2 and "entry 1" in err and "runs nothing" in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("finished", [True, False])
def test_an_entry_whose_folder_holds_a_run_of_another_config_is_refused(cifar_root, tmp_path, capsys, finished):
    """Fourth sweep, case 47: an entry's --out holding a finished (or started: no summary.json) run of another
    config is refused in one line naming the entry, as fl.run and fl.sweep refuse it, before any entry trains;
    never taken for the entry's finished run, nor continued with the folder's own config."""
    out = tmp_path / "r"
    assert run_main([*sets(cifar_root), "--out", str(out), "--quiet"]) == 0
    if not finished:
        (out / "summary.json").unlink()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    new = [*sets(cifar_root), "--out", str(tmp_path / "new")]
    entries = [new, [*sets(cifar_root, "train.lr=0.3"), "--out", str(out)]]
    code, err = fleet_of(tmp_path, entries, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "entry 2" in err and "holds a run of another config (differing in train.lr)" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not (tmp_path / "new").exists()  # refused before any entry's folder is made


def test_an_entry_asking_more_rounds_of_a_finished_run_is_told_how_to_extend_it(cifar_root, tmp_path, capsys):
    out = tmp_path / "r"
    assert run_main([*sets(cifar_root), "--out", str(out), "--quiet"]) == 0
    code, err = fleet_of(tmp_path, [[*sets(cifar_root, "train.rounds=3"), "--out", str(out)]], capsys)
    assert code == 2 and err.count("\n") == 1 and "(differing in train.rounds)" in err, err
    assert f"--resume {out} --set train.rounds=N" in err, err


def test_an_entry_whose_folder_holds_its_own_finished_run_is_still_left_as_it_is(cifar_root, tmp_path, capsys):
    """The same config (another train.device included: a resume may change it): left as it is, as before."""
    out = tmp_path / "r"
    assert run_main([*sets(cifar_root), "--out", str(out), "--quiet"]) == 0
    before = (out / "metrics.jsonl").read_bytes()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([[*sets(cifar_root, "train.device='auto'"), "--out", str(out)]]))
    capsys.readouterr()
    assert fleet_main([str(spec)]) == 0
    assert "finished" in capsys.readouterr().out
    assert (out / "metrics.jsonl").read_bytes() == before
