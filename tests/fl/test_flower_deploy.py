"""A real Flower deployment on loopback (fl.flower.loopback): a SuperLink and two SuperNodes as subprocesses on
127.0.0.1 (insecure, local only), `flwr run flower/` submits two rounds of FedAvg on a tiny CIFAR-10, and the run
folder holds the same metrics and server model as python -m fl.run (one thread everywhere: bit for bit). Every
process started is stopped, within a bounded time, whatever happens."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("flwr")
if not shutil.which("flower-superlink") or not shutil.which("flwr"):
    pytest.skip("the Flower command-line tools are not installed", allow_module_level=True)

from fl.flower.loopback import Loopback
from fl.run import main as run_main
from theory.errors import InputError


def rows(folder):
    keep = ("round", "communication", "clients", "test_loss", "test_accuracy")
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k in keep} for line in lines]


@pytest.mark.slow
def test_loopback_deployment_runs_two_rounds_like_fl_run(cifar_root, tmp_path):
    overrides = [
        "data.dataset='cifar10'", f"data.data_root='{cifar_root}'", "data.partition='iid'", "data.clients=2",
        "model.name='fedcog-cnn'", "train.rounds=2", "train.batch_size=16", "train.device='cpu'",
        "train.local_steps=3",
    ]  # fmt: skip
    local, out = tmp_path / "local", tmp_path / "deployed"
    assert run_main([x for o in overrides for x in ("--set", o)] + ["--out", str(local), "--quiet"]) == 0
    with Loopback(2, tmp_path / "flower") as link:
        link.run({"config": "", "set": ";".join(overrides), "out": str(out), "timeout": 120}, out / "summary.json", 240)
        processes = list(link.procs)
    assert all(p.poll() is not None for p in processes)  # every process stopped
    assert rows(out) == rows(local) and len(rows(out)) == 2
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (local, out))
    assert torch.equal(a["x"], b["x"])


def test_the_loopbacks_logs_are_never_written_through_a_link(tmp_path):
    """Fourth sweep, case 50: a link planted at a process's log is refused in one line, its target left as it is."""
    loop = Loopback(1, tmp_path / "loop")
    loop.logs.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("a user's\n")
    (loop.logs / "superlink.log").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        loop._start("superlink", "true")
    assert victim.read_text() == "a user's\n" and not loop.procs
