"""The base arm of a sweep labelled by its value (issue 68, item 6): ``data.p=0 (base)`` in table.csv's ``arm``
column, the printed table, sweep.json and sweep.png's legend and ticks, while its folder stays ``OUT/base`` (so the
runs of earlier sweeps, and the ledger's, keep their names)."""

from __future__ import annotations

import csv
import json

from fl.config import load_config
from fl.sweep import arm_label, base_values
from fl.sweep import main as sweep_main
from plots.sweep import _label
from tests.fl.test_sweep import sets


def test_the_base_arm_is_labelled_by_its_values_and_keeps_its_folder(cifar_root, tmp_path, capsys):
    out = tmp_path / "s"
    args = [*sets(cifar_root), "--vary", "data.p=0,0.5", "--seeds", "0", "--out", str(out), "--quiet"]
    assert sweep_main(args) == 0
    printed = capsys.readouterr().out
    assert "data.p=0 is the base config: reported as 'data.p=0 (base)' (folder base)" in printed
    with (out / "table.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["run"], r["arm"]) for r in rows] == [("base", "data.p=0 (base)"), ("data.p=0.5", "data.p=0.5")]
    assert "data.p=0 (base)" in printed.split("table:")[0]  # the printed table names it so too
    assert (out / "base" / "seed0" / "summary.json").is_file()  # the folder keeps its name
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert runs["base"]["label"] == "data.p=0 (base)" and runs["base"]["base_values"] == {"data.p": "0"}
    assert _label("base", "data.p", runs) == "0 (base)" and _label("data.p=0.5", "data.p", runs) == "0.5"
    assert (out / "sweep.png").stat().st_size > 0


def test_labels_of_several_keys_a_method_key_and_none_varied():
    config = load_config(None, ["method.name='none'", "algorithm.name='fedprox'"])
    values = base_values(config, ["method.name", "algorithm.mu", "method.n_tilde", "train.lr"])
    assert values == {"method.name": "none", "algorithm.mu": "0.01", "method.n_tilde": "unset", "train.lr": "[0.05]"}
    assert arm_label("base", {"method.name": "none"}) == "method.name=none (base)"
    assert arm_label("base", values).startswith("method.name=none,algorithm.mu=0.01,")
    assert arm_label("base", {}) == "base" and arm_label("data.p=0.5", values) == "data.p=0.5"
    results = {"base": {"label": "a.x=1,b.y=2 (base)", "base_values": {"a.x": "1", "b.y": "2"}}}
    assert _label("base", "all runs", results) == "a.x=1,b.y=2 (base)"  # a --product sweep's one panel
