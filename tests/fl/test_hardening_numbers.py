"""Numbers that meant nothing, reported or saved as results (issue 69, classes 5 and 8), through fl.run, fl.sweep and
the ledger's check: a run whose model became NaN reported no accuracy (alone and in a sweep's table; the ledger keeps
the summaries written before as they were); a plug-in that makes every model NaN whatever the step size is named
and refused; data that cannot give a result (constant images, one class, a handful of test images, a fake CIFAR-10
of empty files) is refused before training; clients without a held-out sample are listed, and none at all refused;
``--tensorboard ''`` and another run's curves folder are refused; a plug-in failing inside a worker process is one
line naming it."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from fl.run import main
from fl.sweep import aggregate
from lab.records.check import disagreements
from tests.fl.conftest import plugin_folder
from tests.fl.test_run import base_args


def rows_of(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_diverged_run_reports_no_accuracy_of_its_nan_model(cifar_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", "train.lr=1e6", "--set", "train.rounds=6")) == 0
    rows, summary = rows_of(out), json.loads((out / "summary.json").read_text())
    assert rows[-1]["diverged"] and rows[-1]["test_accuracy"] is not None  # measured of a NaN model, kept as such
    assert summary["diverged_at_round"] == rows[-1]["round"]
    assert summary["final_test_accuracy"] is None and summary["rounds_to_target"] is None
    printed = capsys.readouterr().out
    assert "diverged at round" in printed and "no final test accuracy" in printed
    assert "final test accuracy 0" not in printed
    assert not disagreements(rows, summary)  # the ledger's check draws the same from the rows
    table = aggregate("base", [summary, summary | {"final_test_accuracy": 0.5, "diverged_at_round": None}])
    assert table["final_test_accuracy"] == 0.5 and table["diverged"] == 1  # the diverged seed adds no accuracy


def test_the_check_keeps_a_diverged_summary_as_it_was_written_before():
    """The ledger's diverged runs were summarised with the NaN model's accuracy as final: still whole to the check,
    and a summary that agrees with neither way is still flagged."""
    rows = [{"round": 1, "test_accuracy": 0.4, "communication": 1}, {"round": 2, "test_accuracy": 0.1, "diverged": True,
            "communication": 2}]  # fmt: skip
    now = {"rounds": 2, "diverged_at_round": 2, "final_test_accuracy": None, "best_test_accuracy": 0.4}
    before = now | {"final_test_accuracy": 0.1}
    assert not disagreements(rows, now) and not disagreements(rows, before)
    assert [key for key, *_ in disagreements(rows, now | {"final_test_accuracy": 0.3})] == ["final_test_accuracy"]


NAN_CODE = """
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from fl.algorithms import Algorithm
from fl.models import SplitModel


@dataclass(frozen=True)
class Nanny(Algorithm):
    name: ClassVar[str] = "nanny"

    def correction(self, w, ctx):
        return torch.full_like(w, float("nan"))


@dataclass(frozen=True)
class Raiser(Algorithm):
    name: ClassVar[str] = "raiser"

    def correction(self, w, ctx):
        raise ValueError("no correction today")


class NanModel(SplitModel):
    def __init__(self, in_shape, n_classes):
        super().__init__(in_shape, n_classes)
        self.feature_dim = 8
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(self.in_shape)), 8))
        self.head = nn.Linear(8, n_classes)

    def forward(self, x):
        return super().forward(x) * float("nan")
"""


@pytest.mark.parametrize(
    "setting, said",
    [
        ("algorithm.name='nanplug:Nanny'", "the plug-in nanplug:Nanny (algorithm.name) gives a non-finite correction"),
        ("model.name='nanplug:NanModel'", "the plug-in nanplug:NanModel (model.name) gives non-finite outputs"),
    ],
)
def test_a_plugin_that_makes_every_model_nan_is_named_and_refused(cifar_root, tmp_path, monkeypatch, capsys,
                                                                    setting, said):  # fmt: skip
    plugin_folder(tmp_path, monkeypatch, {"nanplug": NAN_CODE})
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", setting, "--set", "train.lr=1e-9", "--set", "train.workers=1")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-finite whatever train.lr" in err and said in err
    assert not (out / "summary.json").exists()


def test_a_plugin_failing_in_a_worker_process_is_one_line_naming_it(cifar_root, tmp_path, monkeypatch, capsys):
    plugin_folder(tmp_path, monkeypatch, {"nanplug": NAN_CODE})
    args = base_args(cifar_root, tmp_path / "run", "--set", "algorithm.name='nanplug:Raiser'", "--set",
                     "train.workers=2")  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("python -m fl.run: error: plug-in nanplug:Raiser failed in correction (nanplug.py:")
    assert err.endswith("ValueError: no correction today\n")


def npz_args(path, out, *extra: str) -> list[str]:
    settings = [f"data.dataset='npz:{path}'", "data.clients=2", "data.min_size=1", "model.name='mlp'",
                "train.rounds=1", "train.workers=1", *extra]  # fmt: skip
    return [*(a for s in settings for a in ("--set", s)), "--out", str(out), "--quiet"]


def arrays(n: int = 120) -> dict:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, n)
    x = rng.integers(0, 255, (n, 1, 8, 8)).astype(np.uint8)
    return {"x_train": x, "y_train": y, "x_test": x[:30], "y_test": y[:30]}


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda a: a | {"x_train": np.full_like(a["x_train"], 7)}, "channel 0 of every training image is 7"),
        (lambda a: a | {"y_train": np.zeros_like(a["y_train"]), "y_test": np.zeros_like(a["y_test"])},
         "every training label is 0 (one class"),
        (lambda a: a | {"x_test": a["x_test"][:1], "y_test": a["y_test"][:1]}, "1 test image(s), fewer than the 5"),
    ],
)  # fmt: skip
def test_data_that_cannot_give_a_result_is_refused_before_training(tmp_path, capsys, change, said):
    path = tmp_path / "d.npz"
    np.savez(path, **change(arrays()))
    out = tmp_path / "run"
    assert main(npz_args(path, out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err
    assert not (out / "metrics.jsonl").exists()


def test_a_fake_cifar10_of_empty_files_is_not_found(tmp_path, monkeypatch, capsys):
    import fl.data.datasets as datasets
    from fl.data.__main__ import main as data_main

    monkeypatch.setattr(datasets, "CACHE_ROOT", tmp_path / "no-cache")
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", tmp_path / "no-system")
    monkeypatch.delenv("SHUFFLEFL_DATA", raising=False)
    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with (folder / name).open("wb") as handle:
            pickle.dump({b"data": np.zeros((0, 3072), np.uint8), b"labels": []}, handle, protocol=4)
    assert data_main(["list", "--data-root", str(tmp_path / "data")]) == 0
    listed = next(line for line in capsys.readouterr().out.splitlines() if "CIFAR-10:" in line)
    assert "not found" in listed and "no training images" in listed
    args = base_args(tmp_path / "data", tmp_path / "run")
    assert main(args) == 2
    assert "CIFAR-10 not found" in capsys.readouterr().err


def test_clients_without_a_held_out_sample_are_listed_and_none_at_all_refused(cifar_root, tmp_path, capsys):
    out = tmp_path / "run"
    extra = ("--set", "data.clients=20", "--set", "data.partition='dirichlet'", "--set", "data.alpha=0.3",
             "--set", "data.min_size=1", "--set", "train.client_eval_every=2", "--set", "train.rounds=2",
             "--set", "train.workers=1")  # fmt: skip
    assert main(base_args(cifar_root, out, *extra)) == 0
    err = capsys.readouterr().err
    assert "clients have no held-out sample" in err
    table = (out / "clients.csv").read_text().splitlines()[1:]
    assert sorted(int(line.split(",")[1]) for line in table) == list(range(20))  # every client, none vanished
    unevaluated = [int(line.split(",")[1]) for line in table if line.endswith(",0,,")]
    summary = json.loads((out / "summary.json").read_text())
    assert unevaluated and summary["clients_unevaluated"] == unevaluated
    assert summary["worst_client"]["client"] not in unevaluated and summary["worst_client"]["samples"] > 0

    many = base_args(cifar_root, tmp_path / "many", "--set", "data.clients=200", "--set", "data.min_size=1",
                     "--set", "train.client_eval_every=1", "--set", "train.workers=1")  # fmt: skip
    assert main(many) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none of the 200 clients has a held-out sample" in err


def test_an_empty_tensorboard_folder_and_another_runs_curves_are_refused(cifar_root, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    with pytest.raises(SystemExit) as refused:
        main(base_args(cifar_root, tmp_path / "r", "--tensorboard", ""))
    assert refused.value.code == 2 and "an empty name is the working directory" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    curves = tmp_path / "tb"
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(base_args(cifar_root, first, "--set", "train.rounds=2", "--tensorboard", str(curves))) == 0
    before = sorted(p.name for p in curves.iterdir())
    assert main(base_args(cifar_root, second, "--set", "train.rounds=2")) == 0
    capsys.readouterr()
    assert main(["--resume", str(second), "--quiet", "--tensorboard", str(curves)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds the curves of another run" in err and str(first) in err
    assert sorted(p.name for p in curves.iterdir()) == before  # nothing of the second run joined them
    assert main(["--resume", str(first), "--quiet", "--tensorboard", str(curves)]) == 0  # its own: fine
