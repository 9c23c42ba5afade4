"""``python -m theory``: tables checked against Lemma 1 / Corollary I by hand, one-line errors with exit code 2.

Most cases call ``theory.__main__.main`` in-process (fast); a few run the real entry point in a subprocess.
"""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from theory.__main__ import main

ROOT = Path(__file__).resolve().parents[2]  # the repository root, wherever pytest is started from
EXAMPLE = "--p 0.1 --zeta2 1 --sigma2 0 --L-max 100 --L-avg 38.5 --tau 10 --eps 1e-6".split()


def run_module(*args):
    """``python -m theory ARGS`` with the repository root importable, as a user would run it from a checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "theory", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def call_main(argv, capsys):
    """main(argv) in-process -> (exit code, stdout, stderr); argparse's own errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table_row(section, first_cell):
    """The cells of the row of a plain-text table (in ``section``) whose first cell is ``first_cell``."""
    for line in section.splitlines():
        cells = line.split()
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in\n{section}")


def hand_T(p, eps, convexity, zeta2=1.0, sigma2=0.0, L_max=100.0, L_avg=38.5, tau=10.0, N=10.0, mu=1.0):
    """Corollary I with σ̃² = σ², δ² = 0 (the CLI defaults), written out by hand."""
    sigma2_hat = (1 - p) * sigma2 + p * sigma2 + p * (1 - p) * zeta2
    L_p = (1 - p) * L_max + p * L_avg
    inner = tau * (1 - p) * math.sqrt(zeta2) + math.sqrt(tau * sigma2_hat)
    if convexity == "strongly-convex":
        return (
            sigma2_hat / (mu * N * eps)
            + math.sqrt(L_p) * inner / (mu * math.sqrt(eps))
            + L_p * tau / mu * math.log(1 / eps)
        )
    return L_p * sigma2_hat / (N * eps**2) + L_p * inner / eps**1.5 + L_p * tau / eps


# --- the real entry point ----------------------------------------------------------------------------------


def test_help_via_the_entry_point():
    result = run_module("--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: python -m theory") and "--target-speedup" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--p", "abc"], r"argument --p: invalid float value: 'abc'"),  # argparse's error
        (["--p", "1.5"], r"error: p must lie in \[0, 1\]"),  # an InputError caught by main
    ],
)
def test_bad_input_via_the_entry_point(argv, pattern):
    result = run_module(*argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.endswith("\n")
    assert re.search(pattern, result.stderr) and "Traceback" not in result.stderr


# --- in-process ------------------------------------------------------------------------------------------------


def test_example_tables_match_the_formulas(capsys):
    code, out, err = call_main(EXAMPLE, capsys)
    assert code == 0 and err == ""
    lemma, strongly_convex, non_convex = out.strip().split("\n\n")
    assert lemma.startswith("Lemma 1")
    assert strongly_convex.startswith("Corollary I, strongly-convex")
    assert non_convex.startswith("Corollary I, non-convex")
    # Lemma 1 at p = 0.1: σ̂² = p(1-p)ζ² = 0.09, ζ̂² = (1-p)²ζ² = 0.81, L_p = 0.9·100 + 0.1·38.5 = 93.85
    assert table_row(lemma, "0.1") == ["0.1", "0.09", "0.81", "0.81", "93.85"]
    assert table_row(lemma, "0") == ["0", "0", "1", "1", "100"]
    for section, convexity in [(strongly_convex, "strongly-convex"), (non_convex, "non-convex")]:
        row = table_row(section, "0.1")
        T0, T = hand_T(0.0, 1e-6, convexity), hand_T(0.1, 1e-6, convexity)
        assert row[4] == f"{T:.4g}"  # T(p)
        assert row[5] == f"{T0 / T:.4g}" and row[6] == f"{T / T0:.4g}"  # speed-up, T(p)/T(0)
        assert row[7:] == ["0.9", "drift", "no"]  # literal Lemma 1 noise: not super-linear at p = 0.1


def test_convexity_option_selects_one_table(capsys):
    code, out, _ = call_main([*EXAMPLE, "--convexity", "non-convex"], capsys)
    assert code == 0
    assert "Corollary I, non-convex" in out and "strongly-convex" not in out


def test_latex_prints_the_checked_derivations(capsys):
    code, out, err = call_main(["--latex"], capsys)
    assert code == 0 and err == ""
    assert out.count(r"\begin{align*}") == out.count(r"\end{align*}") == 3
    assert "verified" in out and "NOT verified" not in out


def test_target_speedup_prints_the_smallest_p(capsys):
    code, out, _ = call_main([*EXAMPLE, "--target-speedup", "2"], capsys)
    assert code == 0
    lines = [line for line in out.splitlines() if "smallest p" in line]
    assert len(lines) == 2  # one per convexity
    for line, convexity in zip(lines, ["strongly-convex", "non-convex"]):
        p_min = float(re.fullmatch(r"speed-up 2: smallest p = ([0-9.]+)", line).group(1))
        # printed to 4 digits: the hand speed-up must cross 2 within half a unit of the last digit
        half_ulp = 0.5 * 10 ** (math.floor(math.log10(p_min)) - 3)
        T0 = hand_T(0.0, 1e-6, convexity)
        assert T0 / hand_T(p_min - half_ulp, 1e-6, convexity) <= 2 <= T0 / hand_T(p_min + half_ulp, 1e-6, convexity)


def test_unreachable_target_speedup(capsys):
    code, out, _ = call_main([*EXAMPLE, "--target-speedup", "1e9"], capsys)
    assert code == 0
    assert out.count("speed-up 1e+09: not reachable") == 2


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--p", "1.5"], r"error: p must lie in \[0, 1\], got \[1\.5\]"),
        (["--p", "0.2", "-0.1"], r"error: p must lie in \[0, 1\]"),
        (["--zeta2", "-1"], r"error: zeta2 must be finite and >= 0"),
        (["--eps", "0"], r"error: eps must be finite and > 0"),
        (["--N", "0"], r"error: N must be finite and >= 1"),
        (["--tau", "0.5"], r"error: tau must be finite and >= 1"),
        (["--p", "abc"], r"error: argument --p: invalid float value: 'abc'"),
        (["--L-avg", "200"], r"error: L_avg must not exceed L_max"),
        (["--mu", "0"], r"error: mu must be finite and > 0"),
        (["--sigma2-hat", "-1"], r"error: sigma2_hat must be finite and >= 0"),
        (["--target-speedup", "0"], r"error: target must be finite and > 0"),
        (["--convexity", "convex"], r"error: argument --convexity: invalid choice"),
    ],
)
def test_bad_input_one_line_exit_2(argv, pattern, capsys):
    code, out, err = call_main([*EXAMPLE, *argv], capsys)
    assert code == 2
    assert out == ""  # nothing printed before the error was found
    assert len(err.splitlines()) == 1 and err.endswith("\n")
    assert err.startswith("python -m theory: error: ")
    assert re.search(pattern, err) and "Traceback" not in err
