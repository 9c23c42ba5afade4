"""A method's payload (Method.client_payload): what its server hook sets before the round reaches every client's
hooks the same way, in one process, in worker processes, under the batched backend and on Flower's nodes, and the
numbers are equal across all of them. The method is a user's plug-in: a pool of noise images labelled at random
each round on the server, distilled into every client's objective."""

from __future__ import annotations

import json

import pytest
import torch

from fl.run import main as run_main
from tests.fl.conftest import plugin_folder

POOLED = '''
"""A pool of 4 noise images with random labels drawn on the server each round, added to every client's loss."""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fl.methods import Method


class PoolLoss:
    def __init__(self, x, y, scale):
        self.x, self.y, self.scale = x, y, scale

    def loss(self, model, xb, yb):
        return F.cross_entropy(model(xb), yb) + self.scale * F.cross_entropy(model(self.x), self.y)


@dataclass(frozen=True)
class Pooled(Method):
    name: ClassVar[str] = "pooled"
    scale: float = 0.5

    def before_round(self, s):
        shape = tuple(s.data.x.shape[1:])
        s.state["server"] = {
            "pool_x": torch.randn(4, *shape, generator=s.generator).to(s.x),
            "pool_y": torch.randint(0, s.data.n_classes, (4,), generator=s.generator).to(s.x.device),
            "scale": self.scale,
        }

    def before_client(self, c):
        server = c.state["server"]
        return PoolLoss(server["pool_x"], server["pool_y"], server["scale"])

    def after_client(self, c, y):
        c.log["pool_sum"] = [*c.log.get("pool_sum", []), round(float(c.state["server"]["pool_x"].sum()), 6)]
        seen = c.state["clients"].get(c.i, {}).get("seen", 0)
        c.state["clients"][c.i] = {"seen": seen + 1}
'''

REPORTED = """
\"\"\"Each client reports the norm of its local change; the server hook moves x by their mean (both ways).\"\"\"
from dataclasses import dataclass
from typing import ClassVar

import torch

from fl.methods import Method


@dataclass(frozen=True)
class Reported(Method):
    name: ClassVar[str] = "reported"
    client_sends: ClassVar[tuple[str, ...]] = ("norm",)

    def after_client(self, c, y):
        c.state["clients"][c.i] = {"norm": (y - c.x).norm().reshape(1), "rounds": 1}  # "rounds" stays on the client

    def after_aggregate(self, s):
        norms = [e["norm"] for e in s.state["clients"].values() if "norm" in e]
        s.log["reports"] = len(norms)
        return s.x * (1 - 1e-3 * torch.cat(norms).mean().to(s.x))
"""


@pytest.fixture()
def pooled(tmp_path, monkeypatch):
    return plugin_folder(tmp_path, monkeypatch, {"pooled": POOLED, "reported": REPORTED})


def args(root, out, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=3", "--set", "model.name='fedcog-cnn'", "--set", "train.rounds=3",
        "--set", "train.batch_size=16", "--set", "train.device='cpu'", "--set", "train.participation=0.6",
        "--set", "train.local_steps=3", "--set", "method.name='pooled:Pooled'", "--out", str(out), *extra,
    ]  # fmt: skip


def rows(out):
    keep = ("round", "communication", "clients", "test_loss", "test_accuracy", "method")
    return [{k: v for k, v in json.loads(line).items() if k in keep} for line in (out / "metrics.jsonl").open()]


def server_model(out):
    return torch.load(out / "checkpoint.pt", weights_only=True)["x"]


def test_the_payload_reaches_the_clients_equally_in_one_process_in_workers_and_batched(cifar_root, pooled):
    runs = {
        "one": ["--set", "train.workers=1"],
        "workers": ["--set", "train.workers=2"],
        "batched": ["--set", "train.workers=1", "--set", "train.backend='batched'"],
    }
    for name, extra in runs.items():
        assert run_main([*args(cifar_root, pooled / name, *extra), "--quiet"]) == 0
    first = rows(pooled / "one")
    assert all(len(row["method"]["pool_sum"]) == 2 for row in first)  # every participant saw the round's pool
    for name in ("workers", "batched"):
        assert rows(pooled / name) == first
        assert torch.equal(server_model(pooled / name), server_model(pooled / "one"))


@pytest.mark.slow
def test_the_payload_reaches_flower_nodes_with_the_same_numbers(cifar_root, pooled):
    pytest.importorskip("flwr.simulation")
    pytest.importorskip("ray")
    from fl.flower.__main__ import main as flower_main

    assert run_main([*args(cifar_root, pooled / "local", "--set", "train.workers=1"), "--quiet"]) == 0
    assert flower_main(args(cifar_root, pooled / "flower")) == 0
    assert rows(pooled / "flower") == rows(pooled / "local")
    assert torch.equal(server_model(pooled / "flower"), server_model(pooled / "local"))


def test_client_entries_the_server_reads_travel_up_and_are_counted(cifar_root, pooled):
    """Issue 68, item 2: a method's ``client_sends`` entries reach its server hook, and their numbers (one per
    participant here) are in the round's communication beside the algorithm's; an entry not named is not counted."""
    report = ["--set", "method.name='reported:Reported'", "--set", "train.workers=1", "--quiet"]
    assert run_main([*args(cifar_root, pooled / "reported", *report)]) == 0
    assert run_main([*args(cifar_root, pooled / "plain", "--set", "method.name='none'", "--quiet")]) == 0
    reported, plain = rows(pooled / "reported"), rows(pooled / "plain")
    assert [r["method"]["reports"] for r in reported] == [2, 3, 3]  # the entries so far (two clients a round)
    extra = [a["communication"] - b["communication"] for a, b in zip(reported, plain, strict=True)]
    assert extra == [2, 4, 6] and [r["method"]["numbers_sent"] for r in reported] == [2, 2, 2]


@pytest.mark.slow
def test_client_entries_reach_the_server_hook_on_flower_as_in_fl_run(cifar_root, pooled):
    pytest.importorskip("flwr.simulation")
    pytest.importorskip("ray")
    from fl.flower.__main__ import main as flower_main

    report = ["--set", "method.name='reported:Reported'"]
    assert run_main([*args(cifar_root, pooled / "local", *report, "--set", "train.workers=1"), "--quiet"]) == 0
    assert flower_main(args(cifar_root, pooled / "flower", *report)) == 0
    assert rows(pooled / "flower") == rows(pooled / "local")
    assert torch.equal(server_model(pooled / "flower"), server_model(pooled / "local"))
