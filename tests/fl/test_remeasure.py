"""fl.remeasure: estimates at a run's saved models equal those the run logged at the same rounds; δ² alone equals
the logged δ²; a second call measures nothing new; bad input is a one-line error."""

from __future__ import annotations

import json

import pytest
import torch

from fl.remeasure import OUT, main, remeasure
from fl.run import main as run_main
from tests.fl.methods.test_dynafed import dynafed_args


@pytest.fixture
def dynafed_run(cifar_root, tmp_path):
    out = tmp_path / "run"
    assert run_main(dynafed_args(cifar_root, out, "fedavg", "--set", "train.keep_round=4")) == 0
    return out


def logged(out) -> dict[int, dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["round"]: r["estimates"] for r in rows if "estimates" in r}


def test_posthoc_estimates_equal_the_logged_ones(dynafed_run):
    snapshot = dynafed_run / "snapshots" / "round4.pt"  # what a watcher keeps: round (the next to run), x, method
    snapshot.parent.mkdir()
    checkpoint = torch.load(dynafed_run / "checkpoint_round4.pt", weights_only=True)
    torch.save({k: checkpoint[k] for k in ("round", "x", "method")}, snapshot)
    lines = remeasure(dynafed_run, quiet=True)
    assert [line["round"] for line in lines] == [4, 5]  # the snapshot repeats round 4: measured once
    assert lines[0]["file"] == "checkpoint_round4.pt"
    mine, theirs = lines[0]["estimates"], logged(dynafed_run)[4]
    assert set(mine) == set(theirs)
    for key, value in theirs.items():
        assert mine[key] == pytest.approx(value, rel=1e-9), key
    assert remeasure(dynafed_run, quiet=True) == []  # measured before: skipped
    assert len((dynafed_run / OUT).read_text().splitlines()) == 2


def test_delta2_alone_equals_the_logged_delta2(dynafed_run):
    lines = remeasure(dynafed_run, only="delta2", every=4, quiet=True)
    assert [line["round"] for line in lines] == [4, 5]  # divisible by 4, and the last
    assert list(lines[0]["estimates"]) == ["delta2"]
    assert lines[0]["estimates"]["delta2"] == pytest.approx(logged(dynafed_run)[4]["delta2"], rel=1e-6)


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    assert main([str(tmp_path), "--every", "0"]) == 2
    assert "--every" in capsys.readouterr().err


def test_other_samples_or_kind_are_another_measurement_and_nothing_new_says_so(dynafed_run, capsys):
    first = remeasure(dynafed_run, only="delta2", every=4, quiet=True)
    assert [line["only"] for line in first] == ["delta2", "delta2"]
    full = remeasure(dynafed_run, every=4, samples=8, quiet=True)  # all estimates: not the δ² lines above
    assert [line["round"] for line in full] == [4, 5] and all(line["samples"] == 8 for line in full)
    fewer = remeasure(dynafed_run, every=4, samples=4, quiet=True)  # fewer samples after more: made, not skipped
    assert [line["samples"] for line in fewer] == [4, 4]
    capsys.readouterr()
    assert main([str(dynafed_run), "--every", "4", "--samples", "4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "nothing new measured" in out and "model(s) measured" not in out
