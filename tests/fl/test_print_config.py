"""``python -m fl.run --print-config`` (issue 68, item 1): the resolved config as TOML, every key with its value and
the defaults included, of --config and --set (or of a run folder), exits 0 and runs nothing; read back, it is the
same config; a bad key is the usual one line."""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import pytest

from fl.config import SECTIONS, algorithm_fields, load_config
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error
from tests.fl.test_run import base_args

ROOT = Path(__file__).resolve().parents[2]
ROOT_CONFIG = "configs/fmnist_quick.toml"


def printed(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(["--print-config", *argv]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_print_config_gives_every_key_with_its_value_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may appear here (results/runs/default)
    text = printed(["--set", "algorithm.name='fedprox'", "--set", "train.rounds=7", "--set", "method.name='fedcog'"],
                   capsys)  # fmt: skip
    tree = tomllib.loads(text)
    assert list(tree) == ["data", "model", "algorithm", "train", "method", "log"]
    for section, cls in SECTIONS.items():
        assert list(tree[section]) == [f.name for f in fields(cls)]  # every key, in the dataclass's order
    assert tree["train"]["rounds"] == 7 and tree["train"]["lr"] == [0.05] and tree["data"]["p"] == 0.0
    assert tree["algorithm"] == {"name": "fedprox", "mu": algorithm_fields({"name": "fedprox"})["mu"]}
    config = load_config(None, ["algorithm.name='fedprox'", "train.rounds=7", "method.name='fedcog'"])
    assert set(tree["method"]) == set(config.method) and tree["method"]["name"] == "fedcog"
    assert not any(tmp_path.iterdir())


def test_the_printed_config_read_back_is_the_same_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = printed(["--config", ROOT_CONFIG, "--set", "data.p=0.25", "--device", "cpu"], capsys)
    (tmp_path / "resolved.toml").write_text(text)
    again = load_config(tmp_path / "resolved.toml")
    config = load_config(ROOT_CONFIG, ["data.p=0.25", "train.device='cpu'"])
    # the same run: every key equal (the algorithm's defaults are now written out, which names no other value)
    assert again.to_dict() | {"algorithm": None} == config.to_dict() | {"algorithm": None}
    assert algorithm_fields(again.algorithm) == algorithm_fields(config.algorithm)
    assert printed(["--config", str(tmp_path / "resolved.toml")], capsys) == text  # a fixed point


def test_print_config_of_a_run_folder_and_of_its_extension(cifar_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", "train.rounds=2")) == 0
    assert tomllib.loads(printed(["--resume", str(out)], capsys))["train"]["rounds"] == 2
    assert tomllib.loads(printed(["--resume", str(out), "--set", "train.rounds=5"], capsys))["train"]["rounds"] == 5


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--set", "train.roundz=3"], "train.roundz"),
        (["--set", "data.p=2"], "data.p"),
        (["--config", "missing.toml"], "missing.toml"),
        (["--out", "somewhere"], "--print-config prints a config and runs nothing: drop --out"),
        (["--compare", "a", "b"], "drop --compare"),
    ],
)
def test_a_bad_key_or_flag_is_one_line(tmp_path, capsys, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    assert_one_line_config_error(["--print-config", *argv], said, capsys)
    assert not any(tmp_path.iterdir())
