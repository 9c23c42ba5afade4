"""Issue 69 (hardening V), the second sweep's findings: a generator's cache folder that is a link is refused (B1); a
sweep's per-run curves folder is made only where no link is (B2, :func:`fl.sinks.curves_path`); a resume's curves
go only where the run wrote them (B3, :func:`fl.sinks.resumed_curves`; its call in fl.run is tested in
tests/test_hardening_v_run_calls.py); a run store or output root its user linked to a bigger disk works, and
nothing outside it is touched (B10); nothing is imported from a data folder that is the working directory (P5);
figures' damaged simulator summary is one line (catalogue). L3 (replace_durably's temporaries) is in
tests/fl/test_durability.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fl.synthesis.fedssyn as fedssyn
from figures.__main__ import main as figures_main
from fl.run import main as run_main
from fl.sinks import OWNER, RUN_TAG, curves_path, holds_curves_of, resumed_curves
from fl.sweep import main as sweep_main
from tests.fl.synthesis.conftest import MeanImage, make_tiny_dataset
from tests.test_links import one_line, run_args, sweep_args
from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "results" / "ledger"
OURS = "a user's own file, not the tool's\n"


def users_folder(tmp_path: Path, name: str = "users") -> Path:
    """A folder of a user's, holding one file of theirs."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "notes.txt").write_text(OURS)
    return folder


def untouched(folder: Path) -> bool:
    return [p.name for p in folder.iterdir()] == ["notes.txt"] and (folder / "notes.txt").read_text() == OURS


# B1: a generator's cache folder replaced by a link


def test_a_linked_generator_cache_folder_is_refused_and_nothing_is_written_through_it(tmp_path):
    key = fedssyn.client_key("cifar10", np.arange(5), fedssyn.FedssynConfig(), 0, 0)
    cache = tmp_path / "cache"
    cache.mkdir()
    users = users_folder(tmp_path)
    folder = cache / f"client0-{fedssyn.cache_key(key)}"
    folder.symlink_to(users, target_is_directory=True)
    with pytest.raises(InputError) as error:
        with fedssyn.client_cache("cifar10", np.arange(5), fedssyn.FedssynConfig(), 0, 0, cache):
            pass
    assert str(folder) in str(error.value) and "symbolic link" in str(error.value) and "\n" not in str(error.value)
    assert untouched(users)
    folder.unlink()
    folder.symlink_to(tmp_path / "nowhere", target_is_directory=True)  # dangling: refused too, nothing made
    with pytest.raises(InputError):
        fedssyn.client_folder(cache, key)
    assert not (tmp_path / "nowhere").exists()


def test_a_generator_cache_root_its_user_linked_is_used(tmp_path):
    """method.cache_dir (a store's _synthetic) may be a link its user made, to a bigger disk (B10)."""
    disk = users_folder(tmp_path, "disk")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "_synthetic").symlink_to(disk, target_is_directory=True)
    cache = tmp_path / "store" / "_synthetic"
    with fedssyn.client_cache("cifar10", np.arange(5), fedssyn.FedssynConfig(), 0, 3, cache) as folder:
        assert folder.parent == cache and folder.name.startswith("client3-")
    assert (disk / folder.name / fedssyn.KEY_FILE).is_file() and (disk / "notes.txt").read_text() == OURS


def fedssyn_run(tmp_path: Path, monkeypatch, cache: Path) -> list[str]:
    """tests/test_links.py's tiny Fedssyn run (a stand-in generator), its generators cached in ``cache``."""
    import fl.experiment as experiment_module

    monkeypatch.setattr(fedssyn, "build_generator", lambda name, shape, n, overrides, device="cpu": MeanImage(shape, n))
    data = make_tiny_dataset(n_per_class=20, n_classes=10)
    monkeypatch.setattr(experiment_module, "load", lambda name, root=None: data)
    return [
        "--set", "data.partition='split-by-class'", "--set", "data.clients=10", "--set", "model.name='mlp'",
        "--set", "train.rounds=2", "--set", "train.device='cpu'", "--set", "train.workers=1",
        "--set", "method.name='fedssyn'", "--set", "method.n_tilde=6", "--set", "method.epochs=1",
        "--set", f"method.cache_dir='{cache}'", "--out", str(tmp_path / "run"), "--quiet",
    ]  # fmt: skip


def test_a_run_store_whose_generator_folder_became_a_link_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """The figures store's ``_synthetic/client{i}-...`` (figures.flruns gives fl.run ``method.cache_dir =
    STORE/_synthetic``; fl.synthesis.fedssyn.client_folder names the folders in it)."""
    cache = tmp_path / "store" / "_synthetic"
    argv = fedssyn_run(tmp_path, monkeypatch, cache)
    assert run_main(argv) == 0
    folder = sorted(cache.glob("client0-*"))[0]
    shutil.rmtree(folder)
    users = users_folder(tmp_path)
    folder.symlink_to(users, target_is_directory=True)
    capsys.readouterr()
    assert run_main([*argv, "--overwrite"]) == 2
    one_line(capsys.readouterr().err, str(folder), "symbolic link")
    assert untouched(users)


# B2: the curves folders a sweep makes in --tensorboard DIR


def test_curves_path_refuses_a_link_below_the_users_folder_and_takes_a_linked_root(tmp_path):
    disk = users_folder(tmp_path, "disk")
    root = tmp_path / "tb"
    root.symlink_to(disk, target_is_directory=True)  # DIR itself: the user's, may be a link
    assert curves_path(root, "base", "seed0") == root / "base" / "seed0"
    users = users_folder(tmp_path)
    (disk / "arm").symlink_to(users, target_is_directory=True)  # DIR/<run>: the package's
    with pytest.raises(InputError, match="symbolic link") as error:
        curves_path(root, "arm", "seed0")
    assert str(root / "arm") in str(error.value)
    (disk / "base").mkdir()
    (disk / "base" / "seed1").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        curves_path(root, "base", "seed1")
    assert untouched(users) and not (tmp_path / "nowhere").exists()


# B3: where a resume's curves go


@pytest.fixture
def started(tmp_path) -> Path:
    """A run folder that wrote a round."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"round": 1}\n')
    return out


def test_a_resume_refuses_curves_sent_where_the_run_never_wrote(started, tmp_path):
    users = users_folder(tmp_path)
    for kind in ("tensorboard", "mlflow"):
        with pytest.raises(InputError) as error:
            resumed_curves(started, {kind: str(users)})
        said = str(error.value)
        assert "\n" not in said and f"log.{kind}" in said and str(users) in said and f"--{kind}" in said
    with pytest.raises(InputError):  # a folder that is not there: made anew, refused just the same
        resumed_curves(started, {"tensorboard": str(tmp_path / "new")})
    assert untouched(users)


def test_a_resume_sends_curves_where_the_run_wrote_them_or_where_the_command_line_says(started, tmp_path):
    owner = str(started.resolve())
    curves, store, users = tmp_path / "tb", tmp_path / "mlruns", users_folder(tmp_path)
    curves.mkdir()
    (curves / OWNER).write_text(owner + "\n")
    tags = store / "1" / "abc" / "tags"
    tags.mkdir(parents=True)
    (tags / RUN_TAG).write_text(owner)
    resumed_curves(started, {"tensorboard": str(curves), "mlflow": str(store)})  # its own: on
    assert holds_curves_of("tensorboard", curves, owner) and holds_curves_of("mlflow", store, owner)
    assert not holds_curves_of("tensorboard", curves, "/another/run")
    resumed_curves(started, {"tensorboard": str(users)}, tensorboard=users)  # the user's choice, on the command line
    resumed_curves(started, {"mlflow": str(users)}, mlflow=tmp_path / "elsewhere")  # the command line's goes instead
    resumed_curves(started, {"tensorboard": None, "mlflow": ""})
    resumed_curves(started, "not a table")  # the config's own check refuses it
    fresh = tmp_path / "fresh"  # a folder a sweep prepared, no round written: its first start
    fresh.mkdir()
    resumed_curves(fresh, {"tensorboard": str(users)})


def test_a_mark_that_is_a_link_holds_no_run(started, tmp_path):
    mark = tmp_path / "mark.txt"
    mark.write_text(str(started.resolve()))
    curves = tmp_path / "tb"
    curves.mkdir()
    (curves / OWNER).symlink_to(mark)
    with pytest.raises(InputError):
        resumed_curves(started, {"tensorboard": str(curves)})


# B10: a results root (or results/runs, results/sweeps) its user linked to a bigger disk


def test_a_linked_results_root_takes_runs_and_sweeps_and_nothing_outside_is_touched(cifar_root, tmp_path, capsys):
    disk = users_folder(tmp_path, "disk")
    project = tmp_path / "project"
    project.mkdir()
    (project / "results").symlink_to(disk, target_is_directory=True)  # the whole results/
    (disk / "sweeps").mkdir()
    (disk / "sweeps" / "notes.txt").write_text(OURS)
    bigger = users_folder(tmp_path, "bigger")
    (disk / "runs").symlink_to(bigger, target_is_directory=True)  # and results/runs to another disk again
    out = project / "results" / "runs" / "r1"
    assert run_main(run_args(cifar_root, out)) == 0
    assert (bigger / "r1" / "summary.json").is_file() and (bigger / "notes.txt").read_text() == OURS
    (bigger / "r1" / "NOTES.md").write_text(OURS)
    assert run_main(run_args(cifar_root, out, "--overwrite")) == 0  # only the run's own files go
    assert (bigger / "r1" / "NOTES.md").read_text() == OURS
    sweep = project / "results" / "sweeps" / "s"
    assert sweep_main(sweep_args(cifar_root, sweep)) == 0
    assert (disk / "sweeps" / "s" / "sweep.json").is_file() and (disk / "sweeps" / "notes.txt").read_text() == OURS
    assert sorted(p.name for p in disk.iterdir()) == ["notes.txt", "runs", "sweeps"]
    assert sorted(p.name for p in bigger.iterdir()) == ["notes.txt", "r1"]
    # a link planted inside a folder the package wrote is still refused: the run folder itself
    users = users_folder(tmp_path)
    (bigger / "r2").symlink_to(users, target_is_directory=True)
    capsys.readouterr()
    assert run_main(run_args(cifar_root, project / "results" / "runs" / "r2")) == 2
    one_line(capsys.readouterr().err, "symbolic link")
    assert untouched(users)


# P5: python -m fl.run in a run folder imports nothing from it


SHADOW = "import pathlib\npathlib.Path({marker!r}).joinpath(__name__).write_text('imported')\nraise ImportError('x')\n"


def shadowed_folder(tmp_path: Path, marked: bool) -> tuple[Path, Path]:
    """A folder holding a PIL.py, numpy.py and torch.py that each leave a file in the marker folder when imported
    (a run folder where ``marked``: its provenance.json); its config.json is no config, so fl.run stops at once."""
    folder, markers = tmp_path / ("run" if marked else "plain"), tmp_path / ("markers" if marked else "plain-markers")
    folder.mkdir()
    markers.mkdir()
    for name in ("PIL", "numpy", "torch"):
        (folder / f"{name}.py").write_text(SHADOW.format(marker=str(markers)))
    (folder / "config.json").write_text("[]")
    if marked:
        (folder / "provenance.json").write_text("{}")
    return folder, markers


def python_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def test_python_m_fl_run_in_a_run_folder_imports_nothing_from_it(tmp_path):
    folder, markers = shadowed_folder(tmp_path, marked=True)
    done = python_in(folder, "-m", "fl.run", "--resume", ".")
    assert sorted(p.name for p in markers.iterdir()) == [], done.stderr[-2000:]
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    done = python_in(folder, "-c", "import fl, sys; import PIL; print(sys.path[0])")  # -c: '' first on the path
    assert sorted(p.name for p in markers.iterdir()) == [], done.stderr[-2000:]


def test_a_folder_of_the_users_still_lends_its_modules(tmp_path):
    """The same folder, not a run's: the working directory stays on the path (a user's own plug-in lives there), so
    the test above sees what it checks."""
    folder, markers = shadowed_folder(tmp_path, marked=False)
    python_in(folder, "-m", "fl.run", "--resume", ".")
    assert "numpy" in [p.name for p in markers.iterdir()]  # the user's own modules are found there


# figures: a damaged simulator summary


@pytest.fixture
def ledger(tmp_path):
    """A run ledger (read only: its summaries are read, no simulator runs) holding the repository's fig2 and figB2
    cpu summaries, to damage."""
    sources = {name: LEDGER / "sims" / name / "cpu" / "summary.json" for name in ("fig2", "figB2")}
    if not all(p.is_file() for p in sources.values()):
        pytest.skip("no simulator summaries in the repository's ledger")
    store = tmp_path / "L"
    for name, source in sources.items():
        (store / "sims" / name / "cpu").mkdir(parents=True)
        shutil.copy(source, store / "sims" / name / "cpu" / "summary.json")
    (store / ".ledger").touch()
    return store


def damage(path: Path, change) -> None:
    summary = json.loads(path.read_text())
    change(summary)
    path.write_text(json.dumps(summary))


@pytest.mark.parametrize(
    ("artefact", "change", "said"),
    [
        ("fig2", lambda s: s.pop("A_ratio"), "'A_ratio'"),
        ("fig2", lambda s: s.update(p="0.1, 0.2"), "'p'"),
        ("fig2", lambda s: s.update(theory_ratio=s["theory_ratio"][:-1]), "'theory_ratio'"),
        ("fig2", lambda s: s["config"].pop("etas"), "config.etas"),
        ("fig2", lambda s: s.update(verdict=[]), "'verdict'"),
        ("lemma1", lambda s: s.update(zeta2_star=["x"]), "'zeta2_star'"),
        ("figB2", lambda s: s["rows"][0].pop("final_loss"), "'rows'"),
        ("figB2", lambda s: s.update(claims=[]), "'claims'"),
        ("figB2", lambda s: s["claims"].update(iid_E1_loss_spread="x"), "ValueError"),  # a claim: the backstop
        ("figB2", lambda s: s["config"].update(epochs="1, 5"), "config.epochs"),
    ],
)
def test_a_damaged_simulator_summary_is_one_line_naming_it(ledger, tmp_path, capsys, artefact, change, said):
    path = ledger / "sims" / ("figB2" if artefact == "figB2" else "fig2") / "cpu" / "summary.json"
    damage(path, change)
    capsys.readouterr()
    assert figures_main([artefact, "--scale", "cpu", "--runs", str(ledger), "--root", str(tmp_path / "out")]) == 2
    one_line(capsys.readouterr().err, str(path), "damaged simulator summary", said)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", ""])
def test_a_summary_that_is_no_json_object_is_one_line(ledger, tmp_path, capsys, text):
    path = ledger / "sims" / "fig2" / "cpu" / "summary.json"
    path.write_text(text)
    capsys.readouterr()
    assert figures_main(["fig2", "--scale", "cpu", "--runs", str(ledger), "--root", str(tmp_path / "out")]) == 2
    one_line(capsys.readouterr().err, str(path))


def test_a_damaged_summary_of_a_simulator_run_under_the_root_is_one_line(tmp_path, capsys):
    """Not a ledger: the summary a simulator left under --root (it runs again only where there is none)."""
    root = tmp_path / "out"
    path = root / "fig2" / "quick" / "run" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"p": [0.1]}')
    capsys.readouterr()
    assert figures_main(["fig2", "--scale", "quick", "--root", str(root), "--runs", str(root)]) == 2
    one_line(capsys.readouterr().err, str(path), "'A_ratio'")
