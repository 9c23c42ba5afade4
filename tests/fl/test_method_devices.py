"""Method state and the run's device (the CUDA defect of issue 37: after --resume, HFMDs mixed prototypes restored
on cuda:0 with the round's feature sums kept on the CPU). A checkpoint restores every tensor of a method's state
onto the run's device, a Flower node restores its client's entries onto its own, and a method's hooks must work
with state there. Without a GPU the "meta" device plays the other device: a hook that moves a tensor to the CPU,
or mixes a CPU tensor with the run's, fails on it."""

from __future__ import annotations

import pytest
import torch

from fl.checkpoints import load_checkpoint, save_checkpoint
from fl.engine import EngineState
from fl.methods.base import ClientRound
from fl.methods.hfmds import HFMDs, Mixed, update_prototypes

MOMENTUM = 0.5


def kept_prototypes() -> dict:
    """Client state after an earlier round: classes 0 and 1 seen (prototypes 1 and 2), class 2 not yet."""
    return {"prototypes": torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0]]), "seen": torch.tensor([True, True, False])}


def this_round(device: str) -> Mixed:
    """A round's accumulated real features: class 0 twice (mean 3), class 2 once (5), class 1 not at all."""
    task = Mixed(3, prototypes=True)
    z = torch.tensor([[2.0, 2.0], [4.0, 4.0], [5.0, 5.0]], device=device)
    task.accumulate(z, torch.tensor([0, 0, 2], device=device))
    return task


# By hand: class 0 mixes (1 − λ)·3 + λ·1 = 2, class 1 keeps 2, class 2 starts at its first mean 5.
EXPECTED = torch.tensor([[2.0, 2.0], [2.0, 2.0], [5.0, 5.0]])


def after_client(state: dict, task: Mixed) -> dict:
    method = HFMDs(momentum=MOMENTUM)
    hook = ClientRound(t=5, i=0, x=None, flat=None, data=None, local=None, state=state, seed=0, task=task)
    method.after_client(hook, y=None)
    return state["clients"][0]


def test_update_prototypes_follows_the_sums_device_and_dtype():
    kept = kept_prototypes()
    task = this_round("cpu")
    prototypes, seen = update_prototypes(kept["prototypes"].double(), kept["seen"], task.sums, task.counts, MOMENTUM)
    assert prototypes.dtype == torch.float32 and torch.equal(prototypes, EXPECTED)
    assert seen.tolist() == [True, True, True]
    task = this_round("meta")  # kept on the CPU, this round's sums on another device: the result is there
    prototypes, seen = update_prototypes(kept["prototypes"], kept["seen"], task.sums, task.counts, MOMENTUM)
    assert prototypes.device.type == seen.device.type == "meta"
    assert prototypes.shape == (3, 2) and seen.shape == (3,)


def test_hfmds_keeps_its_prototypes_on_the_run_device():
    """Fresh on the CPU: the numbers by hand; on another device (sums and restored state there): nothing goes to the
    CPU (the old hook's ``sums.cpu()`` fails on meta)."""
    state = {"server": {}, "clients": {0: kept_prototypes()}}
    entry = after_client(state, this_round("cpu"))
    assert torch.equal(entry["prototypes"], EXPECTED) and entry["seen"].tolist() == [True, True, True]
    restored = {"server": {}, "clients": {0: {k: v.to("meta") for k, v in kept_prototypes().items()}}}
    entry = after_client(restored, this_round("meta"))
    assert entry["prototypes"].device.type == entry["seen"].device.type == "meta"


def test_a_resumed_hfmds_state_lands_on_the_run_device_and_its_next_round_stays_there(tmp_path):
    """The GPU failure's path on CPU: a checkpoint saved with HFMDs' prototypes (as fl.run saves it, on the CPU)
    is restored onto the run's device ("meta" here, cuda:0 there) and the next round's hook runs on it."""
    state = {"server": {"pool_x": torch.zeros(2, 1, 2, 2), "pool_y": torch.tensor([0, 1])}, "clients": {}}
    state["clients"][0] = kept_prototypes()
    state["clients"][0] = after_client(state, this_round("cpu"))
    x = torch.zeros(4)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, EngineState(6, x, {}, {}, 0.1, {}, state))
    restored = load_checkpoint(path, torch.device("meta"))
    tensors = [restored.x, *restored.method["server"].values(), *restored.method["clients"][0].values()]
    assert {t.device.type for t in tensors if isinstance(t, torch.Tensor)} == {"meta"}
    entry = after_client(restored.method, this_round("meta"))
    assert entry["prototypes"].device.type == "meta"
    on_cpu = load_checkpoint(path, torch.device("cpu"))  # the same checkpoint on the CPU: the numbers by hand
    assert torch.equal(on_cpu.method["clients"][0]["prototypes"], EXPECTED)


def test_a_flower_node_restores_its_method_entries_onto_its_device():
    pytest.importorskip("flwr")
    from flwr.app import Context, RecordDict

    from fl.flower.app import load_entries, save_entries

    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    assert load_entries(context, "cpu") is None
    save_entries(context, {"local": torch.arange(3.0), "rounds": [1, 2]})
    on_cpu = load_entries(context, "cpu")
    assert torch.equal(on_cpu["local"], torch.arange(3.0)) and on_cpu["rounds"] == [1, 2]
    assert load_entries(context, "meta")["local"].device.type == "meta"
