"""The fourth sweep's tracebacks (issue 69, item 7), each one line now: ``fl.train`` with an ``out`` that is no path
(case 53), ``fl.run --compare`` on a damaged summary (case 58), ``fl.remeasure`` on a checkpoint whose round is no
round (case 81)."""

from __future__ import annotations

import json

import pytest
import torch

import fl
from fl import remeasure
from fl.run import main
from theory.errors import InputError


@pytest.mark.parametrize("out", [b"runs/x", "a\0b", ""])
def test_fl_train_refuses_an_out_that_is_no_path(out):
    with pytest.raises(InputError, match="out"):
        fl.train({}, overrides={"train.rounds": 1}, out=out)


def test_compare_on_a_damaged_summary_is_one_line(tmp_path, capsys):
    for name, worst in (("a", None), ("b", 5)):
        (tmp_path / name).mkdir()
        summary = {"rounds_to_target": 3, "target_accuracy": 0.7, "worst_client": worst}
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("value", ["one", float("nan"), 0, True])
def test_remeasure_refuses_a_checkpoint_whose_round_is_no_round(tmp_path, value):
    path = tmp_path / "checkpoint.pt"
    torch.save({"round": value, "x": torch.zeros(2)}, path)
    with pytest.raises(InputError, match="not a round number"):
        remeasure.saved_round(path)
