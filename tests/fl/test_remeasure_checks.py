"""fl.remeasure applies fl.run --resume's checks before it measures (issue #69, sweep cases 13 and 14): data other
than those the run started on are refused (fl.provenance.check_data), and so is a plug-in edited since the run
(fl.plugins.expecting): nothing is measured, nothing is written."""

from __future__ import annotations

import sys

import numpy as np

from examples.toy_data import toy
from fl.remeasure import OUT, main
from fl.run import main as run_main


def toy_run(tmp_path, partition: str = "natural"):
    np.savez(tmp_path / "toy.npz", **toy())
    (tmp_path / "toy.toml").write_text(
        f'[data]\ndataset = "npz:{tmp_path / "toy.npz"}"\npartition = "{partition}"\nclients = 4\n'
        '[model]\nname = "mlp"\n[train]\nrounds = 2\nworkers = 1\ncheckpoint_every = 1\nkeep_round = 1\n'
    )
    out = tmp_path / "out"
    assert run_main(["--config", str(tmp_path / "toy.toml"), "--out", str(out), "--quiet"]) == 0
    return out


def test_other_data_are_refused_and_nothing_is_written(tmp_path, capsys):
    out = toy_run(tmp_path)
    np.savez(tmp_path / "toy.npz", **toy(seed=7))  # the data file replaced after the run
    assert main([str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "toy.npz" in err, err
    assert not (out / OUT).exists()


def test_an_edited_plugin_is_refused_before_it_runs_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = tmp_path / "mypart.py"
    plugin.write_text("import numpy as np\n\ndef split(labels, n_clients, rng):\n"
                      "    return np.array_split(np.argsort(labels, kind='stable'), n_clients)\n")  # fmt: skip
    out = toy_run(tmp_path, "mypart:split")
    sys.modules.pop("mypart", None)
    plugin.write_text("import pathlib\npathlib.Path('ran').write_text('1')\nimport numpy as np\n\n"
                      "def split(labels, n_clients, rng):\n"
                      "    return np.array_split(np.arange(len(labels)), n_clients)\n")  # fmt: skip
    assert main([str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "mypart" in err, err
    assert not (tmp_path / "ran").exists()
    assert not (out / OUT).exists()


def test_the_same_run_unchanged_is_measured(tmp_path):
    out = toy_run(tmp_path)
    assert main([str(out), "--quiet"]) == 0
    assert (out / OUT).read_text().strip()


def test_another_runs_checkpoint_linked_or_copied_is_refused(tmp_path, capsys):
    """Sweep 5 case 128: a round's checkpoint replaced by another seed's (a link, then a copy): never measured as
    this run's; the run's own checkpoints, those from before an extension to more rounds included, are."""
    out = toy_run(tmp_path)
    other = tmp_path / "other"
    argv = ["--config", str(tmp_path / "toy.toml"), "--out", str(other), "--set", "train.seed=5", "--quiet"]
    assert run_main(argv) == 0
    own = out / "checkpoint_round1.pt"
    kept = own.read_bytes()
    own.unlink()
    own.symlink_to(other / "checkpoint_round1.pt")
    assert main([str(out), "--quiet"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    own.unlink()
    own.write_bytes((other / "checkpoint_round1.pt").read_bytes())
    assert main([str(out), "--quiet"]) == 2
    assert "a checkpoint of another run" in capsys.readouterr().err
    assert not (out / OUT).exists()
    own.write_bytes(kept)
    assert run_main(["--resume", str(out), "--set", "train.rounds=3", "--quiet"]) == 0  # extended: older keys stay
    assert main([str(out), "--quiet"]) == 0
    assert len((out / OUT).read_text().splitlines()) >= 2
