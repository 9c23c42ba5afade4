"""``python -m fl.run --resume RUN --set train.rounds=N`` (issue 68, item 3): a finished or stopped run goes on to N
rounds and equals, bit for bit, a run of N rounds from the start (metrics rows, final model and client states,
summary numbers); its config.json then says N, its provenance records the change, and the ledger takes it. Any
other key, fewer rounds, a run whose last round was evaluated out of turn or whose model diverged is refused in
one line, its folder untouched."""

from __future__ import annotations

import json

import pytest
import torch

import fl.provenance
from fl.config import from_dict
from fl.run import main
from fl.runfolder import RUN_LOCK
from lab.records.ledger import altered
from tests.fl.conftest import interrupt_at
from tests.fl.test_run import base_args, same_run

TIMINGS = ("seconds", "seconds_local", "seconds_method", "provenance_sha256")


def numbers(out) -> dict:
    """A run's summary without its timings and provenance digest."""
    summary = json.loads((out / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k not in TIMINGS}


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != RUN_LOCK}


SCAFFOLD = ("--set", "algorithm.name='scaffold'", "--set", "train.participation=0.5", "--set", "train.estimate_every=2")


def test_a_two_round_run_extended_to_three_equals_a_three_round_run(cifar_root, tmp_path, capsys):
    straight, extended = tmp_path / "straight", tmp_path / "extended"
    assert main(base_args(cifar_root, straight, *SCAFFOLD, "--set", "train.rounds=3")) == 0
    assert main(base_args(cifar_root, extended, *SCAFFOLD, "--set", "train.rounds=2")) == 0
    assert json.loads((extended / "summary.json").read_text())["rounds"] == 2
    capsys.readouterr()
    assert main(["--resume", str(extended), "--set", "train.rounds=3", "--quiet"]) == 0
    assert "extended from 2 to 3 rounds" in capsys.readouterr().err
    same_run(straight, extended)  # metrics rows (timings aside), server model, client states
    assert numbers(straight) == numbers(extended)
    config = json.loads((extended / "config.json").read_text())
    assert config["train"]["rounds"] == 3
    assert from_dict(config).identity() == from_dict(json.loads((straight / "config.json").read_text())).identity()
    changes = json.loads((extended / "provenance.json").read_text())["changes"]
    assert {"round": 3, "train.rounds": [2, 3]} in changes
    assert altered(extended) is None  # the ledger takes it: config.json is the one provenance records
    assert (extended / "curve.png").stat().st_size > 0
    assert main(["--resume", str(extended), "--quiet"]) == 0  # a plain resume of the extended run: as it is
    same_run(straight, extended)


def test_a_stopped_run_extended_and_stopped_again_resumes_to_the_longer_run(cifar_root, tmp_path, monkeypatch):
    """A run stopped at round 3 of 4, extended to 6, stopped again at round 5, then resumed plainly: the
    6-round run's numbers."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert main(base_args(cifar_root, straight, "--set", "train.rounds=6")) == 0
    undo = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, broken)) == 2  # rounds 1-2 kept
    undo()
    undo = interrupt_at(monkeypatch, 5)
    assert main(["--resume", str(broken), "--set", "train.rounds=6", "--quiet"]) == 2
    undo()
    assert json.loads((broken / "config.json").read_text())["train"]["rounds"] == 6
    assert main(["--resume", str(broken), "--quiet"]) == 0
    same_run(straight, broken)
    assert numbers(straight) == numbers(broken)


def test_an_extension_cut_short_after_its_config_is_written_resumes_plainly(cifar_root, tmp_path, monkeypatch):
    """A checkpoint from before checkpoints kept their rounds, extended, the process stopped after config.json
    says the new rounds and before provenance.json records them: a plain --resume finishes the extension."""
    straight, extended = tmp_path / "straight", tmp_path / "extended"
    assert main(base_args(cifar_root, straight, "--set", "train.rounds=3")) == 0
    assert main(base_args(cifar_root, extended, "--set", "train.rounds=2")) == 0
    state = torch.load(extended / "checkpoint.pt", weights_only=True)
    del state["extra"]["config_rounds"]  # as an older checkpoint
    torch.save(state, extended / "checkpoint.pt")

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(fl.provenance, "write", cut)
        assert main(["--resume", str(extended), "--set", "train.rounds=3", "--quiet"]) == 130
    assert json.loads((extended / "config.json").read_text())["train"]["rounds"] == 3
    assert not (extended / "summary.json").exists()
    assert main(["--resume", str(extended), "--quiet"]) == 0
    same_run(straight, extended)
    assert altered(extended) is None


@pytest.mark.parametrize(
    ("run", "extend", "said"),
    [
        ((), ("--set", "train.lr=0.1"), "drop --config/--set"),
        ((), ("--set", "train.rounds=3", "--set", "train.seed=1"), "drop --config/--set"),
        ((), ("--set", "train.rounds=1"), "never shortened"),
        ((), ("--set", "train.rounds=2.5"), "train.rounds"),
        (("--set", "train.eval_every=3"), ("--set", "train.rounds=3"), "train.eval_every = 3 does not divide 2"),
    ],
)
def test_what_an_extension_refuses_is_one_line_and_touches_nothing(cifar_root, tmp_path, capsys, run, extend, said):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", "train.rounds=2", *run)) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert main(["--resume", str(out), *extend, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert snapshot(out) == before


def test_a_diverged_run_is_not_extended(cifar_root, tmp_path, capsys):
    """A run that diverged at its last round kept a checkpoint of a non-finite model: refused in one line."""
    out = tmp_path / "run"
    diverging = ("--set", "train.rounds=2", "--set", "train.lr=1e30", "--set", "train.checkpoint_every=1")
    assert main(base_args(cifar_root, out, *diverging)) == 0
    if json.loads((out / "summary.json").read_text())["diverged_at_round"] is None:
        pytest.skip("this step size did not make the tiny run diverge")
    before = snapshot(out)
    capsys.readouterr()
    assert main(["--resume", str(out), "--set", "train.rounds=4", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not finite" in err, err
    assert snapshot(out) == before


def test_a_run_killed_before_its_first_checkpoint_and_extended_starts_as_the_longer_run(
    cifar_root, tmp_path, monkeypatch
):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert main(base_args(cifar_root, straight, "--set", "train.rounds=3")) == 0
    undo = interrupt_at(monkeypatch, 2)
    assert main(base_args(cifar_root, killed, "--set", "train.rounds=2")) == 2
    undo()
    (killed / "checkpoint.pt").unlink()  # as a kill -9 before the first checkpoint leaves it
    assert main(["--resume", str(killed), "--set", "train.rounds=3", "--quiet"]) == 0
    same_run(straight, killed)
    assert json.loads((killed / "config.json").read_text())["train"]["rounds"] == 3
    assert altered(killed) is None
