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
