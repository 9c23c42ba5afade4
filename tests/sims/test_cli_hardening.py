"""sims.quadratic and sims.mnist refuse in one line, before any work and without touching a file: an --out that is
not their own (unless --overwrite), a request larger than the free memory, a seed outside [0, 2^32-1], a non-finite
number (issue 37). And the memory estimate is a bound within a small factor of what the simulator allocates."""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sims.limits import MAX_STEPS
from sims.mnist import experiment as mnist_experiment
from sims.mnist.__main__ import main as mnist_main
from sims.output import earlier_output
from sims.quadratic import experiment as quadratic_experiment
from sims.quadratic.__main__ import OUTPUTS
from sims.quadratic.__main__ import main as quadratic_main
from theory.cli import OWNER

MAINS = {"sims.quadratic": quadratic_main, "sims.mnist": mnist_main}


def call(main, argv: list[str]) -> int:
    """main's exit code, or that of the SystemExit argparse raises."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(capsys, tool: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"python -m {tool}: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------------- --out


FOREIGN = {
    "a summary.json of someone else's": {"summary.json": '{"mine": 1}'},  # issue 37's folder
    "an fl.run folder": {"config.json": "{}", "summary.json": '{"rounds": 2}', OWNER: "fl.run\n"},
    "the other simulator's folder": {"summary.json": '{"config": {}}', OWNER: "OTHER\n"},
    "a file of someone else's": {"notes.txt": "mine"},
}


@pytest.mark.parametrize("tool", MAINS)
@pytest.mark.parametrize("folder", FOREIGN)
def test_out_that_is_not_the_tools_own_is_refused_untouched(tool, folder, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    other = next(name for name in MAINS if name != tool)
    for name, text in FOREIGN[folder].items():
        (out / name).write_text(text.replace("OTHER", other))
    before = snapshot(out)
    assert call(MAINS[tool], ["--quick", "--no-plot", "--out", str(out)]) == 2
    err = one_line_error(capsys, tool)
    assert "another --out" in err and "use --overwrite" not in err  # --overwrite is not offered for it
    assert snapshot(out) == before


def test_quadratic_writes_again_into_its_own_folder_and_into_another_with_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--quick", "--no-plot", "--out", str(out)]
    assert quadratic_main(args) == 0
    assert (out / OWNER).read_text() == "sims.quadratic\n"
    assert quadratic_main(args) == 0  # its own folder (figures' simulate re-runs into it)
    (out / OWNER).unlink()  # as an earlier version left it: only its own files, its own summary
    assert earlier_output(out, OUTPUTS, ("config", "A_ratio"))
    assert quadratic_main(args) == 0 and (out / OWNER).read_text() == "sims.quadratic\n"
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert quadratic_main(["--quick", "--no-plot", "--out", str(other)]) == 2
    assert not (other / "summary.json").exists()
    assert quadratic_main(["--quick", "--no-plot", "--out", str(other), "--overwrite"]) == 0
    assert (other / "notes.txt").read_text() == "mine" and (other / "summary.json").is_file()


def test_earlier_output_needs_only_own_files_and_own_summary(tmp_path):
    (tmp_path / "summary.json").write_text('{"config": {}, "A_ratio": []}')
    assert earlier_output(tmp_path, OUTPUTS, ("config", "A_ratio"))
    assert not earlier_output(tmp_path, OUTPUTS, ("config", "rows"))  # another tool's summary
    (tmp_path / "metrics.jsonl").write_text("")
    assert not earlier_output(tmp_path, OUTPUTS, ("config", "A_ratio"))  # a file it never writes
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "summary.json").write_text("[1]")
    assert not earlier_output(tmp_path, OUTPUTS, ("config",))


# ------------------------------------------------------------------------------------ sizes, memory

HUGE = "1" + "0" * 400  # beyond float range


@pytest.mark.parametrize(
    ("tool", "argv"),
    [
        ("sims.quadratic", ["--clients", "1000000000"]),  # issue 37: grew to 22 GB and was killed
        ("sims.quadratic", ["--d", "100000000000"]),
        ("sims.quadratic", ["--n", HUGE]),
        ("sims.quadratic", ["--rounds", "10000000000000"]),
        ("sims.quadratic", ["--rounds-a", "100000000000"]),
        ("sims.quadratic", ["--seeds", "100000000"]),
        ("sims.quadratic", ["--n-boot", "10000000000"]),
        ("sims.quadratic", ["--sigma2", "0", "1", "--batch-size", "100000000000"]),
        ("sims.quadratic", ["--preset", "paper", "--clients", "100000000"]),  # the epoch solver's chunk
        ("sims.mnist", ["--seeds", "1000000"]),
        ("sims.mnist", ["--per-class", "100000000"]),
        ("sims.mnist", ["--rounds", "100000000000"]),
        ("sims.mnist", ["--per-class", HUGE]),
        # sizes that need no memory but would loop for days (they hung before)
        ("sims.quadratic", ["--tau", "1000000000000000000000000"]),  # panel (a)'s mini-batch solver: τ steps a round
        ("sims.mnist", ["--epochs", "1", "10000000000000000000000000"]),
        ("sims.mnist", ["--batch-size", "1", "--rounds", "100000000"]),
    ],
)
def test_huge_sizes_are_refused_in_one_line_before_any_work(tool, argv, tmp_path, capsys):
    out = tmp_path / "out"
    start = time.perf_counter()
    assert call(MAINS[tool], ["--quick", "--no-plot", "--out", str(out), *argv]) == 2
    err = one_line_error(capsys, tool)
    assert "GiB of memory" in err or "steps of its loop" in err
    assert not out.exists() and time.perf_counter() - start < 10


def test_grids_count_in_the_quadratic_estimate():
    config = quadratic_experiment.quick(quadratic_experiment.PRESETS["default"])
    base = quadratic_experiment.memory_needed(config)
    etas = replace(config, etas=tuple(np.geomspace(1e-6, 1e-3, 10**5)))
    p_grid = replace(config, p_grid=tuple(np.linspace(0, 0.9, 10**5)))
    curves = 8 * config.seeds * (config.rounds + 1) * 10**5 * len(config.p_grid)  # one float64 error-curve array
    assert quadratic_experiment.memory_needed(etas) > curves > base
    assert quadratic_experiment.memory_needed(p_grid) > curves * len(config.etas) / len(config.p_grid)


def test_presets_fit_in_a_small_machine():
    """The main job's estimate (default preset), the paper preset's and sims.mnist's defaults stay under 2 GiB and
    far below the loop limit."""
    for config in quadratic_experiment.PRESETS.values():
        assert quadratic_experiment.memory_needed(config) < 2 * 2**30
        assert quadratic_experiment.loop_steps(config) < MAX_STEPS / 1000
    assert mnist_experiment.memory_needed(mnist_experiment.Config()) < 2 * 2**30
    assert mnist_experiment.loop_steps(mnist_experiment.Config()) < MAX_STEPS / 1000


QUADRATIC_CASES = {
    "full-batch": {"rounds": 20000, "sigma2_levels": (0.0,)},
    "mini-batch": {"rounds_a": 200, "sigma2_levels": (1.0,), "batch_size": 50, "n_per_client": 200},
    "bootstrap": {"seeds": 20, "n_boot": 3000},
}


@pytest.mark.parametrize("case", [*QUADRATIC_CASES, "epoch"])
def test_quadratic_estimate_bounds_what_numpy_allocates(case):
    """tracemalloc sees numpy's allocations: the peak of both stages lies below the estimate (without its fixed
    allowance for the interpreter), and the estimate is at most 4x the peak (measured: 1.2x-2.3x)."""
    if case == "epoch":
        config = replace(quadratic_experiment.quick(quadratic_experiment.PRESETS["paper"]), n_clients=20)
    else:
        config = replace(quadratic_experiment.quick(quadratic_experiment.PRESETS["default"]), **QUADRATIC_CASES[case])
    config = config.validate()
    tracemalloc.start()
    try:
        quadratic_experiment.run_panel_a(config)
        quadratic_experiment.run_panels_bcd(config)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = quadratic_experiment.memory_needed(config) - quadratic_experiment.BASE_MEMORY
    assert peak < estimate < 4 * peak


# -------------------------------------------------------------------------------- seeds and numbers


@pytest.mark.parametrize("tool", MAINS)
@pytest.mark.parametrize(
    "argv",
    [
        ["--seed", "-1"],
        ["--seed", "4294967296"],
        ["--seed", "1.5"],
        ["--p", "0", "nan"],
        ["--p", "0", "inf"],
    ],
)
def test_bad_seeds_and_non_finite_numbers_are_refused(tool, argv, tmp_path, capsys):
    assert call(MAINS[tool], ["--quick", "--no-plot", "--out", str(tmp_path / "out"), *argv]) == 2
    one_line_error(capsys, tool)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [["--zeta2", "inf"], ["--eps", "nan"], ["--etas", "1e-3", "inf"], ["--eta-a", "nan"], ["--sigma2", "0", "inf"],
     ["--eps-grid", "1e-5", "1e400"], ["--eps=-inf"]],
)  # fmt: skip
def test_quadratic_non_finite_floats_are_refused(argv, tmp_path, capsys):
    assert call(quadratic_main, ["--quick", "--out", str(tmp_path / "out"), *argv]) == 2
    assert "finite" in one_line_error(capsys, "sims.quadratic")


@pytest.mark.parametrize("argv", [["--lr", "inf"], ["--sigma-bar2", "nan"]])
def test_mnist_non_finite_floats_are_refused(argv, tmp_path, capsys):
    assert call(mnist_main, ["--quick", "--out", str(tmp_path / "out"), *argv]) == 2
    assert "finite" in one_line_error(capsys, "sims.mnist")


def test_largest_seed_is_accepted(tmp_path):
    assert quadratic_main(["--quick", "--no-plot", "--seed", "4294967295", "--out", str(tmp_path / "q")]) == 0


@pytest.mark.parametrize("tool", sorted(MAINS))
def test_no_plot_drops_the_figures_an_earlier_run_drew(tool, tmp_path):
    """Issue 69's sweep (L4): ``--no-plot`` into a folder the tool drew in before left the old figures beside the new
    results; they are removed (its own files only), and a user's file stays."""
    out = tmp_path / "out"
    assert call(MAINS[tool], ["--quick", "--out", str(out)]) == 0
    figures = sorted(p.name for p in out.glob("fig*.png"))
    assert figures
    (out / "notes.txt").write_text("mine")
    assert call(MAINS[tool], ["--quick", "--no-plot", "--seed", "9", "--out", str(out)]) == 0
    assert not list(out.glob("fig*.png")) and (out / "notes.txt").read_text() == "mine"
