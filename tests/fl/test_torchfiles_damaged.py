"""fl.torchfiles.load_safely: a file of damaged bytes is one line, whatever torch.load's zip and pickle readers
raise first (sweep 5 case 109 met an IndexError from random bytes), and no warning of an odd pickle protocol."""

import warnings

import numpy as np
import pytest

from fl.torchfiles import load_safely
from theory.errors import InputError


@pytest.mark.parametrize("seed", [0, 17, 54, 62, 941])  # UnpicklingError, IndexError, UnicodeDecodeError, KeyError,
def test_random_bytes_are_one_line(tmp_path, seed):  # RuntimeError from torch.load (numpy 2's default_rng bytes)
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(np.random.default_rng(seed).bytes(5000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="not a checkpoint that loads safely") as error:
            load_safely(path, "checkpoint", "start over")
    assert "\n" not in str(error.value)
