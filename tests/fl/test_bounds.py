"""Data, checkpoints and numbers bounded (Hardening IV, 6): an npz asking for 10**12 classes, an empty test set, a
cut npz, a checkpoint with a wrong-size, float64 or non-finite x or a bad round, an overflow, a divergence blamed on
the setting that caused it, train.rounds past any run's end: each one line, nothing allocated past the machine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl.checkpoints import load_checkpoint, save_checkpoint
from fl.run import main
from theory.errors import InputError


@pytest.fixture()
def npz(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (200, 1, 8, 8)).astype(np.uint8), rng.integers(0, 3, 200)

    def write(name: str, **arrays) -> str:
        path = tmp_path / f"{name}.npz"
        np.savez(path, **({"x_train": x, "y_train": y} | arrays))
        return str(path)

    return write


def args(data: str, out, *extra: str) -> list[str]:
    settings = [f"data.dataset='npz:{data}'", "data.clients=2", "data.min_size=1", "model.name='mlp'",
                "train.rounds=2", "train.checkpoint_every=1", *extra]  # fmt: skip
    return [*(a for s in settings for a in ("--set", s)), "--out", str(out), "--quiet"]


def one_line(capsys, said: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


@pytest.mark.parametrize(
    "arrays, said",
    [
        ({"y_train": np.where(np.arange(200) % 2, 2**40, 0)}, "over the 100000 classes"),
        ({"n_classes": np.array(10**12)}, "n_classes is 1000000000000, over the 100000 classes"),
        ({"x_test": np.zeros((0, 1, 8, 8), np.uint8), "y_test": np.zeros(0, int)}, "no test images"),
    ],
)  # fmt: skip
def test_data_that_would_ask_too_much_or_divide_by_zero_is_one_line(npz, tmp_path, capsys, arrays, said):
    assert main(args(npz("d", **arrays), tmp_path / "run")) == 2
    one_line(capsys, said)


def test_a_cut_npz_is_one_line(npz, tmp_path, capsys):
    whole = npz("whole")
    cut = tmp_path / "cut.npz"
    cut.write_bytes(open(whole, "rb").read()[:300])
    assert main(args(str(cut), tmp_path / "run")) == 2
    one_line(capsys, "not a readable .npz")


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda p: p | {"x": p["x"][:-1]}, "values, the run's model"),
        (lambda p: p | {"x": p["x"].double()}, "torch.float64 values"),
        (lambda p: p | {"x": p["x"] * float("nan")}, "not finite"),
        (lambda p: p | {"round": -3}, "its round is -3"),
        (lambda p: p | {"round": "two"}, "its round is 'two'"),
        (lambda p: p | {"lr": float("inf")}, "its lr is inf"),
    ],
)  # fmt: skip
def test_a_checkpoint_is_trusted_only_field_by_field(npz, tmp_path, capsys, change, said):
    out = tmp_path / "run"
    assert main(args(npz("d"), out, "train.rounds=3")) == 0
    payload = torch.load(out / "checkpoint.pt", weights_only=True)
    torch.save(change(payload), out / "checkpoint.pt")
    capsys.readouterr()
    assert main(["--resume", str(out), "--quiet"]) == 2
    one_line(capsys, said)
    with pytest.raises(InputError, match="not a checkpoint this run can continue"):
        load_checkpoint(out / "checkpoint.pt", torch.device("cpu"), like=payload["x"])
    assert save_checkpoint  # the writer is the one fl.run uses (its fields are what is checked)


@pytest.mark.parametrize(
    "extra, said",
    [
        (["train.weight_decay=1e300"], "overflowed (a value past float range): the run diverged; the likely cause: "
                                        "train.weight_decay = 1e+300"),
        (["train.optimizer='adam'", "train.lr=1e300"], "the likely cause: lower train.lr"),
        (["train.rounds=100000000000000000000"], "train.rounds: must be <= 1,000,000"),
    ],
)  # fmt: skip
def test_numbers_past_float_range_are_one_line_naming_the_setting(npz, tmp_path, capsys, extra, said):
    assert main(args(npz("d"), tmp_path / "run", *extra)) == 2
    one_line(capsys, said)


def test_a_divergence_names_the_setting_it_likely_came_from(npz, tmp_path, capsys):
    assert main(args(npz("d"), tmp_path / "run", "algorithm.name='fedprox'", "algorithm.mu=1e30")) == 0
    assert "the likely cause: algorithm.mu = 1e+30, far out of the usual range" in capsys.readouterr().out
