"""Fig. 2(a)'s claim (sims/quadratic/noise.py): the reached error, shuffling's gain and the verdict by the one rule."""

from __future__ import annotations

import numpy as np
import pytest

from sims.quadratic.experiment import Config, run_panel_a
from sims.quadratic.noise import gains, panel_a_claim, reached


def curves(floors: np.ndarray, rounds: int = 20) -> np.ndarray:
    """Error curves (levels × seeds × P × rounds + 1) that fall from 1 to ``floors`` (levels × seeds × P) by the
    last tenth of the rounds and stay there."""
    t = np.minimum(np.arange(rounds + 1) / (0.9 * rounds), 1.0)
    return 1.0 + (floors[..., None] - 1.0) * t


def test_reached_is_the_mean_of_the_last_tenth_and_the_gain_is_one_less_the_ratio_to_p_0():
    errors = np.arange(21.0)[None, :]
    assert reached(errors)[0] == pytest.approx(19.5)  # rounds 19 and 20 (2 of 21)
    floors = np.array([[[0.5, 0.25, 0.1]]])
    assert np.allclose(gains(curves(floors)), [[[0.0, 0.5, 0.8]]])


def test_a_gain_falling_with_noise_beyond_the_spread_is_held_and_rising_is_contradicted():
    seeds = np.array([1.0, 1.02, 0.98])[None, :, None]
    falling = np.array([[0.5, 0.1], [0.5, 0.25]])[:, None, :] * seeds  # gains 80 % then 50 %
    verdict, text = panel_a_claim([0.0, 10.0], [0.0, 0.3], curves(falling))
    assert verdict == "held" and "80.0 %, 50.0 %" in text and "1 of 1" in text
    verdict, text = panel_a_claim([0.0, 10.0], [0.0, 0.3], curves(falling[::-1]))
    assert verdict == "contradicted" and "higher beyond it at p = 0.3, σ² 0 vs 10" in text


def test_one_seed_is_not_resolved_and_p_0_must_come_first():
    floors = np.array([[0.5, 0.1], [0.5, 0.25]])[:, None, :]
    assert panel_a_claim([0.0, 1.0], [0.0, 0.3], curves(floors))[0] == "not resolved"
    with pytest.raises(ValueError, match="p = 0 first"):
        panel_a_claim([0.0, 1.0], [0.3, 0.0], curves(floors))


def test_panel_a_keeps_each_seed_whose_mean_is_the_curve_it_draws():
    config = Config(sigma2_levels=(0.0, 1.0), p_a=(0.0, 0.5), rounds_a=5, seeds=2)
    panel = run_panel_a(config)
    assert panel["by_seed"].shape == (2, 2, 2, 6)
    assert np.array_equal(panel["by_seed"].mean(axis=1), panel["errors"])
