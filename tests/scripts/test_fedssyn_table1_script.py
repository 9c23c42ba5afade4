"""scripts/fedssyn-table1.sh takes each column's knobs from the grid's one declaration (figures/fedssyn_table1.py's
COLUMNS): the runs it starts are the runs the artefact reads back. Its fl.sweep calls are recorded by a stand-in
python, nothing trains."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from figures.fedssyn_table1 import COLUMNS, PAPER_PARTITION, PARTITIONS, PLAIN_PARTITION

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fedssyn-table1.sh"


def stand_in(tmp_path: Path) -> tuple[Path, Path]:
    """A python that records ``-m fl.sweep ARGS`` (one line each) and runs everything else with this python."""
    log, stub = tmp_path / "sweeps.log", tmp_path / "python"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ] && [ "$2" = "fl.sweep" ]; then shift 2; printf "%s\\n" "$*" >> "$STUB_LOG"; exit 0; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    stub.chmod(0o755)
    return stub, log


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    stub, log = stand_in(tmp_path)
    env = os.environ | {"PYTHON": str(stub), "STUB_LOG": str(log), "SHUFFLEFL_RUNS": str(tmp_path / "runs"),
                        "PYTHONPATH": str(ROOT)}  # fmt: skip
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def test_every_columns_sweeps_set_the_declared_knobs(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "sweeps.log").read_text().splitlines()
    assert len(lines) == len(COLUMNS) * 6
    for line in lines:
        words = line.split()
        out = Path(words[words.index("--out") + 1])
        column = out.parent.name
        assert out.parent.parent == tmp_path / "runs" / "fedssyn_table1" / PAPER_PARTITION
        sets = {words[k + 1] for k, word in enumerate(words) if word == "--set"}
        knobs = {s for s in sets if not s.startswith(("method.cache_dir=", "algorithm.name="))}
        assert knobs == set(COLUMNS[column].overrides(3000)), line
        assert f"algorithm.name={out.name}" in sets


def test_an_unknown_column_is_one_line_and_starts_nothing(tmp_path):
    done = run(tmp_path, "a01", "bogus")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "unknown column bogus for partition dirichlet-fedssyn "
        "(a01, a001, c04_a01, c04_a001, n40_a01, n40_a001, n100_a01, n100_a001)"
    ]
    assert not (tmp_path / "sweeps.log").exists()


def test_the_plain_partition_runs_its_five_columns_in_a_folder_of_its_own(tmp_path):
    done = run(tmp_path, "--partition", PLAIN_PARTITION)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "sweeps.log").read_text().splitlines()
    assert len(lines) == len(PARTITIONS[PLAIN_PARTITION]) * 6
    for line in lines:
        words = line.split()
        out = Path(words[words.index("--out") + 1])
        assert out.parent.parent == tmp_path / "runs" / "fedssyn_table1" / PLAIN_PARTITION
        assert f"data.partition={PLAIN_PARTITION}" in words
        sets = {words[k + 1] for k, word in enumerate(words) if word == "--set"}
        assert {s for s in sets if s.startswith("data.")} <= set(COLUMNS[out.parent.name].overrides(3000, "dirichlet"))


def test_a_column_the_partition_does_not_run_or_an_unknown_partition_is_one_line(tmp_path):
    done = run(tmp_path, "--partition", PLAIN_PARTITION, "n100_a01")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "unknown column n100_a01 for partition dirichlet (a01, a001, c04_a01, c04_a001, n40_a01)"
    ]
    done = run(tmp_path, "--partition", "iid")
    assert (done.returncode, done.stderr.strip()) == (2, "unknown partition iid (dirichlet-fedssyn, dirichlet)")
    assert not (tmp_path / "sweeps.log").exists()
