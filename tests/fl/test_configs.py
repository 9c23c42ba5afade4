"""Every committed config loads; every paper config names the aggregation weighting its paper uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl.config import load_config, tomllib

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").rglob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads(path):
    load_config(path)


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.parent.name == "paper"], ids=lambda p: p.name)
def test_paper_config_states_its_weighting(path):
    """The default (size-weighted) differs from Fedssyn's Algorithm II, HFMDs' eq. 4 and DynaFed's Algorithm 2."""
    assert "weighting" in tomllib.loads(path.read_text()).get("train", {})


def test_config_json_records_every_field_of_the_algorithm_beside_the_keys_set():
    from fl.config import from_dict, load_config

    config = load_config(None, ["algorithm.name='feddyn'"])
    tree = config.to_dict()
    assert tree["algorithm"] == {"name": "feddyn"}  # what was set: the run's identity
    assert set(tree["algorithm_fields"]) > {"name"} and all(k in tree["algorithm_fields"] for k in tree["algorithm"])
    assert "algorithm_fields" not in config.identity()
    assert from_dict(tree) == config  # read back from config.json: the same run
