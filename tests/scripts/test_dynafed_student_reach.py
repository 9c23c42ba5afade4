"""scripts.dynafed_student_reach on a tiny DynaFed run: one row per segment and run, whose loss is the closed form
1 − 2·f·cos + f² of its move fraction f and cosine (to the printed rounding); a checkpoint without a trajectory is
a one-line error."""

from __future__ import annotations

import pytest

from fl.run import main as fl_run
from scripts.dynafed_student_reach import main
from tests.fl.methods.test_dynafed import dynafed_args


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    monkeypatch.setenv("SHUFFLEFL_WORKERS", "1")


def test_rows_follow_the_closed_form_and_a_bad_checkpoint_is_one_line(cifar_root, tmp_path, capsys):
    before, at_l = tmp_path / "before", tmp_path / "at_l"  # L = 3: keep round 2 (trajectory) and round 3 (w^L)
    assert fl_run(dynafed_args(cifar_root, before, "fedavg", "--set", "train.keep_round=2")) == 0
    assert fl_run(dynafed_args(cifar_root, at_l, "fedavg", "--set", "train.keep_round=3")) == 0
    capsys.readouterr()
    trajectory, last = before / "checkpoint_round2.pt", at_l / "checkpoint_round3.pt"
    args = ["--trajectory", str(trajectory), "--last", str(last), str(before), str(at_l), "--segments", "3"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("|") for line in lines[1:-1]]
    assert len(rows) == 3 and all(len(row) == 3 for row in rows)
    for row in rows:
        for cell in row[1:]:
            f, cos, loss = map(float, cell.split())
            assert f > 0 and -1 <= cos <= 1
            assert loss == pytest.approx(1 - 2 * f * cos + f * f, abs=4e-3)
    assert main(["--trajectory", str(last), "--last", str(last), str(before)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no DynaFed trajectory" in err
