"""Client optimiser state kept across rounds (``train.optimizer_state = "keep"``, DynaFed's code): local training
with a carried Adam equals one torch.optim.Adam run across the rounds; the engine's three backends agree; the
state survives a checkpoint and resume bit for bit; DynaFed's code-settings config runs past round L with each
algorithm."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fl.algorithms import FedAvg, Scaffold
from fl.clients import STEP_KEY, ClientSet, LocalConfig, carried_rows
from fl.engine import init_state, local_train, run_round
from fl.flat import FlatModel
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at

D, K = 4, 3


def tiny_flat(seed: int = 0) -> FlatModel:
    torch.manual_seed(seed)
    return FlatModel(nn.Sequential(nn.Linear(D, 5), nn.Tanh(), nn.Linear(5, K)).double())


def tiny_data(n_clients: int = 3) -> ClientSet:
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(26, D, generator=generator, dtype=torch.float64)
    y = torch.randint(0, K, (26,), generator=generator)
    parts = [torch.arange(0, 5), torch.arange(5, 13), torch.arange(13, 20), torch.arange(20, 26)][:n_clients]
    return ClientSet(x, y, parts, parts, parts, [torch.empty(0, dtype=torch.int64)] * len(parts), x, y, K)


def test_carried_rows_follow_the_optimiser():
    assert carried_rows(LocalConfig(optimizer="adam")) == ()
    assert carried_rows(LocalConfig(optimizer="adam", optimizer_state="keep")) == ("adam_m", "adam_v", STEP_KEY)
    assert carried_rows(LocalConfig(momentum=0.9, optimizer_state="keep")) == ("momentum",)


@pytest.mark.parametrize("optimizer, momentum", [("adam", 0.0), ("sgd", 0.9)])
def test_two_rounds_with_a_carried_optimiser_equal_one_continued_optimiser(optimizer, momentum):
    """Round 1 and round 2 of local training with the carried state = one optimiser stepping through both rounds'
    batches (round 2 restarting from the round-1 end point, as a client with one participation in a row does)."""
    data, lr = tiny_data(), 0.05
    flat = tiny_flat()
    w0 = flat.params.detach().clone()
    zeros = {k: torch.zeros(1 if k == STEP_KEY else flat.n_params, dtype=torch.float64) for k in
             carried_rows(LocalConfig(optimizer=optimizer, momentum=momentum, optimizer_state="keep"))}  # fmt: skip
    carry = dict(zeros)
    orders = []
    for r in range(2):
        generator = torch.Generator().manual_seed(10 + r)
        orders.append(torch.Generator().manual_seed(10 + r))
        local = LocalConfig(epochs=1, batch_size=3, momentum=momentum, optimizer=optimizer)
        steps = local_train(flat, (data.x, data.y, data.train[1]), local, lr, lambda w: None, generator, carry=carry)
        assert steps == 3
    kept = flat.params.detach().clone()
    # the reference: a plain torch module and one optimiser over the same six batches
    reference = tiny_flat()
    reference.load(w0)
    params = list(reference.model.parameters())
    opt = torch.optim.Adam(params, lr=lr) if optimizer == "adam" else torch.optim.SGD(params, lr=lr, momentum=momentum)
    from fl.clients import batches

    for generator in orders:
        for batch in batches(data.train[1], 3, generator, 1):
            opt.zero_grad()
            nn.functional.cross_entropy(reference.model(data.x[batch]), data.y[batch]).backward()
            opt.step()
    torch.testing.assert_close(kept, torch.cat([p.detach().reshape(-1) for p in params]), rtol=0, atol=1e-14)
    if optimizer == "adam":
        assert float(carry[STEP_KEY]) == 6
        state = opt.state[params[0]]
        assert torch.equal(carry["adam_m"][: params[0].numel()], state["exp_avg"].reshape(-1))
    # and it differs from restarting the optimiser every round
    flat.load(w0)
    for r in range(2):
        local = LocalConfig(epochs=1, batch_size=3, momentum=momentum, optimizer=optimizer)
        generator = torch.Generator().manual_seed(10 + r)
        local_train(flat, (data.x, data.y, data.train[1]), local, lr, lambda w: None, generator)
    assert not torch.equal(flat.params, kept)


@pytest.mark.parametrize("algorithm", [FedAvg(), Scaffold()])
@pytest.mark.parametrize("optimizer, momentum", [("adam", 0.0), ("sgd", 0.9)])
def test_batched_backend_carries_the_same_state(algorithm, optimizer, momentum):
    data = tiny_data(4)
    runs = []
    for backend in ("sequential", "batched"):
        local = LocalConfig(epochs=1, batch_size=3, participation=0.75, optimizer=optimizer, momentum=momentum,
                            optimizer_state="keep", backend=backend)  # fmt: skip
        flat = tiny_flat()
        state = init_state(flat, algorithm, 4, 0.05, carried=carried_rows(local))
        for _ in range(3):
            state, _ = run_round(state, flat, algorithm, data, local, 0)
        runs.append(state)
    sequential, vectorised = runs
    torch.testing.assert_close(vectorised.x, sequential.x, rtol=0, atol=1e-10)
    for k, v in sequential.clients.items():
        torch.testing.assert_close(vectorised.clients[k], v, rtol=0, atol=1e-10)
    if optimizer == "adam":  # steps so far: a client's batches times its participations
        assert sequential.clients[STEP_KEY].sum() > 0


def run_args(root, out, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='mlp'", "--set", "train.rounds=4",
        "--set", "train.batch_size=16", "--set", "train.checkpoint_every=1", "--set", "train.device='cpu'",
        "--set", "train.participation=0.5", "--set", "train.optimizer='adam'", "--set", "train.lr=0.001",
        "--set", "train.optimizer_state='keep'", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def rows(out):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("seconds")} for line in lines]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_kept_adam_state_survives_checkpoint_and_resume_bit_for_bit(cifar_root, tmp_path, monkeypatch, workers):
    monkeypatch.setenv("SHUFFLEFL_WORKERS", workers)
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert main(run_args(cifar_root, straight)) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert main(run_args(cifar_root, broken)) == 2
    saved = torch.load(broken / "checkpoint.pt", weights_only=True)
    assert saved["round"] == 3 and saved["clients"][STEP_KEY].sum() > 0  # rounds 1-2 left Adam state behind
    resume()
    assert main(["--resume", str(broken), "--quiet"]) == 0
    assert rows(broken) == rows(straight)
    a = torch.load(straight / "checkpoint.pt", weights_only=True)
    b = torch.load(broken / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["x"], b["x"])
    assert a["clients"].keys() == b["clients"].keys() == {"adam_m", "adam_v", STEP_KEY}
    assert all(torch.equal(a["clients"][k], b["clients"][k]) for k in a["clients"])


def test_workers_carry_the_same_state_as_one_process(cifar_root, tmp_path, monkeypatch):
    outs = []
    for workers in ("1", "2"):
        monkeypatch.setenv("SHUFFLEFL_WORKERS", workers)
        outs.append(tmp_path / f"w{workers}")
        assert main(run_args(cifar_root, outs[-1], "--set", "train.rounds=3")) == 0
    a, b = (torch.load(out / "checkpoint.pt", weights_only=True) for out in outs)
    assert torch.equal(a["x"], b["x"]) and all(torch.equal(a["clients"][k], b["clients"][k]) for k in a["clients"])


def test_keep_without_a_stateful_optimiser_is_one_line_exit_2(tmp_path, capsys):
    args = ["--set", "train.optimizer_state='keep'", "--out", str(tmp_path / "run"), "--quiet"]
    assert_one_line_config_error(args, "train.optimizer_state", capsys)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "scaffold", "feddyn", "fedavgm", "fedpvr"])
def test_dynafed_code_config_runs_two_rounds_past_l(cifar_root, tmp_path, algorithm):
    """configs/paper/dynafed_fmnist_a001_code.toml on tiny data (its model, split and sizes swapped for tiny ones,
    L = 4 instead of 24): the initial model in the trajectory, s = 3, the code's target draw, DSA, kept Adam."""
    out = tmp_path / "run"
    args = [
        "--config", "configs/paper/dynafed_fmnist_a001_code.toml",
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{cifar_root}'", "--set", "data.clients=4",
        "--set", "data.alpha=0.5", "--set", "model.name='mlp'", "--set", "train.rounds=6",
        "--set", "train.keep_round=4", "--set", "train.device='cpu'", "--set", "train.participation=0.5",
        "--set", f"algorithm.name='{algorithm}'", "--set", "method.trajectory_rounds=4",
        "--set", "method.iterations=2", "--set", "method.per_class=1", "--set", "method.inner_steps=2",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    synthesis = [r for r in rows(out) if "synthesis" in r.get("method", {})]
    assert [r["round"] for r in synthesis] == [4] and len(rows(out)) == 6
    config = json.loads((out / "config.json").read_text())
    assert config["method"]["initial_checkpoint"] and config["method"]["target_draw"] == "code"
    assert config["method"]["augment"] == "dsa" and config["train"]["optimizer_state"] == "keep"
    assert (out / "checkpoint_round4.pt").exists()
