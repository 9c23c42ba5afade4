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
from fl.experiment import Experiment
from fl.run import main
from fl.runfolder import read_run_config
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


def test_each_clients_results_are_kept_summarised_tabled_and_drawn(cifar_root, tmp_path, capsys):
    """clients.csv holds every client's held-out samples, accuracy and loss at each evaluation (recomputed here
    client by client), summary.json the worst client and the spread, the sweep's table a worst-client column,
    --compare a worst-client line, and clients.png the distribution over rounds."""
    import csv

    from fl.run import compare
    from fl.sweep import aggregate

    out = tmp_path / "run"
    extra = ("--set", "data.partition='shards'", "--set", "data.classes_per_client=2", "--set", "train.workers=1",
             "--set", "train.client_eval_every=2")  # fmt: skip
    assert main(base_args(cifar_root, out, *extra)) == 0
    with open(out / "clients.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [int(r["round"]) for r in table] == [2] * 4 + [4] * 4
    exp = Experiment(read_run_config(out))
    exp.flat.load(torch.load(out / "checkpoint.pt", weights_only=True)["x"])
    for row in table[4:]:
        split = exp.data.val[int(row["client"])]
        loss, accuracy = evaluate(exp.flat, exp.data.x[split], exp.data.y[split])
        assert float(row["accuracy"]) == pytest.approx(accuracy) and float(row["loss"]) == pytest.approx(loss)
        assert int(row["samples"]) == len(split)
    summary = json.loads((out / "summary.json").read_text())
    worst = min(table[4:], key=lambda r: float(r["accuracy"]))
    assert summary["worst_client"] == {"client": int(worst["client"]), "accuracy": pytest.approx(
        float(worst["accuracy"])), "samples": int(worst["samples"])}  # fmt: skip
    assert (out / "clients.png").stat().st_size > 0
    assert aggregate("x", [summary])["worst_client_accuracy"] == pytest.approx(float(worst["accuracy"]))
    assert f"worst client (last per-client evaluation): {out}: client {worst['client']}" in compare(out, out)
