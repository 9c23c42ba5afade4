"""Environment variables select nothing numeric (issue #67): a run's numbers come from its config. The variables the
package reads say where things are (data, a run store), how many processes work, how much GPU memory a process may
take, or which process role runs: none changes a number a run reports (workers: tests/fl/test_workers*.py show it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "SHUFFLEFL_DATA": "where the data sets are found (their identity is checked by provenance)",
    "SHUFFLEFL_RUNS": "where a run store is",
    "SHUFFLEFL_WORKERS": "how many worker processes train clients (numbers equal for any count)",
    "SHUFFLEFL_GPU_GIB": "the GPU memory a lease's scheduler admitted a process with",
    "SHUFFLEFL_FLOWER_SUPERVISED": "which process of the Flower app this is",
}
REFUSED = {  # chose a numeric path once; now a config key does, and the variable set is refused in one line
    "SHUFFLEFL_MATCHING": "method.matching",
    "SHUFFLEFL_GRAPHS": "train.graphs",
}


def test_the_package_reads_no_environment_variable_that_selects_a_numeric_path():
    named = {
        (name, path.relative_to(ROOT))
        for package in ("fl", "lab", "theory", "sims", "figures")
        for path in (ROOT / package).rglob("*.py")
        for name in re.findall(r"[\"'](SHUFFLEFL_[A-Z_]+)[\"']", path.read_text())
    }
    unknown = sorted(f"{name} ({path})" for name, path in named if name not in ALLOWED and name not in REFUSED)
    assert not unknown, f"environment variables that may select numbers: {unknown}; put them in the run's config"


def test_a_variable_that_once_chose_a_numeric_path_is_refused_naming_its_key(monkeypatch):
    from fl.config import load_config
    from fl.graphs import graphs_setting
    from fl.methods.dynafed import DynaFed
    from theory.errors import InputError

    monkeypatch.setenv("SHUFFLEFL_GRAPHS", "off")
    with pytest.raises(InputError, match=r"train\.graphs"):
        graphs_setting()
    monkeypatch.delenv("SHUFFLEFL_GRAPHS")
    monkeypatch.setenv("SHUFFLEFL_MATCHING", "reference")
    with pytest.raises(InputError, match=r"method\.matching"):
        DynaFed().check()
    assert load_config(None, ["train.graphs='off'"]).train.graphs == "off"
