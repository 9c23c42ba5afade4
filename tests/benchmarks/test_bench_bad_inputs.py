"""The benchmarks' last tracebacks (issue 44, class 7), now one line and exit 2: engine_bench's bad counts
(``--clients 0``, ``--repeats 0``, ``--threads -1``) and flower_bench's missing config, refused before it makes its
output folder (by default results/bench/flower/ in the checkout)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench_main(name: str):
    """The ``main`` of benchmarks/NAME.py, loaded from its file (``benchmarks`` here is this test folder)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


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
