"""A plug-in's own failure is the plug-in's, in one line (theory.errors.user_code_failure through theory.cli.guarded):
a model whose __init__ raises, a model with no parameters or the wrong number of logits, an algorithm whose check()
raises, a correction() that calls .item() under the batched backend, a partitioner that raises."""

from __future__ import annotations

import pytest

from fl.run import main
from tests.fl.conftest import plugin_folder
from tests.fl.test_run import base_args

CODE = """
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from fl.algorithms import Algorithm
from fl.models import SplitModel


class Raising(SplitModel):
    def __init__(self, in_shape, n_classes):
        raise RuntimeError("cannot build\\nsecond line")


class Empty(SplitModel):
    def __init__(self, in_shape, n_classes):
        super().__init__(in_shape, n_classes)
        self.feature_dim = 4
        self.body = nn.Flatten()
        self.head = nn.Identity()


class Seven(SplitModel):
    def __init__(self, in_shape, n_classes):
        super().__init__(in_shape, n_classes)
        self.feature_dim = 8
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(self.in_shape)), 8))
        self.head = nn.Linear(8, 7)


@dataclass(frozen=True)
class Checky(Algorithm):
    name: ClassVar[str] = "checky"

    def check(self):
        raise KeyError("mu")


@dataclass(frozen=True)
class Itemy(Algorithm):
    name: ClassVar[str] = "itemy"

    def correction(self, w, ctx):
        return w * float((w - ctx.x).norm().item())


def failing(labels, n_clients, rng):
    raise ZeroDivisionError("no clients")
"""


@pytest.fixture()
def mine(tmp_path, monkeypatch):
    return plugin_folder(tmp_path, monkeypatch, {"failing": CODE})


@pytest.mark.parametrize(
    "settings, said",
    [
        (["model.name='failing:Raising'"], "plug-in failing:Raising failed in __init__ (failing.py:"),
        (["model.name='failing:Empty'"], "model failing:Empty: it has no trainable parameters"),
        (["model.name='failing:Seven'"], "output of shape (2, 7) for a batch of 2, expected (2, 10) logits"),
        (["algorithm.name='failing:Checky'"], "plug-in failing:Checky failed in check (failing.py:"),
        (["algorithm.name='failing:Itemy'", "train.backend='batched'"], "plug-in failing:Itemy failed in correction"),
        (["data.partition='failing:failing'"], "ZeroDivisionError: no clients"),
    ],
)  # fmt: skip
def test_a_plugins_failure_is_one_line_naming_it(mine, cifar_root, tmp_path, capsys, settings, said):
    extra = [arg for setting in settings for arg in ("--set", setting)]
    assert main(base_args(cifar_root, tmp_path / "run", *extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
