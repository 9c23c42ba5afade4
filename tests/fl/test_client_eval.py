"""Per-client evaluation (train.client_eval_every): every K rounds the server model on each client's own held-out
split, as mean, worst tenth and spread in the round rows, recomputed here client by client; it changes no other
number, and a config that does not use it has the identity (and checkpoint key) it had before the key existed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fl.config import load_config
from fl.engine import evaluate
from fl.run import Experiment, main, read_run_config
from tests.fl.conftest import assert_one_line_config_error
from tests.fl.test_run import base_args, metrics


def test_client_accuracy_is_each_clients_own_split_and_changes_nothing_else(cifar_root, tmp_path):
    plain, evaluated = tmp_path / "plain", tmp_path / "evaluated"
    extra = ("--set", "data.partition='shards'", "--set", "data.classes_per_client=2", "--set", "train.workers=1")
    assert main(base_args(cifar_root, plain, *extra)) == 0
    assert main(base_args(cifar_root, evaluated, *extra, "--set", "train.client_eval_every=3")) == 0
    rows = metrics(evaluated)
    assert [r["round"] for r in rows if "client_accuracy" in r] == [3, 4]  # every 3 rounds, and the last
    assert [{k: v for k, v in r.items() if k != "client_accuracy"} for r in rows] == metrics(plain)

    exp = Experiment(read_run_config(evaluated))
    x = torch.load(evaluated / "checkpoint.pt", weights_only=True)["x"]
    exp.flat.load(x)
    scores = sorted(evaluate(exp.flat, exp.data.x[v], exp.data.y[v])[1] for v in exp.data.val)
    found = rows[-1]["client_accuracy"]
    assert found["clients"] == 4 and found["mean"] == pytest.approx(np.mean(scores))
    assert found["worst_decile"] == pytest.approx(scores[0])  # ⌈4/10⌉ = 1 client: the worst
    assert found["std"] == pytest.approx(np.std(scores))


def test_the_key_leaves_earlier_identities_as_they_were(tmp_path, capsys):
    assert "client_eval_every" not in load_config(None, []).identity()["train"]
    assert load_config(None, ["train.client_eval_every=5"]).identity()["train"]["client_eval_every"] == 5
    assert_one_line_config_error(["--set", "train.client_eval_every=2", "--set", "data.val_fraction=0.0", "--out",
                                  str(tmp_path / "r")], "data.val_fraction > 0", capsys)  # fmt: skip
    assert_one_line_config_error(["--set", "train.client_eval_every=-1"], "train.client_eval_every", capsys)
    assert json.loads(json.dumps(load_config(None, []).to_dict()))["train"]["client_eval_every"] == 0
