"""Issue 69 (hardening V), what needs a call in fl.run or fl.sweep (their functions are in fl.sinks and
theory.output, tested in tests/test_hardening_v_sweep2.py and tests/fl/test_durability.py): a resume's curves go
only where the run wrote them (B3: fl.launch's ``locked_config`` calls :func:`fl.sinks.resumed_curves`); a sweep makes
its per-run curves folders only where no link is (B2: fl.sweep's ``prepared`` names them by
:func:`fl.sinks.curves_path`); ``--overwrite`` takes a write's temporary (``NAME.<16 hex>.tmp``,
:func:`theory.output.temporary_beside`) for the run's own (L3: fl.runfolder's ``RUN_FILE``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl.run import main as run_main
from fl.runfolder import RUN_FILE
from fl.sweep import main as sweep_main
from tests.fl.conftest import interrupt_at
from tests.fl.test_run import base_args
from tests.test_hardening_v_sweep2 import OURS, untouched, users_folder
from tests.test_links import one_line, sweep_args


@pytest.fixture
def interrupted(cifar_root, tmp_path, monkeypatch) -> Path:
    """A run that wrote its TensorBoard curves into tmp_path/tb for rounds 1-2, then was stopped."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    resume = interrupt_at(monkeypatch, 3)
    assert run_main(base_args(cifar_root, out, "--tensorboard", str(tmp_path / "tb"))) == 2
    resume()
    return out


def edit_log(out: Path, **log: str) -> None:
    tree = json.loads((out / "config.json").read_text())
    tree.setdefault("log", {}).update(log)
    (out / "config.json").write_text(json.dumps(tree, indent=2))


@pytest.mark.parametrize("kind", ["tensorboard", "mlflow"])
def test_a_resume_refuses_curves_an_edited_config_sends_elsewhere(interrupted, tmp_path, capsys, kind):
    if kind == "mlflow":
        pytest.importorskip("mlflow")
    users = users_folder(tmp_path)
    edit_log(interrupted, **{kind: str(users)})
    capsys.readouterr()
    assert run_main(["--resume", str(interrupted), "--quiet"]) == 2
    one_line(capsys.readouterr().err, f"log.{kind}", str(users), f"--{kind}")
    assert untouched(users)
    edit_log(interrupted, **{kind: str(tmp_path / "new")})  # a folder not there: never made
    assert run_main(["--resume", str(interrupted), "--quiet"]) == 2
    assert not (tmp_path / "new").exists()


def test_a_resume_writes_curves_where_the_run_wrote_them_or_where_the_command_line_says(interrupted, tmp_path):
    assert run_main(["--resume", str(interrupted), "--quiet", "--set", "train.rounds=5"]) == 0  # unedited: on
    edit_log(interrupted, tensorboard=str(tmp_path / "chosen"))
    assert run_main(["--resume", str(interrupted), "--quiet", "--set", "train.rounds=6"]) == 2
    chosen = tmp_path / "chosen"
    argv = ["--resume", str(interrupted), "--quiet", "--set", "train.rounds=6", "--tensorboard", str(chosen)]
    assert run_main(argv) == 0  # the user's own choice, on the command line
    assert any(chosen.glob("events.out.tfevents.*"))


@pytest.mark.parametrize("linked", ["run", "seed"])
def test_a_sweeps_curves_folder_that_is_a_link_is_refused_before_anything_is_written(
    cifar_root, tmp_path, capsys, linked
):
    pytest.importorskip("tensorboard")
    tb, users = tmp_path / "tb", users_folder(tmp_path)
    where = tb / "train.lr=0.1" if linked == "run" else tb / "train.lr=0.1" / "seed0"
    where.parent.mkdir(parents=True)
    where.symlink_to(users, target_is_directory=True)
    out = tmp_path / "sweep"
    capsys.readouterr()
    assert sweep_main([*sweep_args(cifar_root, out), "--tensorboard", str(tb)]) == 2
    one_line(capsys.readouterr().err, str(where), "symbolic link")
    assert untouched(users)
    where.unlink()
    assert sweep_main([*sweep_args(cifar_root, out), "--tensorboard", str(tb)]) == 0
    where.rename(tmp_path / "moved")  # a reused run's curves folder (or the folder of its seeds), now a link
    where.symlink_to(users, target_is_directory=True)
    capsys.readouterr()
    assert sweep_main([*sweep_args(cifar_root, out), "--tensorboard", str(tb)]) == 2
    one_line(capsys.readouterr().err, "symbolic link")
    assert untouched(users)


def test_a_writes_temporary_is_one_of_the_runs_files():
    for name in ("checkpoint.pt.0123456789abcdef.tmp", "checkpoint_round4.pt.fedcba9876543210.tmp"):
        assert RUN_FILE.fullmatch(name), name
    for name in (
        "checkpoint.pt.mine.tmp",
        "notes.txt.0123456789abcdef.tmp",
        "checkpoint.pt.0123456789abcdef",
        "summary.json.tmp",
        "checkpoint.pt.tmp",
    ):  # a plain NAME.tmp: a user's (no write leaves one)
        assert not RUN_FILE.fullmatch(name), name


def test_overwrite_takes_the_earlier_runs_curves_and_nothing_else_of_the_folder(cifar_root, tmp_path):
    """L5: ``--overwrite`` removes the earlier run's TensorBoard event files and mark from the folder its [log] named
    (here inside the run folder, RUN/tb), so the new run's curves start alone; a user's file there stays."""
    pytest.importorskip("tensorboard")
    out, tb = tmp_path / "run", tmp_path / "run" / "tb"
    assert run_main(base_args(cifar_root, out, "--tensorboard", str(tb))) == 0
    earlier = sorted(p.name for p in tb.glob("events.out.tfevents.*"))
    assert earlier
    (tb / "notes.txt").write_text(OURS)
    assert run_main(base_args(cifar_root, out, "--tensorboard", str(tb), "--overwrite")) == 0
    now = sorted(p.name for p in tb.glob("events.out.tfevents.*"))
    assert now and not set(now) & set(earlier)
    assert (tb / "notes.txt").read_text() == OURS


def test_overwrite_leaves_curves_of_another_run(cifar_root, tmp_path):
    """Curves the earlier run's [log] names but whose mark names another run are not its to remove."""
    pytest.importorskip("tensorboard")
    out, tb = tmp_path / "run", tmp_path / "tb"
    assert run_main(base_args(cifar_root, out, "--tensorboard", str(tb))) == 0
    (tb / ".shufflefl-curves").write_text(str(tmp_path / "another") + "\n")
    events = sorted(p.name for p in tb.glob("events.out.tfevents.*"))
    run_main(base_args(cifar_root, out, "--overwrite"))
    assert sorted(p.name for p in tb.glob("events.out.tfevents.*")) == events


def test_a_resume_refuses_a_curves_folder_in_the_run_folder_that_became_a_link(cifar_root, tmp_path, monkeypatch):
    """Case 19 of the third sweep: the run's curves folder RUN/tb (its config's [log]) swapped for a link to a
    user's folder, its mark copied along: the resume refuses it, nothing written there."""
    pytest.importorskip("tensorboard")
    out, tb = tmp_path / "run", tmp_path / "run" / "tb"
    resume = interrupt_at(monkeypatch, 3)
    assert run_main(base_args(cifar_root, out, "--tensorboard", str(tb))) == 2
    resume()
    users = users_folder(tmp_path)
    (users / ".shufflefl-curves").write_text((tb / ".shufflefl-curves").read_text())
    for events in tb.iterdir():
        events.unlink()
    tb.rmdir()
    tb.symlink_to(users)
    before = sorted(p.name for p in users.iterdir())
    assert run_main(["--resume", str(out), "--quiet"]) == 2
    assert sorted(p.name for p in users.iterdir()) == before


def test_a_first_start_refuses_a_curves_folder_in_the_run_folder_that_is_a_link(cifar_root, tmp_path, capsys):
    """Sweep 5 case 105: ``--out RUN --tensorboard RUN/tb`` where RUN/tb was planted as a link to a user's folder
    (RUN made by fl.run before): a first start refuses it as a resume does, nothing written there."""
    out, users = tmp_path / "run", users_folder(tmp_path)
    out.mkdir()
    (out / ".shufflefl-output").write_text("fl.run\n")
    (out / "tb").symlink_to(users)
    before = sorted(p.name for p in users.iterdir())
    capsys.readouterr()
    assert run_main(base_args(cifar_root, out, "--tensorboard", str(out / "tb"))) == 2
    one_line(capsys.readouterr().err, "a curves folder", "symbolic link")
    assert sorted(p.name for p in users.iterdir()) == before
