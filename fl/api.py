"""FL runs from Python (a notebook, a script): :func:`train` runs one experiment through the code of ``python -m
fl.run`` and gives back its rows, its summary and its final model in memory.

    import fl

    result = fl.train("configs/fmnist_quick.toml", overrides={"train.rounds": 2})
    result.summary["final_test_accuracy"], len(result.rows), result.model

The config is a TOML file, a dict of its tables (``{"data": {...}, "train": {...}}``) or a
:class:`fl.config.RunConfig`; ``overrides`` are ``--set``'s, as a dict (``{"train.rounds": 2}``). The run writes its
folder where ``out`` says, exactly as ``fl.run --out`` would (the same files; ``python -m fl.run --resume OUT``
continues it), and without ``out`` into a temporary folder removed once the run is done. Its numbers are those of
``python -m fl.run`` with the same config, bit for bit (``tests/fl/test_api.py``). Bad input (a config key, a value,
a folder that holds a run) is one :class:`theory.errors.InputError` naming it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from fl.atomic import locked
from fl.config import RunConfig, config_from_tree, load_config, toml_value
from fl.engine import EngineState
from fl.experiment import Experiment, trainer_threads
from fl.loop import RoundCallback, execute
from fl.runfolder import RUN_LOCK, new_run_folder
from theory.errors import InputError
from theory.output import write_text_atomically


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` gives back.

    rows: every round's metrics row, as ``metrics.jsonl`` holds it (round, communication, test loss and accuracy
    where evaluated, estimates, per-client accuracy, seconds). summary: what ``summary.json`` holds (final and best
    test accuracy, rounds to the target, the step size used, ...). model: the final server model, a torch module on
    the run's device. config: the resolved config (every key). out: the run folder, or None where none was kept."""

    rows: list[dict]
    summary: dict
    model: torch.nn.Module
    config: RunConfig
    out: Path | None

    @property
    def final_accuracy(self) -> float | None:
        """The final test accuracy (None for a run that diverged: ``summary["diverged_at_round"]`` says where)."""
        return self.summary["final_test_accuracy"]


class Kept(RoundCallback):
    """Keeps every round's row and the state of the last round done (its server model is the result's model)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.state: EngineState | None = None

    def committed(self, row: dict, state: EngineState) -> None:
        self.rows.append(row)
        self.state = state


def override_texts(overrides: Mapping[str, object] | None) -> list[str]:
    """``{"train.rounds": 2}`` as ``--set`` texts (``train.rounds=2``); a key that is not ``section.key`` text is
    refused in one line."""
    if overrides is None:
        return []
    if not isinstance(overrides, Mapping):
        raise InputError(f"overrides: expected a dict of 'section.key': value, got {type(overrides).__name__}")
    texts = []
    for key, value in overrides.items():
        if not isinstance(key, str) or key.count(".") != 1:
            raise InputError(f"overrides: the key {key!r} is not 'section.key' (e.g. 'train.rounds')")
        texts.append(f"{key}={toml_value(value)}")
    return texts


def resolve(config: str | Path | Mapping | RunConfig, overrides: Mapping[str, object] | None = None) -> RunConfig:
    """The run's config from a TOML file (as ``fl.run --config``), a dict of its tables or a RunConfig, with
    ``overrides`` applied and every key checked (an InputError naming the key)."""
    texts = override_texts(overrides)
    if isinstance(config, str | Path):
        return load_config(config, texts)
    if isinstance(config, RunConfig):
        return config_from_tree(config.to_dict(), texts)
    if isinstance(config, Mapping):
        tree = copy.deepcopy(dict(config))  # the caller's dict is left as it was
        for section, table in tree.items():
            if not isinstance(table, Mapping):
                raise InputError(f"config [{section}]: expected a table (a dict of keys), got {table!r}")
        return config_from_tree(tree, texts)
    raise InputError(f"config: expected a TOML file, a dict or a RunConfig, got {type(config).__name__}")


def train(
    config: str | Path | Mapping | RunConfig,
    overrides: Mapping[str, object] | None = None,
    *,
    out: str | Path | None = None,
    overwrite: bool = False,
    quiet: bool = True,
) -> TrainResult:
    """Run one FL experiment as ``python -m fl.run --config CONFIG --set KEY=VALUE ... --out OUT`` does, and give
    back its rows, summary and final model (:class:`TrainResult`). ``config``: a TOML file, a dict of its tables or
    a :class:`fl.config.RunConfig`; ``overrides``: ``{"section.key": value}``, as ``--set section.key=value``;
    ``out``: the run folder to write and keep (``python -m fl.run --resume OUT`` continues it), None for a
    temporary one removed when the run is done; ``overwrite``: replace the run ``out`` holds (as ``--overwrite``;
    refused otherwise); ``quiet``: no progress bar and no line per round (as ``--quiet``).

    With ``train.workers`` other than 1 the clients train in worker processes, which a script (not a notebook)
    starts only under ``if __name__ == "__main__":`` (Python's multiprocessing). Ctrl-C stops the run with its
    checkpoint saved (:class:`fl.loop.Interrupted`), which only a kept ``out`` can resume."""
    resolved = resolve(config, overrides)
    with contextlib.ExitStack() as stack:
        scratch = None if out is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fl-")))
        if out is not None and (not isinstance(out, str | Path) or "\0" in str(out) or not str(out)):
            raise InputError(f"out {out!r}: a folder's path (str or Path, not empty), or None for a temporary one")
        folder = Path(out) if out is not None else scratch / "run"
        new_run_folder(folder, overwrite, "give another out, or overwrite=True")
        kept = Kept()
        with locked(folder / RUN_LOCK, busy=f"run directory {folder}"):  # as fl.run: one writer per run folder
            write_text_atomically(folder / "config.json", json.dumps(resolved.to_dict(), indent=2))
            with trainer_threads(resolved):  # built as execute builds it, kept here for its model
                exp = Experiment(resolved)
            summary = execute(resolved, folder, quiet=quiet, exp=exp, callbacks=[kept])
        if kept.state is not None:
            exp.flat.load(kept.state.x)
        return TrainResult(kept.rows, summary, exp.flat.model, resolved, None if out is None else folder)
