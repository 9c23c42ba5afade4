"""A train.lr grid is bounded before any work (issue #69, sweep case 68): over fl.config.MAX_LR_GRID step sizes is
one line naming the key, the count and the bound; at the bound the config loads."""

import pytest

from fl.config import MAX_LR_GRID, load_config
from theory.errors import InputError


def test_a_grid_over_the_bound_is_refused_in_one_line():
    grid = "[" + ",".join(["0.05"] * (MAX_LR_GRID + 1)) + "]"
    with pytest.raises(InputError, match=r"config train\.lr: a grid of 1,001 step sizes is over the 1,000") as error:
        load_config(None, [f"train.lr={grid}"], notes=[])
    assert "\n" not in str(error.value)


def test_a_grid_at_the_bound_loads():
    grid = "[" + ",".join(["0.05"] * MAX_LR_GRID) + "]"
    assert len(load_config(None, [f"train.lr={grid}"], notes=[]).train.lr) == MAX_LR_GRID
