"""A run's checkpoints: the engine state written atomically and read back checked (:func:`save_checkpoint`,
:func:`load_checkpoint`), the key of the config it was trained with (:func:`config_key`), and a run started from
another run's checkpoint (:func:`init_from`: ``fl.run --init-from``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from fl.config import RunConfig, build_method, from_dict, identity_hash
from fl.engine import EngineState, place_clients
from fl.methods import new_state
from fl.metrics import read_metrics
from fl.torchfiles import load_safely
from theory.errors import InputError
from theory.output import read_object, replace_durably

if TYPE_CHECKING:
    from fl.experiment import Experiment


CPU = torch.device("cpu")

CHECKPOINT_KEYS = {"round", "x", "server", "clients", "lr", "extra"}  # what save_checkpoint writes (and "method")


def save_checkpoint(path: Path, state: EngineState) -> None:
    """torch.save to a temporary file, then an atomic rename: a crash never leaves half a checkpoint."""
    payload = {
        "round": state.round,
        "x": state.x.cpu(),
        "server": {k: v.cpu() for k, v in state.server.items()},
        "clients": {k: v.cpu() for k, v in state.clients.items()},
        "lr": state.lr,
        "extra": state.extra,
        "method": _to(state.method, "cpu"),
    }
    replace_durably(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(
    path: Path, device: torch.device, client_state: str = "device", like: torch.Tensor | None = None,
    rounds: int | None = None,
) -> EngineState:  # fmt: skip
    """The state a checkpoint holds, its fields checked (an InputError in one line naming the file and the field):
    ``round`` a whole number >= 1 (with ``rounds``, the run's ``train.rounds``: at most ``rounds`` + 1, the round
    after the last, checked before anything is sized by it), ``x`` a 1-d floating tensor of finite values (with
    ``like``, the run's own parameter vector: of its size and dtype), ``lr`` a positive finite number, the rest of
    their kinds."""
    payload = load_safely(path, "checkpoint", "start the run over (--overwrite), or point at another", device)
    missing = CHECKPOINT_KEYS - set(payload) if isinstance(payload, dict) else CHECKPOINT_KEYS
    if missing:
        raise InputError(f"{path}: not a checkpoint of fl.run (no {', '.join(sorted(missing))})")
    x, at, lr = payload["x"], payload["round"], payload["lr"]
    why = None
    if not isinstance(at, int) or isinstance(at, bool) or at < 1:
        why = f"its round is {at!r}, not a whole number >= 1"
    elif rounds is not None and at > rounds + 1:
        why = f"its round is {at}, past the {rounds} rounds of the run's config (train.rounds)"
    elif not isinstance(x, torch.Tensor) or x.ndim != 1 or not x.is_floating_point():
        why = "its x is not a 1-d floating-point parameter vector"
    elif like is not None and (x.numel() != like.numel() or x.dtype != like.dtype):
        why = f"its x holds {x.numel()} {x.dtype} values, the run's model {like.numel()} {like.dtype}"
    elif x.device.type != "meta" and not bool(torch.isfinite(x).all()):
        why = "its x holds values that are not finite"
    elif not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
        why = f"its lr is {lr!r}, not a positive number"
    elif not isinstance(payload["extra"], dict) or not isinstance(payload["server"], dict):
        why = "its extra or server state is not a table"
    if why:
        raise InputError(f"{path}: not a checkpoint this run can continue ({why}); start the run over (--overwrite)")
    clients = place_clients(payload["clients"], client_state)
    return EngineState(
        payload["round"], payload["x"], payload["server"], clients, payload["lr"], payload["extra"],
        payload.get("method", new_state()),
    )  # fmt: skip


def _to(tree, device: str):
    """A copy of a nested dict of tensors (and numbers) with every tensor on ``device``."""
    if isinstance(tree, dict):
        return {k: _to(v, device) for k, v in tree.items()}
    return tree.to(device) if isinstance(tree, torch.Tensor) else tree


def config_key(config: RunConfig) -> str:
    """12 hex digits over what a run's numbers depend on in its config (its identity, without the device a resumed
    run may move to): kept in the state (``extra["config_key"]``, beside ``extra["config_rounds"]``, the
    ``train.rounds`` it was made with), so a resume refuses an edited config.json; a run extended to more rounds
    (:func:`extend`) continues a checkpoint keyed with its earlier rounds."""
    tree = config.identity()
    tree["train"].pop("device", None)
    tree.pop("plugins", None)  # a plug-in's code is provenance's to check (fl.provenance.check_plugins)
    return identity_hash(tree)


# What a run started from another run's checkpoint must share with it: everything that shaped that state but the
# local step (step size and weight decay), which may change at the branching round like a schedule; the change is
# said on stderr and kept in the summary (``init_from_changes``).
SHARED_TRAIN_KEYS = (
    "participation", "local_epochs", "local_steps", "momentum", "optimizer", "batch_size", "weighting", "seed",
    "optimizer_state", "augment", "local_budget",
)  # fmt: skip


def step_from_here(config: RunConfig, theirs: dict, state: EngineState, checkpoint: Path) -> dict:
    """Set the step size of a run that continues ``state`` (its source's, ``theirs`` its config): one
    ``train.lr`` is used from the branching round on; a grid keeps the source's tuned value, which it must hold.
    Returns what changed, {key: [source's, this run's]}."""
    grid = config.train.lr
    if len(grid) > 1 and state.lr not in grid:
        raise InputError(
            f"--init-from {checkpoint}: the source trained with lr {state.lr:g}, which train.lr {list(grid)} does "
            "not hold; give one train.lr to change the step size from here on"
        )
    changes = {}
    if len(grid) == 1 and grid[0] != state.lr:
        changes["lr"], state.lr = [state.lr, grid[0]], grid[0]
    if config.train.weight_decay != theirs["train"]["weight_decay"]:
        changes["weight_decay"] = [theirs["train"]["weight_decay"], config.train.weight_decay]
    return changes


def check_init_from(
    config: RunConfig, checkpoint: Path, device: torch.device = CPU, client_state: str = "device"
) -> tuple[dict, EngineState]:
    """What ``--init-from checkpoint`` refuses, in one line, before a run folder is made: a source run whose data,
    model, algorithm or local training differ, a checkpoint that does not load safely, one at or after the last
    round. (the source's config, the state in the checkpoint)."""
    source = checkpoint.parent
    other = from_dict(read_object(source / "config.json", "config.json of the run --init-from starts from"))
    mine, theirs = config.to_dict(), other.to_dict()
    for section in ("data", "model", "algorithm"):
        if mine[section] != theirs[section]:
            raise InputError(f"--init-from {checkpoint}: [{section}] differs from the source run's")
    for key in SHARED_TRAIN_KEYS:
        if mine["train"][key] != theirs["train"][key]:
            raise InputError(f"--init-from {checkpoint}: train.{key} differs from the source run's")
    state = load_checkpoint(checkpoint, device, client_state)
    if state.round > config.train.rounds:
        raise InputError(f"--init-from {checkpoint}: it is after round {state.round - 1} >= train.rounds")
    return theirs, state


def init_from(config: RunConfig, checkpoint: Path, exp: Experiment) -> tuple[EngineState, list[dict]]:
    """The state in ``checkpoint`` (of another run, e.g. ``checkpoint_round49.pt``) and that run's metrics rows
    before it, for a run of ``config`` that continues from there; the method state starts empty when the method
    differs (unless it declares the other's state its own: DynaFed before its synthesis). Refuses a run whose data,
    model, algorithm or local training differ from the source's."""
    source = checkpoint.parent
    mine = config.to_dict()
    theirs, state = check_init_from(config, checkpoint, exp.device, exp.local.client_state)
    changes = step_from_here(config, theirs, state, checkpoint)
    if changes:
        said = ", ".join(f"{k} {a:g} -> {b:g}" for k, (a, b) in changes.items())
        print(
            f"--init-from {checkpoint}: from round {state.round} on {said} (rounds before: the source's)",
            file=sys.stderr,
        )
        state.extra["init_from_changes"] = changes
    if mine["method"] != theirs["method"] and not exp.method.shares_state_with(
        build_method(theirs["method"]), state.round
    ):
        needs = exp.method.first_stateful_round()
        if needs is not None and state.round > needs:
            raise InputError(
                f"--init-from {checkpoint}: {exp.method.name} keeps state from round {needs} on, which the source "
                f"run did not; start from a state before round {needs} (after round {needs - 1} at the latest)"
            )
        state.method = new_state()
    state.extra["init_from"] = str(checkpoint)
    return state, read_metrics(source / "metrics.jsonl", before_round=state.round)
