"""A damaged synthetic-data cache and a bad ñ (issue 44, class 7: the last tracebacks), now one line: ``method.n_tilde
= 0`` (it failed while drawing the samples picture) is refused when the config is read; a damaged cached synthetic
set (an object array, another shape, labels out of range, a torn file) and a crafted or damaged generator
checkpoint name the file, and the checkpoint's line does not pass on torch's advice to load it with
``weights_only=False``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fl.federation import split_clients
from fl.synthesis.fedssyn import FedssynConfig, synthesize
from theory.errors import InputError


def test_n_tilde_zero_is_refused_when_the_config_is_read(tmp_path, capsys):
    from fl.run import main

    argv = ["--set", "method.name='fedssyn'", "--set", "method.n_tilde=0", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config method.n_tilde: must be >= 1" in err
    assert not (tmp_path / "run").exists()


def cached_set(data, tmp_path: Path, n_tilde: int = 6) -> tuple[list, FedssynConfig, Path]:
    """One client's generator (the stand-in) trained and sampled into ``tmp_path``: (its D_i, config, set file)."""
    _, _, original = split_clients(data, "iid", 1, np.random.default_rng(0), val_fraction=0.0)
    config = FedssynConfig(n_tilde=n_tilde, epochs=1)
    synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    (folder,) = tmp_path.iterdir()
    (npz,) = folder.glob("synthetic-*.npz")
    return original, config, npz


def synthesize_again(data, original, config, tmp_path):
    return synthesize(data, original, config, 0, tmp_path, log=lambda s: None)


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda x, y: {"x": np.array([object()] * len(y), dtype=object), "y": y}, "Object arrays cannot be loaded"),
        (lambda x, y: {"x": x[:, :, :4], "y": y}, "expected uint8 (6, 1, 8, 8)"),
        (lambda x, y: {"x": x.astype(np.float64), "y": y}, "images of float64"),
        (lambda x, y: {"x": x, "y": y + 10}, "labels from 10 to 13, expected 0 to 3"),
        (lambda x, y: {"x": x, "y": -y - 1}, "expected 0 to 3"),
        (lambda x, y: {"x": x, "y": y[:-1]}, "expected 6 whole numbers"),
        (lambda x, y: {"x": x, "y": y.astype(np.float32)}, "labels of float32"),
        (lambda x, y: {"x": x}, "KeyError"),
        (None, "BadZipFile"),
    ],
    ids=[
        "object array",
        "wrong shape",
        "float images",
        "labels too high",
        "negative labels",
        "too few labels",
        "float labels",
        "no labels",
        "torn file",
    ],
)
def test_a_damaged_cached_set_is_one_line_naming_it(damage, named, fake_generator, tiny_dataset, tmp_path):
    data = tiny_dataset()
    original, config, npz = cached_set(data, tmp_path)
    with np.load(npz) as saved:
        x, y = saved["x"], saved["y"]
    if damage is None:
        npz.write_bytes(npz.read_bytes()[:40])
    else:
        np.savez_compressed(npz, **damage(x, y))
    with pytest.raises(InputError) as error:
        synthesize_again(data, original, config, tmp_path)
    text = str(error.value)
    assert text.startswith(f"{npz}: damaged synthetic set (") and named in text and "\n" not in text
    assert "to sample it again" in text


def test_a_damaged_set_info_is_one_line(fake_generator, tiny_dataset, tmp_path):
    data = tiny_dataset()
    original, config, npz = cached_set(data, tmp_path)
    npz.with_suffix(".json").write_text("[1, 2")
    with pytest.raises(InputError, match="damaged synthetic set info"):
        synthesize_again(data, original, config, tmp_path)


@pytest.mark.parametrize("name", ["key.json", "generator.json"])
@pytest.mark.parametrize("text", ["[1, 2", "[1, 2]", '{"sets": "\x01'])
def test_a_damaged_cache_record_is_one_line_naming_it(fake_generator, tiny_dataset, tmp_path, name, text):
    """Fourth sweep, cases 36-37: a generator cache's key.json or generator.json torn, not an object or with a
    control character: one line naming the file, never a JSONDecodeError or TypeError."""
    data = tiny_dataset()
    original, config, npz = cached_set(data, tmp_path)
    (npz.parent / name).write_text(text)
    with pytest.raises(InputError, match=name):
        synthesize_again(data, original, config, tmp_path)


class Crafted:
    """A pickle that would run a command on load (it touches ``marker``): what a weights-only load must refuse."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("content", ["crafted", "garbage", "torn", "other tensors"])
def test_a_crafted_or_damaged_generator_checkpoint_is_one_line_without_torchs_advice(
    content, fake_generator, tiny_dataset, tmp_path
):
    data = tiny_dataset()
    original, _, _ = cached_set(data, tmp_path / "cache")
    (folder,) = (tmp_path / "cache").iterdir()
    weights = folder / "generator_epoch1.pt"
    marker = tmp_path / "ran"
    if content == "crafted":
        torch.save({"means": Crafted(marker)}, weights)
    elif content == "garbage":
        weights.write_bytes(b"not a checkpoint at all")
    elif content == "torn":
        weights.write_bytes(weights.read_bytes()[:100])
    else:
        torch.save({"something": torch.zeros(2)}, weights)
    with pytest.raises(InputError) as error:  # another ñ: sampled anew from the checkpoint
        synthesize_again(data, original, FedssynConfig(n_tilde=7, epochs=1), tmp_path / "cache")
    text = str(error.value)
    assert text.startswith(f"{weights}: ") and f"delete {folder}" in text and "\n" not in text
    assert "weights_only" not in text and "trusted source" not in text and "torch.load" not in text
    assert not marker.exists()


def test_fl_run_on_a_damaged_cache_is_one_line_exit_2(fake_generator, tmp_path, monkeypatch, tiny_dataset, capsys):
    import fl.experiment as experiment_module
    import fl.run as run_module

    data = tiny_dataset(n_per_class=20, n_classes=10)
    monkeypatch.setattr(experiment_module, "load", lambda name, root=None: data)
    args = [
        "--set", "data.partition='iid'", "--set", "data.clients=2", "--set", "model.name='mlp'",
        "--set", "train.rounds=1", "--set", "train.device='cpu'", "--set", "method.name='fedssyn'",
        "--set", "method.n_tilde=6", "--set", "method.epochs=1",
        "--set", f"method.cache_dir='{tmp_path / 'cache'}'", "--quiet",
    ]  # fmt: skip
    assert run_module.main([*args, "--out", str(tmp_path / "first")]) == 0
    npz = sorted((tmp_path / "cache").glob("client0-*/synthetic-*.npz"))[0]
    with np.load(npz) as saved:
        np.savez_compressed(npz, x=saved["x"], y=saved["y"] + 100)
    capsys.readouterr()
    assert run_module.main([*args, "--out", str(tmp_path / "second")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m fl.run: error: {npz}: damaged synthetic set")
    assert json.loads((tmp_path / "first" / "summary.json").read_text())["rounds"] == 1
