"""Your own data's layout and size (issue 68, item 5): channels-last images (N, H, W, C) in an npz or from a plug-in
are refused in one line that names the transpose, whatever the model; a run whose clients hold fewer than a handful
of held-out samples (fl.experiment.FEW_HELD_OUT) says so in one note and runs as before."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fl.data import load
from fl.data.custom import channels_last
from fl.data.formats import DataError
from fl.experiment import FEW_HELD_OUT
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error, plugin_folder
from tests.fl.data.test_custom import args, arrays, write
from tests.fl.test_run import base_args, metrics


@pytest.mark.parametrize(
    ("shape", "last"),
    [
        ((5, 32, 32, 3), True),
        ((5, 28, 28, 1), True),
        ((5, 16, 16, 4), True),
        ((5, 3, 32, 32), False),  # channels first
        ((5, 1, 28, 28), False),
        ((5, 8, 3, 3), False),  # 8 channels of 3 x 3: W is no larger than the last axis
        ((5, 2, 2, 1), True),
        ((5, 32, 32), False),
    ],
)
def test_channels_last_is_the_last_axis_of_1_3_or_4_shorter_than_height_and_width(shape, last):
    assert channels_last(shape) is last


def channels_last_arrays(model_channels: int = 3) -> dict:
    data = arrays(channels=True)
    x = np.repeat(data["x_train"], model_channels, axis=1)  # (N, C, 8, 8)
    x_test = np.repeat(data["x_test"][:, None], model_channels, axis=1)
    return data | {"x_train": x.transpose(0, 2, 3, 1), "x_test": x_test.transpose(0, 2, 3, 1)}


@pytest.mark.parametrize("model", ["mlp", "hfmds-cnn"])
def test_an_npz_of_channels_last_images_is_one_line_naming_the_transpose(tmp_path, capsys, model):
    path = write(tmp_path / "nhwc.npz", **channels_last_arrays())
    out = tmp_path / "run"
    argv = args(f"npz:{path}", out, "--set", f"model.name='{model}'")
    assert_one_line_config_error(argv, "x_train.transpose(0, 3, 1, 2)", capsys)
    assert not (out / "metrics.jsonl").exists()
    with pytest.raises(DataError, match=r"looks channels-last \(N, H, W, C\) with C = 3"):
        load(f"npz:{path}")


def test_a_plugin_returning_channels_last_images_is_refused_alike(tmp_path, monkeypatch):
    np.savez(tmp_path / "arrays.npz", **channels_last_arrays(1))
    plugin_folder(tmp_path, monkeypatch, {"mydata": f"""
        import numpy as np

        def arrays():
            return dict(np.load({str(tmp_path / "arrays.npz")!r}))
    """})  # fmt: skip
    with pytest.raises(DataError, match=r"x_train\.transpose\(0, 3, 1, 2\)"):
        load("mydata:arrays")


def test_the_same_images_channels_first_run(tmp_path):
    data = channels_last_arrays()
    data |= {"x_train": data["x_train"].transpose(0, 3, 1, 2), "x_test": data["x_test"].transpose(0, 3, 1, 2)}
    path = write(tmp_path / "nchw.npz", **data)
    assert main(args(f"npz:{path}", tmp_path / "run")) == 0


def test_clients_with_a_handful_of_held_out_samples_are_named_in_one_note(cifar_root, tmp_path, capsys):
    """4 clients of 50 images, val_fraction 0.05: 2 held-out samples each, under FEW_HELD_OUT = 5. A note, not an
    error: the run's numbers are those it gives without per-client evaluation's note."""
    assert FEW_HELD_OUT == 5
    out = tmp_path / "run"
    extra = ("--set", "train.client_eval_every=2", "--set", "data.val_fraction=0.05", "--set", "train.rounds=2")
    assert main(base_args(cifar_root, out, *extra)) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "held-out" in line]
    assert len(notes) == 1 and notes[0].startswith("note: 4 of 4 clients hold fewer than 5 held-out samples"), notes
    assert "client (samples): 0 (2), 1 (2), 2 (2), 3 (2)" in notes[0]
    assert json.loads((out / "summary.json").read_text())["rounds"] == 2
    enough = tmp_path / "enough"
    assert main(base_args(cifar_root, enough, *extra[:2], "--set", "data.val_fraction=0.2", *extra[4:])) == 0
    assert "held-out" not in capsys.readouterr().err  # 8 each: nothing said
    without = tmp_path / "without"
    assert main(base_args(cifar_root, without, *extra[2:])) == 0  # no per-client evaluation: the split is unused
    assert "held-out" not in capsys.readouterr().err
    assert [{k: v for k, v in r.items() if k != "client_accuracy"} for r in metrics(out)] == metrics(without)
