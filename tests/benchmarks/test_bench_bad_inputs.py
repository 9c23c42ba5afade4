"""The benchmarks refuse bad command-line input in one line on stderr with exit 2, before any work and before they
make any output folder or file: engine_bench's bad counts (``--clients 0``, ``--repeats 0``, ``--threads -1``),
flower_bench's missing config (issue 44, class 7) and an ``--out`` that holds an earlier bench's outputs, and, run
as the user runs them (a subprocess from the checkout's root), zero or negative counts, unknown names, missing files
and options that ``--quick`` (or ``--paper``) would override in clients_bench, synthesis_bench, workers_bench,
sweep_jobs_bench and quadratic_bench. The subprocesses run four at a time (each imports torch: ~2 s); the rest run
in this process. The file takes about 30 s on 2 busy cores."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str):
    """benchmarks/NAME.py as a module, loaded from its file (``benchmarks`` here is this test folder)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_main(name: str):
    """The ``main`` of benchmarks/NAME.py."""
    return load_bench(name).main


@pytest.mark.parametrize("argv", [["--clients", "0"], ["--repeats", "0"], ["--threads", "-1"], ["--clients", "x"]])
def test_engine_bench_refuses_bad_counts_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as done:
        bench_main("engine_bench")(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"engine_bench.py: error: argument {argv[0]}: expected a whole number >= 1"), err


def test_flower_bench_refuses_a_missing_config_before_making_its_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert bench_main("flower_bench")(["--config", "missing.toml"]) == 2
    err = capsys.readouterr().err
    assert err == "flower_bench.py: error: config file missing.toml not found\n"
    assert not any(tmp_path.iterdir())  # not results/bench/flower/ (in the checkout, from its default --out)


def test_flower_bench_refuses_an_out_that_holds_an_earlier_bench_before_anything_starts(tmp_path, monkeypatch, capsys):
    """Fourth sweep, case 51: a second bench into the same --out once hung for 1800 s (its Flower app refused the
    loopback run's folder, which held the first bench's run): it is refused in one line, nothing touched."""
    monkeypatch.chdir(ROOT)
    earlier = tmp_path / "B"
    (earlier / "flower-loopback").mkdir(parents=True)
    (earlier / "flower-loopback" / "summary.json").write_text("{}")
    (earlier / "flower_bench.json").write_text("{}")
    before = sorted(str(p.relative_to(earlier)) for p in earlier.rglob("*"))
    assert bench_main("flower_bench")(["--config", "configs/fmnist_quick.toml", "--out", str(earlier)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{earlier} already holds a bench's outputs" in err, err
    assert "flower-loopback" in err and "pick a new --out or remove it" in err, err
    assert sorted(str(p.relative_to(earlier)) for p in earlier.rglob("*")) == before
    assert (earlier / "flower-loopback" / "summary.json").read_text() == "{}"


def test_flower_bench_takes_a_new_or_unrelated_out(tmp_path):
    fresh_out = load_bench("flower_bench").fresh_out
    assert fresh_out(tmp_path / "new").is_dir()
    (tmp_path / "notes.txt").write_text("a user's\n")  # not a bench's output: left as it is, the bench writes beside
    assert fresh_out(tmp_path) == tmp_path and (tmp_path / "notes.txt").read_text() == "a user's\n"
    (tmp_path / "fl.run").symlink_to(tmp_path / "elsewhere")  # a dangling link of a bench's name counts too
    with pytest.raises(InputError, match=r"already holds a bench's outputs \(fl\.run\)"):
        fresh_out(tmp_path)


# (script, arguments, what the one line says after "SCRIPT: error: "); OUT stands for the case's own empty folder,
# which must still be empty afterwards. These are the command lines that once ended in a traceback, ran to the end
# with an option ignored, or refused only after a baseline run of 44 s.
CASES = {
    "clients-zero-clients": ("clients_bench", "--clients 0 --models fedcog-cnn --samples 8 --repeats 1 --devices cpu "
                             "--out OUT/cb.json", "argument --clients: expected a whole number >= 1"),
    "clients-zero-repeats": ("clients_bench", "--clients 2 --repeats 0 --models fedcog-cnn --devices cpu "
                             "--out OUT/cb.json", "argument --repeats: expected a whole number >= 1"),
    "clients-quick-zero-clients": ("clients_bench", "--quick --clients 0 --out OUT/cb.json", "argument --clients"),
    "clients-quick-unknown-model": ("clients_bench", "--quick --models nosuch --out OUT/cb.json",
                                    "argument --models: unknown model 'nosuch'"),
    "clients-quick-negative-batch": ("clients_bench", "--quick --batch-size -3 --out OUT/cb.json",
                                     "argument --batch-size: expected a whole number >= 1"),
    "synthesis-zero-iterations": ("synthesis_bench", "--iterations 0 --width 4 --size 16 --per-class 2 "
                                  "--inner-steps 3 --repeats 1 --device cpu --out OUT/sb.json",
                                  "argument --iterations: expected a whole number >= 1"),
    "synthesis-quick-bad-counts": ("synthesis_bench", "--quick --repeats 0 --threads -2 --out OUT/sb.json",
                                   "argument --repeats: expected a whole number >= 1"),
    "synthesis-quick-zero-iterations": ("synthesis_bench", "--quick --iterations 0 --out OUT/sb.json",
                                        "argument --iterations"),
    "workers-missing-config": ("workers_bench", "--config missing.toml --out OUT/wb", "config file"),
    # these two import no torch before they refuse: cheap, so a few more of them
    "sweep-zero-jobs": ("sweep_jobs_bench", "--jobs 0 --out OUT/sjb.json", "argument --jobs"),
    "sweep-zero-rounds": ("sweep_jobs_bench", "--rounds 0 --out OUT/sjb.json", "argument --rounds"),
    "quadratic-zero-p": ("quadratic_bench", "--p 0 --no-e2e", "argument --p: expected a whole number >= 1"),
}  # fmt: skip


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every case run once, as a user runs it, four at a time: its finished process and its folder."""

    def run(case: str) -> tuple[subprocess.CompletedProcess, Path]:
        script, arguments, _ = CASES[case]
        folder = tmp_path_factory.mktemp(case)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        argv = [sys.executable, f"benchmarks/{script}.py", *arguments.replace("OUT", str(folder)).split()]
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        return done, folder

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CASES, pool.map(run, CASES), strict=True))


@pytest.mark.parametrize("case", CASES)
def test_a_bad_command_line_is_refused_in_one_line_before_any_output(case, refused):
    script, _, says = CASES[case]
    done, folder = refused[case]
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr
    assert done.stderr.startswith(f"{script}.py: error: {says}"), done.stderr
    assert not any(folder.iterdir())


# the same classes in the scripts' other options, run in this process (torch imported once): (script, arguments,
# what the line says); FILE is a file the case makes first where the script wants a folder or a folder where it
# wants a file
MORE = {
    "clients-quick-overridden": ("clients_bench", "--quick --clients 4 --out OUT/cb.json", "--quick sets --clients"),
    "clients-unknown-device": ("clients_bench", "--devices tpu --out OUT/cb.json", "argument --devices"),
    "clients-zero-threads": ("clients_bench", "--quick --threads 0 --out OUT/cb.json", "argument --threads"),
    "clients-zero-peak": ("clients_bench", "--quick --peak-tflops 0 --out OUT/cb.json", "argument --peak-tflops"),
    "clients-out-is-a-folder": ("clients_bench", "--quick --out OUT", "--out"),
    "synthesis-paper-overridden": ("synthesis_bench", "--paper --width 64 --out OUT/sb.json", "--paper sets --width"),
    "synthesis-quick-and-paper": ("synthesis_bench", "--quick --paper --out OUT/sb.json", "--quick and --paper"),
    "synthesis-unknown-path": ("synthesis_bench", "--quick --paths nosuch --out OUT/sb.json", "argument --paths"),
    "synthesis-unknown-device": ("synthesis_bench", "--quick --device tpu --out OUT/sb.json", "argument --device"),
    "synthesis-image-too-small": ("synthesis_bench", "--size 3 --width 4 --out OUT/sb.json", "ConvNet3 needs"),
    "synthesis-out-under-a-file": ("synthesis_bench", "--quick --out OUT/FILE/sb.json", "--out"),
    "workers-out-is-a-file": ("workers_bench", "--no-dynafed --out OUT/FILE", "cannot create output folder"),
    "flower-out-is-a-file": ("flower_bench", "--out OUT/FILE", "cannot create output folder"),
    "sweep-bad-jobs": ("sweep_jobs_bench", "--jobs 1,x --out OUT/sjb.json", "argument --jobs"),
    "sweep-repeated-seeds": ("sweep_jobs_bench", "--seeds 0,0 --out OUT/sjb.json", "--seeds '0,0'"),
    "sweep-negative-subsample": ("sweep_jobs_bench", "--subsample -1 --out OUT/sjb.json", "argument --subsample"),
    "sweep-missing-config": ("sweep_jobs_bench", "--config missing.toml --out OUT/sjb.json", "config file"),
    "sweep-seed-set": ("sweep_jobs_bench", "--set train.seed=3 --out OUT/sjb.json", "the sweeps set train.seed"),
    "quadratic-etas-beyond-the-grid": ("quadratic_bench", "--etas 100 --no-e2e", "argument --etas"),
}  # fmt: skip


@pytest.mark.parametrize("case", MORE)
def test_more_bad_options_are_refused_in_one_line_before_any_output(case, tmp_path, monkeypatch, capsys):
    script, arguments, says = MORE[case]
    monkeypatch.setattr(sys, "path", list(sys.path))  # (workers_bench puts benchmarks/ in front)
    monkeypatch.chdir(ROOT)
    (tmp_path / "FILE").write_text("")
    try:
        code = bench_main(script)(arguments.replace("OUT", str(tmp_path)).split())
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"{script}.py: error: {says}"), err
    assert [path.name for path in tmp_path.iterdir()] == ["FILE"]
