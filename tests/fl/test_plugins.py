"""Plug-ins by import path (fl.plugins): a method and an algorithm written outside the package run through fl.run
as "module:Class", resume bit for bit, and a changed plug-in stops --resume in one line; provenance.json names the
plug-in's hash and the built-in code_version stays ours. A model, a partitioner and a dataset by import path too,
and every malformed plug-in is one line at config time."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass

import pytest

from fl import provenance
from fl.algorithms import Algorithm
from fl.plugins import digest
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at
from tests.fl.test_run import base_args, same_run
from theory.errors import InputError

METHOD = '''
"""A method of a user's own: Gaussian noise of scale sigma on the server model after aggregation."""
from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.methods import Method


@dataclass(frozen=True)
class Noisy(Method):
    name: ClassVar[str] = "noisy"
    sigma: float = 0.0

    def after_aggregate(self, s):
        return s.x + self.sigma * torch.randn(s.x.shape, generator=s.generator).to(s.x)


@dataclass(frozen=True)
class Bare(Method):
    sigma: float


class Plain(Method):
    sigma = 1.0
'''

ALGORITHM = '''
from dataclasses import dataclass
from typing import ClassVar

from fl.algorithms import Algorithm


@dataclass(frozen=True)
class Damped(Algorithm):
    """FedAvg with a server step size and a proximal pull (server_lr: η_g, mu: μ)."""

    name: ClassVar[str] = "damped"
    server_lr: float = 0.5
    mu: float = 0.01

    def correction(self, w, ctx):
        return self.mu * (w - ctx.x)

    def server_update(self, x, server, ys, weights, deltas, n_clients):
        return x + self.server_lr * (weights @ ys - x), server


@dataclass(frozen=True)
class Worded(Algorithm):
    style: str = "plain"
'''

OTHERS = '''
import numpy as np
from torch import nn

from fl.models import SplitModel


class Tiny(SplitModel):
    def __init__(self, in_shape, n_classes):
        super().__init__(in_shape, n_classes)
        self.feature_dim = 16
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(self.in_shape)), 16), nn.ReLU())
        self.head = nn.Linear(16, n_classes)


def halves(labels, n_clients, rng, alpha=1.0):
    """Client k gets every n_clients-th sample from k on (alpha is taken to show a config key reaches it)."""
    assert alpha == 0.5
    return [np.arange(k, len(labels), n_clients) for k in range(n_clients)]


def stripes():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 90)
    x = np.clip(rng.normal(60 + 50 * y[:, None, None], 20, (90, 8, 8)), 0, 255).astype(np.uint8)
    return {"x_train": x, "y_train": y}
'''


@pytest.fixture()
def plugins(tmp_path, monkeypatch):
    """A folder outside the package holding mymethod.py, myalgo.py and mine.py, the working directory."""
    folder = tmp_path / "plug"
    folder.mkdir()
    for name, text in (("mymethod", METHOD), ("myalgo", ALGORITHM), ("mine", OTHERS)):
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
        monkeypatch.delitem(sys.modules, name, raising=False)  # another test's folder's module of that name
    monkeypatch.setattr(sys, "path", list(sys.path))  # fl.plugins appends the working directory: undone after
    monkeypatch.chdir(folder)
    return folder


def test_a_plugin_method_and_algorithm_run_resume_and_a_changed_plugin_is_refused(cifar_root, plugins, capsys,
                                                                                    monkeypatch):  # fmt: skip
    code_before = provenance.code_version.__wrapped__()
    extra = ("--set", "method.name='mymethod:Noisy'", "--set", "method.sigma=0.001", "--set",
             "algorithm.name='myalgo:Damped'", "--set", "algorithm.mu=0.1", "--set", "train.workers=2")  # fmt: skip
    straight, broken = plugins.parent / "straight", plugins.parent / "broken"
    assert main(base_args(cifar_root, straight, *extra)) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, broken, *extra)) == 2
    resume()
    capsys.readouterr()

    source = (plugins / "mymethod.py").read_text()
    (plugins / "mymethod.py").write_text(source.replace("s.x + self.sigma", "s.x - self.sigma"))
    assert main(["--resume", str(broken), "--quiet"]) == 2  # changed: refused in one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plug-in mymethod:Noisy (method.name)" in err and "--accept-code-change" in err

    (plugins / "mymethod.py").write_text(source + "# a comment changes no code\n")
    assert main(["--resume", str(broken), "--quiet"]) == 0  # unchanged code: accepted
    same_run(straight, broken)

    entry = json.loads((broken / "provenance.json").read_text())
    assert entry["plugins"]["method.name"]["sha256"] == digest([plugins / "mymethod.py"])
    assert entry["plugins"]["algorithm.name"]["sha256"] == digest([plugins / "myalgo.py"])
    assert entry["code_version"] == code_before == provenance.code_version.__wrapped__()  # ours, unchanged
    assert json.loads((broken / "config.json").read_text())["method"] == {"name": "mymethod:Noisy", "sigma": 0.001}

    (plugins / "mymethod.py").write_text(source.replace("s.x + self.sigma", "s.x - self.sigma"))
    assert main(["--resume", str(broken), "--quiet", "--accept-code-change"]) == 0  # accepted, and recorded
    changes = json.loads((broken / "provenance.json").read_text())["changes"]
    change = next(c for c in changes if "plugins" in c)
    assert change["round"] == 5 and change["plugins"]["method.name"]["sha256"] == digest([plugins / "mymethod.py"])


def test_a_plugin_model_partitioner_and_dataset(plugins, tmp_path):
    out = tmp_path / "run"
    args = ["--set", "data.dataset='mine:stripes'", "--set", "data.partition='mine:halves'", "--set", "data.alpha=0.5",
            "--set", "data.clients=3", "--set", "model.name='mine:Tiny'", "--set", "train.rounds=2",
            "--set", "train.device='cpu'", "--set", "train.workers=1", "--out", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    entry = json.loads((out / "provenance.json").read_text())
    assert set(entry["plugins"]) == {"data.dataset", "data.partition", "model.name"}
    assert entry["data"]["dataset"].startswith("plugin-") and entry["data"]["train"] == 81
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2


@pytest.mark.parametrize(
    ("setting", "key", "said"),
    [
        ("method.name='nomodule:Thing'", "method.name", "cannot import"),
        ("method.name='mymethod:Missing'", "method.name", "has no 'Missing'"),
        ("method.name='myalgo:Damped'", "method.name", "not a subclass of fl.methods.base.Method"),
        ("method.name='mymethod:Bare'", "method.name", "sigma have no default"),
        ("method.name='mymethod:Plain'", "method.name", "@dataclass"),
        ("method.name='a:b:c'", "method.name", "not a plug-in path"),
        ("algorithm.name='myalgo:Worded'", "algorithm.name", "finite numbers"),
        ("algorithm.name='mymethod:Noisy'", "algorithm.name", "not a subclass of fl.algorithms.base.Algorithm"),
        ("model.name='mymethod:Noisy'", "model.name", "not a subclass of fl.models.SplitModel"),
        ("data.partition='mymethod:Noisy'", "data.partition", "called as f(labels, n_clients, rng"),
        ("data.dataset='mine:missing'", "data.dataset", "has no 'missing'"),
        ("method.name='mymethod:Noisy'\n", "method.sigma", "expected float"),
    ],
)
def test_a_bad_plugin_is_one_line_at_config_time(plugins, tmp_path, capsys, setting, key, said):
    args = ["--set", setting.strip(), "--out", str(tmp_path / "run"), "--quiet"]
    if setting.endswith("\n"):
        args += ["--set", "method.sigma='loud'"]
    assert_one_line_config_error(args, key, capsys)
    assert not (tmp_path / "run").exists()


def test_a_plugin_that_fails_on_import_is_one_line(plugins, tmp_path, capsys):
    (plugins / "broken.py").write_text("raise RuntimeError('no GPU here\\nsecond line')\n")
    assert_one_line_config_error(["--set", "method.name='broken:X'", "--quiet"], "RuntimeError: no GPU here", capsys)


def register(site, package: str, group: str, lines: str) -> None:
    """An installed distribution ``package`` (its dist-info only, in the folder ``site`` on sys.path) whose
    entry_points.txt registers ``lines`` in ``group``."""
    info = site / f"{package}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")


def test_an_installed_plugin_by_its_entry_point_name(plugins, tmp_path, monkeypatch, capsys):
    """A package registering ``noisy = mymethod:Noisy`` in the group shufflefl.methods (and an algorithm in
    shufflefl.algorithms) is named by the short name; config.json records the path, provenance its hash; a built-in
    name stays the built-in even where a package registers it too; two packages registering one name is one line."""
    site = tmp_path / "site"
    register(site, "shufflefl_noisy", "shufflefl.methods", "noisy = mymethod:Noisy\nfedssyn = mymethod:Noisy")
    register(site, "shufflefl_damped", "shufflefl.algorithms", "damped = myalgo:Damped")
    monkeypatch.syspath_prepend(str(site))
    out = tmp_path / "run"
    args = ["--set", "data.dataset='mine:stripes'", "--set", "data.clients=3", "--set", "model.name='mine:Tiny'",
            "--set", "train.rounds=2", "--set", "train.device='cpu'", "--set", "train.workers=1",
            "--set", "method.name='noisy'", "--set", "method.sigma=0.001", "--set", "algorithm.name='damped'",
            "--out", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["method"]["name"] == "mymethod:Noisy" and config["algorithm"]["name"] == "myalgo:Damped"
    entry = json.loads((out / "provenance.json").read_text())
    assert entry["plugins"]["method.name"]["sha256"] == digest([plugins / "mymethod.py"])

    from fl.config import load_config

    capsys.readouterr()
    assert load_config(None, ["method.name=fedssyn"]).method["name"] == "fedssyn"  # the built-in wins
    assert load_config(None, ["method.name=fedssyn"]).method["name"] == "fedssyn"
    err = capsys.readouterr().err  # and says so, once
    assert err.count("is a built-in; the installed plug-in mymethod:Noisy registered under the same name") == 1
    register(site, "shufflefl_other", "shufflefl.methods", "noisy = myalgo:Damped")
    assert_one_line_config_error(["--set", "method.name='noisy'", "--quiet"], "several installed packages", capsys)


def test_the_registered_plugins_are_read_once_while_sys_path_stays_as_it_was(tmp_path, monkeypatch):
    """The ledger's check asks for a config key's entry point ~900 times; the installed distributions' metadata is
    scanned once, and again only where sys.path or one of its folders changed (a distribution installed there)."""
    import importlib.metadata

    import fl.plugins as plugins

    scans = []
    real = importlib.metadata.entry_points

    def counted(**selection):
        scans.append(selection)
        return real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", counted)
    plugins._scan.cache_clear()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    for _ in range(50):
        assert plugins.entry_point("method.name", "noisy") is None
    assert len(scans) == 1
    register(site, "shufflefl_noisy", "shufflefl.methods", "noisy = mymethod:Noisy")
    assert plugins.entry_point("method.name", "noisy") == "mymethod:Noisy" and len(scans) == 2
    assert plugins.entry_point("algorithm.name", "noisy") is None and len(scans) == 3  # a group of its own


HELPED = """
from dataclasses import dataclass
from typing import ClassVar

from fl.methods import Method
from HELPER import SCALE


@dataclass(frozen=True)
class Scaled(Method):
    name: ClassVar[str] = "scaled"

    def after_aggregate(self, s):
        return s.x * SCALE
"""


@pytest.mark.parametrize("layout", ["package", "beside"])
def test_a_change_in_a_helper_the_plugin_imports_stops_a_resume(cifar_root, tmp_path, monkeypatch, capsys, layout):
    """The plug-in's hash covers its own package (myplugins/kd_helper.py beside myplugins/kd.py), or, for a module
    at the top level, the modules beside it that it imports; an installed distribution would count by version."""
    folder = tmp_path / "plug"
    if layout == "package":
        (folder / "myplugins").mkdir(parents=True)
        (folder / "myplugins" / "__init__.py").write_text("")
        (folder / "myplugins" / "kd.py").write_text(textwrap.dedent(HELPED.replace("HELPER", "myplugins.kd_helper")))
        helper, spec, modules = folder / "myplugins" / "kd_helper.py", "myplugins.kd:Scaled", ["myplugins"]
    else:
        folder.mkdir()
        (folder / "scaledmethod.py").write_text(textwrap.dedent(HELPED.replace("HELPER", "scalehelper")))
        helper, spec, modules = folder / "scalehelper.py", "scaledmethod:Scaled", ["scaledmethod", "scalehelper"]
    helper.write_text("SCALE = 1.0\n")
    for name in [m for m in sys.modules if m.split(".")[0] in (*modules, "myplugins.kd_helper")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(folder)
    out = tmp_path / "run"
    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, out, "--set", f"method.name='{spec}'")) == 2
    resume()
    recorded = json.loads((out / "provenance.json").read_text())["plugins"]["method.name"]
    assert str(helper) in recorded["files"]
    helper.write_text("SCALE = 0.5\n")  # a numeric change in the helper alone
    capsys.readouterr()
    assert main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"plug-in {spec} (method.name)" in err and "--accept-code-change" in err


def test_a_sweep_never_reuses_a_finished_run_whose_plugin_changed(cifar_root, plugins, tmp_path, capsys):
    from fl.sweep import main as sweep_main

    out = tmp_path / "sweep"
    args = base_args(cifar_root, out, "--set", "method.name='mymethod:Noisy'")  # fl.run's flags suit fl.sweep too
    assert sweep_main([*args, "--seeds", "0"]) == 0
    source = (plugins / "mymethod.py").read_text()
    (plugins / "mymethod.py").write_text(source.replace("s.x + self.sigma", "s.x - self.sigma"))
    capsys.readouterr()
    assert sweep_main([*args, "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plug-in mymethod:Noisy (method.name) is code" in err and "since this run" in err


def test_an_algorithm_written_for_the_old_server_update_is_refused_in_one_line():
    """server_update(x, server, ys, weights, old, new, n_clients) was the interface before the states' change was
    handed over as ``deltas``: such a class is refused where it is defined, before a run calls it wrongly."""
    with pytest.raises(InputError, match=r"takes \(old, new\).*deltas = new - old") as error:

        @dataclass(frozen=True)
        class Old(Algorithm):
            def server_update(self, x, server, ys, weights, old, new, n_clients):
                return weights @ ys, server

    assert "\n" not in str(error.value)
