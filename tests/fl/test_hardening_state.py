"""State that must not silently differ (issue 69, class 4): a resumed Flower run continues SCAFFOLD's c_i and a
method's per-client state as ``fl.run --resume`` does, and a plug-in's helper module found in another folder of the
path or through ``importlib.import_module`` is part of the plug-in's hash, so a change in it stops a resume."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap

import pytest
import torch

from fl import plugins
from fl.run import main as run_main
from tests.fl.conftest import interrupt_at
from tests.fl.test_run import base_args

HELPED = """
from dataclasses import dataclass
from typing import ClassVar

from fl.methods import Method
IMPORT


@dataclass(frozen=True)
class Scaled(Method):
    name: ClassVar[str] = "scaled"

    def after_aggregate(self, s):
        return s.x * SCALE
"""

IMPORTS = {
    "elsewhere": "from farhelper import SCALE",  # a module of another folder of sys.path
    "importlib": "import importlib\nSCALE = importlib.import_module('farhelper').SCALE",
}


@pytest.mark.parametrize("layout", sorted(IMPORTS))
def test_a_helper_from_another_folder_or_importlib_is_in_the_plugins_hash(
    cifar_root, tmp_path, monkeypatch, capsys, layout
):
    """The helper is neither beside the plug-in nor in its package: its change alone stops the resume in one line."""
    folder, lib = tmp_path / "plug", tmp_path / "lib"
    folder.mkdir()
    lib.mkdir()
    (folder / "farscaled.py").write_text(textwrap.dedent(HELPED.replace("IMPORT", IMPORTS[layout])))
    helper = lib / "farhelper.py"
    helper.write_text("SCALE = 1.0\n")
    for name in ("farscaled", "farhelper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", [str(lib), *sys.path])
    monkeypatch.chdir(folder)
    out, spec = tmp_path / "run", "farscaled:Scaled"
    resume = interrupt_at(monkeypatch, 3)
    assert run_main(base_args(cifar_root, out, "--set", f"method.name='{spec}'")) == 2
    resume()
    recorded = json.loads((out / "provenance.json").read_text())["plugins"]["method.name"]
    assert str(helper) in recorded["files"]
    helper.write_text("SCALE = 0.5\n")  # a numeric change in the helper alone
    assert plugins.located_fingerprint("farscaled") != recorded["sha256"]
    capsys.readouterr()
    assert run_main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"plug-in {spec} (method.name)" in err and "--accept-code-change" in err


def test_the_standard_library_and_installed_packages_stay_out_of_a_plugins_hash(tmp_path, monkeypatch):
    """Only a user's modules count: a plug-in importing json, numpy and torch hashes its own file alone."""
    (tmp_path / "plainplug.py").write_text("import json\nimport numpy\nimport importlib\ntorch = __import__('torch')\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert plugins.own_files(tmp_path / "plainplug.py", "plainplug") == [tmp_path / "plainplug.py"]


pytest.importorskip("flwr.simulation")
pytest.importorskip("ray")


@pytest.mark.slow
def test_a_resumed_flower_run_continues_scaffolds_and_fedcogs_client_state(cifar_root, tmp_path):
    """SCAFFOLD with FedCOG (c_i and the previous local model, per client): Flower's checkpoint of round 2 holds the
    nodes' states, and the run resumed from it in Flower ends where fl.run's uninterrupted run ends, bit for bit."""
    from fl.flower.__main__ import main as flower_main
    from tests.fl.test_flower import args, rows, same_server_model

    extra = [arg for item in ["method.name='fedcog'", "method.start_round=2", "method.n_generate=12",
                              "method.generate_steps=3", "method.kd_batch_size=5", "train.keep_round=2",
                              "train.participation=1.0"] for arg in ("--set", item)]  # fmt: skip
    local, flower = tmp_path / "local", tmp_path / "flower"
    assert run_main([*args(cifar_root, local, "scaffold"), *extra, "--quiet"]) == 0
    assert flower_main([*args(cifar_root, flower, "scaffold"), *extra]) == 0
    kept = torch.load(flower / "checkpoint_round2.pt", weights_only=True)
    assert kept["clients"]["c"].abs().sum() > 0 and sorted(kept["method"]["clients"]) == [0, 1, 2]
    shutil.copy(flower / "checkpoint_round2.pt", flower / "checkpoint.pt")  # cut after round 2
    (flower / "summary.json").unlink()
    assert flower_main(["--resume", str(flower)]) == 0
    assert rows(flower) == rows(local)
    assert same_server_model(local, flower)
