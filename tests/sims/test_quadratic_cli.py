"""python -m sims.quadratic end to end on the --quick grid, and its one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sims.quadratic.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_writes_every_output(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    for name in ("fig2.png", "summary.json", "table.csv", "panel_a.csv", "panel_b.csv", "rounds.csv"):
        assert (tmp_path / name).stat().st_size > 0, name
    summary = json.loads((tmp_path / "summary.json").read_text())
    for field in ("p", "L_p", "zeta2_star_ratio", "A_ratio", "theory_ratio", "kappa"):
        assert len(summary[field]) == len(summary["p"]), field
    p = np.array(summary["p"])
    # Independent check of the printed theory ratio: (1-p)·sqrt(1-p+p·L_avg/L_max) with L_max = 100, L_avg = 38.5.
    assert np.allclose(summary["theory_ratio"], (1 - p) * np.sqrt(1 - p + p * 38.5 / 100))
    assert summary["L_max"] == 100 and np.isclose(summary["L_avg"], 38.5)
    out = capsys.readouterr().out
    assert "zeta2*_ratio" in out and "A_p/A_0" in out and "kappa" in out


def test_same_seed_same_numbers(tmp_path):
    for name in ("a", "b"):
        assert main(["--quick", "--no-plot", "--seed", "7", "--out", str(tmp_path / name)]) == 0
    first, second = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("a", "b"))
    assert first["A_ratio"] == second["A_ratio"] and first["rounds_to_eps"] == second["rounds_to_eps"]


def exit_code(argv):
    """main's return code, or the code of the SystemExit argparse raises for a malformed command line."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--p", "0", "1.5"], "p_grid"),
        (["--eps", "0"], "eps"),
        (["--eps", "-1"], "eps"),
        (["--tau", "0"], "tau"),
        (["--d", "0"], "dim"),
        (["--p", "0.2", "0.5"], "p = 0"),
        (["--eta-a", "5"], "diverges"),
        (["--etas", "0", "1"], "step sizes"),
        (["--preset", "nope"], "preset"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, named, tmp_path, capsys):
    assert exit_code(["--quick", "--no-plot", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "Traceback" not in err


def test_entry_point_error_without_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "sims.quadratic", "--quick", "--eps", "0"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr and result.stdout == ""
