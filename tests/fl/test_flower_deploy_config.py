"""The deployed ServerApp's run config (fl.flower.deploy.open_run) is checked before anything is written, with
fl.run's rules: a folder holding a run is refused unless resume (its own config) or overwrite is set."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr")

from fl.flower.deploy import open_run
from theory.errors import InputError


def test_a_new_run_gets_its_folder(tmp_path):
    config, out, resume = open_run({"config": "", "set": "train.rounds=1;train.seed=3", "out": str(tmp_path / "r")})
    assert (config.train.rounds, config.train.seed, out, resume) == (1, 3, tmp_path / "r", False)
    assert out.is_dir()


def test_a_folder_holding_a_run_is_refused_unless_resume_or_overwrite(tmp_path):
    run = {"config": "", "set": "train.rounds=1", "out": str(tmp_path)}
    config, _, _ = open_run(run)
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match="already holds a run; set resume = true to continue it, overwrite = true"):
        open_run(run)
    assert open_run({**run, "overwrite": True})[2] is False
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    resumed, _, resume = open_run({"out": str(tmp_path), "resume": True, "set": "train.rounds=9"})
    assert resume and resumed.to_dict() == config.to_dict()  # the run's own config; set is not applied


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ({"resume": True}, "not a run directory"),
        ({"resume": True, "overwrite": True}, "set one of them"),
        ({"resume": "yes"}, "resume: must be true or false"),
        ({"out": None}, "out"),
    ],
)
def test_bad_run_configs_are_one_line(tmp_path, run, message):
    run = {"out": str(tmp_path / "empty"), **run}
    if run["out"] is None:
        run.pop("out")
    with pytest.raises(InputError, match=message):
        open_run(run)
