"""Bad input: InputError (a ValueError) naming the argument; the CLI prints one line and exits with 2."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import theory
from theory.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"zeta2": 1.0, "sigma2": 0.0, "L_max": 100.0, "L_avg": 38.5, "tau": 10, "N": 10, "mu": 1.0}


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: theory.zeta2_hat_bound(1.5, 1.0), "p"),
        (lambda: theory.zeta2_hat_bound([0.2, -0.1], 1.0), "p"),
        (lambda: theory.zeta2_hat_bound(np.nan, 1.0), "p"),
        (lambda: theory.zeta2_hat_bound(0.5, -1.0), "zeta2"),
        (lambda: theory.sigma2_hat_bound(0.5, -1.0, 1.0), "sigma2"),
        (lambda: theory.sigma2_hat_bound(0.5, 1.0, 1.0, sigma2_tilde=-2), "sigma2_tilde"),
        (lambda: theory.sigma2_hat_bound(0.5, 1.0, 1.0, delta2=-2), "delta2"),
        (lambda: theory.L_p_bound(0.5, 10.0, 20.0), "L_avg"),
        (lambda: theory.Constants(**{**GOOD, "N": 0}), "N"),
        (lambda: theory.Constants(**{**GOOD, "tau": 0.5}), "tau"),
        (lambda: theory.Constants(**{**GOOD, "mu": 0}), "mu"),
        (lambda: theory.Constants(**{**GOOD, "L_max": 0}), "L_max"),
        (lambda: theory.Constants(**{**GOOD, "zeta2": -1}), "zeta2"),
        (lambda: theory.iteration_bound(0.5, 0.0, theory.Constants(**GOOD)), "eps"),
        (lambda: theory.iteration_bound(0.5, -1e-3, theory.Constants(**GOOD)), "eps"),
        (lambda: theory.zeta2(np.ones((2, 3))), "G"),
        (lambda: theory.mixture_zeta2(np.ones((2, 3, 1)), 2.0), "p"),
        (lambda: theory.mixture_zeta2(np.ones((2, 3, 2)), 0.5, np.ones((3, 3))), "G_tilde"),
        (lambda: theory.smoothness(np.ones((2, 3, 2))), "H"),
        (lambda: theory.shuffle_assignment(0, 3, 0.5, np.random.default_rng(0)), "n_clients"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name) as info:
        call()
    assert isinstance(info.value, theory.InputError)


def test_cli_table(capsys):
    argv = "--p 0.1 --zeta2 1 --sigma2 0 --L-max 100 --L-avg 38.5 --tau 10 --eps 1e-6".split()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Lemma 1" in out and "Corollary I, strongly-convex" in out and "Corollary I, non-convex" in out
    assert "93.85" in out  # L_p = 0.9·100 + 0.1·38.5


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["--p", "1.5"], "p"),
        (["--zeta2", "-1"], "zeta2"),
        (["--eps", "0"], "eps"),
        (["--N", "0"], "N"),
        (["--tau", "0.5"], "tau"),
        (["--L-avg", "200"], "L_avg"),
    ],
)
def test_cli_bad_input_one_line_exit_2(argv, name, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and name in captured.err


def test_cli_entry_point():
    run = [sys.executable, "-m", "theory"]
    assert subprocess.run([*run, "--help"], cwd=ROOT, capture_output=True).returncode == 0
    bad = subprocess.run([*run, "--p", "abc"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    latex = subprocess.run([*run, "--latex"], cwd=ROOT, capture_output=True, text=True)
    assert latex.stdout.count(r"\begin{align*}") == 3 and "NOT verified" not in latex.stdout


def test_symbolic_derivations_verify_and_can_fail():
    import sympy as sp

    from theory.symbolic import Step, derivations, derive_D5

    assert all(d.verified for d in derivations())
    assert derive_D5(2, 2, 4, 2).verified  # d = 2
    true_step = derive_D5().steps[1]
    wrong = Step(
        "wrong", "claim (1-p) instead of (1-p)^2", true_step.lhs, true_step.rhs / (1 - sp.Symbol("p", real=True))
    )
    assert not wrong.verified
