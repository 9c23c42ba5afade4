"""benchmarks/ddpm_steps.py on a damaged generator cache (issue 69, class 7): a ``--compare`` cache whose key.json
is cut, of another shape, or names a set outside its folder, or whose set is cut or holds other arrays, and a
``--cache`` whose files were damaged, each end in one line naming the file, exit 2, never a traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.benchmarks.test_bench_bad_inputs import load_bench
from tests.benchmarks.test_ddpm_steps import tiny


@pytest.fixture()
def trained(cifar_root, tmp_path):
    """A cache with the smallest client's generator and set (3 steps), and the arguments that made it."""
    module = load_bench("ddpm_steps")
    args = [*tiny(cifar_root), "--min-steps", "3", "--threads", "1"]
    cache = tmp_path / "cache"
    assert module.main([*args, "--cache", str(cache), "--out", str(tmp_path / "first.json")]) == 0
    return module, args, cache


def damage(folder, how: str):
    key = folder / "key.json"
    keys = json.loads(key.read_text())
    (name,) = keys["sets"]
    if how == "key cut":
        key.write_text(key.read_text()[:20])
    elif how == "key a list":
        key.write_text("[1, 2]")
    elif how == "key without sets":
        key.write_text(json.dumps({"generator": keys["generator"], "sets": [name]}))
    elif how == "set outside":
        key.write_text(json.dumps(keys | {"sets": {"../../elsewhere.npz": keys["sets"][name]}}))
    elif how == "set cut":
        (folder / name).write_bytes((folder / name).read_bytes()[:100])
    elif how == "set without y":
        import numpy as np

        with np.load(folder / name) as held:
            x = held["x"]
        with open(folder / name, "wb") as handle:
            np.savez(handle, x=x)
    return folder / ("key.json" if how.startswith("key") or how == "set outside" else name)


HOWS = ["key cut", "key a list", "key without sets", "set outside", "set cut", "set without y"]


@pytest.mark.parametrize("how", HOWS)
def test_a_damaged_compare_cache_is_one_line_naming_the_file(trained, tmp_path, capsys, how):
    module, args, cache = trained
    other = tmp_path / "other"
    shutil.copytree(cache, other)
    (folder,) = [p for p in other.iterdir() if p.is_dir() and (p / "key.json").is_file()]
    named = damage(folder, how)
    capsys.readouterr()
    out = tmp_path / "steps.json"
    with pytest.raises(SystemExit) as done:
        module.main([*args, "--cache", str(cache), "--compare", str(other), "--out", str(out)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and str(named) in err, err
    assert not out.exists()


@pytest.mark.parametrize("how", ["key cut", "set cut"])
def test_a_damaged_training_cache_is_one_line_naming_it(trained, tmp_path, capsys, how):
    module, args, cache = trained
    (folder,) = [p for p in cache.iterdir() if p.is_dir() and (p / "key.json").is_file()]
    damage(folder, how)
    capsys.readouterr()
    out = tmp_path / "steps.json"
    with pytest.raises(SystemExit) as done:
        module.main([*args, "--cache", str(cache), "--out", str(out)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and str(cache) in err, err
    assert not out.exists()
