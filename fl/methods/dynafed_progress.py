"""DynaFed's synthesis in progress, kept in the run folder (``dynafed_synthesis.pt``) so that an interrupted run
continues its synthesis bit for bit, and the key that says which synthesis a saved file belongs to."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import torch

from fl.torchfiles import load_safely
from theory.output import replace_durably

# keys the method gained after syntheses were saved, with the value they had before: at it, a key is left out of
# the progress key, so that a synthesis saved by earlier code still resumes
LATER_FIELDS = {"precision": "auto", "matching": "auto"}
# what never shapes the numbers: keyed at a fixed value
UNSHAPING = {"save_every": 1}


def shaping(method, seed: int) -> str:
    """What shapes a synthesis's numbers, as text: the method's fields (``save_every`` as 1, a later field at its
    earlier value left out) and the seed, written as ``repr((method, seed))`` wrote them before the later fields
    existed: ``(DynaFed(trajectory_rounds=20, ..., class_mean=False), 0)``."""
    kept = []
    for field in dataclasses.fields(method):
        value = UNSHAPING.get(field.name, getattr(method, field.name))
        if field.name in LATER_FIELDS and value == LATER_FIELDS[field.name]:
            continue
        kept.append(f"{field.name}={value!r}")
    return f"({type(method).__qualname__}({', '.join(kept)}), {seed!r})"


def progress_key(method, trajectory: torch.Tensor, seed: int) -> str:
    """The sha256 of the trajectory (float64 bytes) and :func:`shaping`: which synthesis a saved file continues."""
    digest = hashlib.sha256(trajectory.detach().cpu().double().numpy().tobytes())
    digest.update(shaping(method, seed).encode())
    return digest.hexdigest()


class Progress:
    """The synthesis in progress, kept in ``folder/dynafed_synthesis.pt`` (the run folder,
    :data:`fl.methods.base.WORK_FOLDER`) every ``save_every`` iterations: D_syn, the label logits, α, both Adam
    states, the segment draws' and DSA's generator states, the losses and the seconds so far. An interrupted run
    recomputes the round and continues the synthesis from there, bit for bit as without the interruption; the file
    only counts for the same trajectory, settings and seed (its ``key``, :func:`progress_key`). No folder (tests,
    Flower): nothing is kept.

    ``state`` below is the synthesis's (inputs, label logits, α, Adam of X and y, Adam of α or None, the segment
    draws' numpy generator, DSA's torch generator)."""

    FILE = "dynafed_synthesis.pt"

    def __init__(self, folder: Path | None, method, trajectory: torch.Tensor, seed: int) -> None:
        self.path = None if folder is None else folder / self.FILE
        self.key = progress_key(method, trajectory, seed)

    def restore(self, state: tuple) -> tuple[int, list, float]:
        """Load a matching saved synthesis into the tensors, optimisers and generators of ``state``; (the next
        iteration, the losses, the seconds so far): (0, [], 0.0) when there is none."""
        inputs, label_logits, lr, optimiser, lr_optimiser, draws, generator = state
        if self.path is None or not self.path.exists():
            return 0, [], 0.0
        saved = load_safely(self.path, "saved DynaFed synthesis", "delete it to synthesise anew", inputs.device)
        if not isinstance(saved, dict) or saved.get("key") != self.key:
            return 0, [], 0.0
        with torch.no_grad():
            for tensor, name in ((inputs, "inputs"), (label_logits, "label_logits"), (lr, "lr")):
                tensor.copy_(saved[name])
        optimiser.load_state_dict(saved["optimiser"])
        if lr_optimiser is not None:
            lr_optimiser.load_state_dict(saved["lr_optimiser"])
        draws.bit_generator.state = saved["draws"]
        generator.set_state(saved["generator"])
        return saved["iteration"], saved["losses"], saved["seconds"]

    def save(self, iteration: int, state: tuple, losses: list, seconds: float) -> None:
        """Keep ``state`` as it is before outer iteration ``iteration``, with the losses and seconds so far."""
        if self.path is None:
            return
        inputs, label_logits, lr, optimiser, lr_optimiser, draws, generator = state
        payload = {
            "key": self.key, "iteration": iteration, "inputs": inputs.detach().cpu(),
            "label_logits": label_logits.detach().cpu(), "lr": lr.detach().cpu(), "optimiser": optimiser.state_dict(),
            "lr_optimiser": None if lr_optimiser is None else lr_optimiser.state_dict(),
            "draws": draws.bit_generator.state, "generator": generator.get_state(), "losses": losses,
            "seconds": seconds,
        }  # fmt: skip
        replace_durably(self.path, lambda tmp: torch.save(payload, tmp))
