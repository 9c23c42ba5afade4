"""fl.train (fl/api.py): the same run as ``python -m fl.run``, bit for bit, its rows, summary and final model in
memory; a run folder only where ``out`` says (then exactly fl.run's, resumable by it); bad input one InputError."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fl
from fl.config import load_config
from fl.run import main
from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
TOY = {"dataset": "examples.toy_data:toy", "partition": "natural", "clients": 4}  # no download: examples/toy_data.py
SETS = {"model.name": "mlp", "train.rounds": 3, "train.workers": 1, "train.device": "cpu", "train.eval_every": 2}


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # the toy data set's plug-in, as from a checkout


def without_timings(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("seconds")}


def cli_run(out: Path) -> tuple[list[dict], dict, torch.Tensor]:
    sets = [f"data.{k}={json.dumps(v)}" for k, v in TOY.items()] + [f"{k}={json.dumps(v)}" for k, v in SETS.items()]
    assert main([arg for s in sets for arg in ("--set", s)] + ["--out", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    return rows, summary, torch.load(out / "checkpoint.pt", weights_only=True)["x"]


def same_numbers(result, rows: list[dict], summary: dict, x: torch.Tensor) -> None:
    assert [without_timings(r) for r in result.rows] == [without_timings(r) for r in rows]
    timed = ("seconds", "seconds_local", "seconds_method", "provenance_sha256")
    assert {k: v for k, v in result.summary.items() if k not in timed} == {
        k: v for k, v in summary.items() if k not in timed
    }
    assert torch.equal(torch.nn.utils.parameters_to_vector(result.model.parameters()).detach(), x)


def test_train_equals_a_cli_run_bit_for_bit_and_keeps_no_folder_unless_asked(tmp_path):
    rows, summary, x = cli_run(tmp_path / "cli")
    result = fl.train({"data": TOY}, overrides=SETS)
    assert result.out is None and len(result.rows) == 3 and result.final_accuracy == summary["final_test_accuracy"]
    same_numbers(result, rows, summary, x)
    assert result.config.train.rounds == 3 and result.config.data.clients == 4


def test_train_into_a_folder_writes_fl_runs_files_which_fl_run_resumes(tmp_path):
    rows, summary, x = cli_run(tmp_path / "cli")
    out = tmp_path / "api"
    result = fl.train({"data": TOY}, overrides=SETS, out=out)
    assert result.out == out and (out / "summary.json").is_file() and (out / "checkpoint.pt").is_file()
    same_numbers(result, rows, summary, x)
    assert (out / "metrics.jsonl").read_text().count("\n") == 3
    with pytest.raises(InputError, match="already holds a run"):
        fl.train({"data": TOY}, overrides=SETS, out=out)
    assert main(["--resume", str(out), "--quiet"]) == 0  # fl.run's own folder: it resumes it (nothing left to run)
    assert json.loads((out / "summary.json").read_text())["final_test_accuracy"] == result.final_accuracy


def test_a_toml_file_and_a_run_config_give_the_same_config(tmp_path):
    toml = tmp_path / "toy.toml"
    toml.write_text('[data]\ndataset = "examples.toy_data:toy"\npartition = "natural"\nclients = 4\n')
    from fl.api import resolve

    from_file = resolve(toml, SETS)
    assert resolve({"data": TOY}, SETS) == from_file == resolve(load_config(toml), SETS)


@pytest.mark.parametrize(
    "config, overrides, said",
    [
        ({"data": TOY}, {"train.roundz": 2}, "roundz"),
        ({"data": TOY}, {"rounds": 2}, "'rounds' is not 'section.key'"),
        ({"data": TOY}, ["train.rounds=2"], "expected a dict"),
        ({"data": "fmnist"}, None, "[data]: expected a table"),
        (42, None, "expected a TOML file, a dict or a RunConfig"),
        ("no/such.toml", None, "not found"),
        ({"data": TOY}, {"train.lr": object()}, "has no TOML form"),
    ],
)
def test_bad_input_is_one_input_error(config, overrides, said):
    with pytest.raises(InputError) as error:
        fl.train(config, overrides=overrides)
    assert said in str(error.value) and "\n" not in str(error.value)


def test_import_fl_stays_cheap():
    code = "import sys, fl; assert 'torch' not in sys.modules; assert callable(fl.train); assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
