"""The ServerApp of a real Flower deployment: the run config (``[tool.flwr.app.config]`` of ``flower/pyproject.toml``,
or ``flwr run ... --run-config``) names the TOML config (``config``; "" for the defaults), its overrides (``set``:
``;``-separated ``section.key=value``), the run folder (``out``, locked as ``fl.run`` locks it while the run
writes) and, as ``fl.run``'s flags do, ``resume = true`` (continue the run in ``out`` with its own config) or
``overwrite = true`` (start again over it); a folder that holds a run already is refused otherwise. The ClientApp
is :data:`fl.flower.app.client_app`."""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fl.atomic import locked
from fl.config import RunConfig, load_config
from fl.flower.app import FlowerExperiment
from fl.loop import execute
from fl.runfolder import RUN_LOCK, new_run_folder, read_run_config
from theory.errors import InputError
from theory.output import write_text_atomically

server_app = ServerApp()


def flag(run: dict, key: str) -> bool:
    value = run.get(key, False)
    if not isinstance(value, bool):
        raise InputError(f"run config {key}: must be true or false, got {value!r}")
    return value


def open_run(run: dict) -> tuple[RunConfig, Path, bool]:
    """(config, run folder, resume) from the run config, checked before anything is written: ``resume`` needs a run
    folder and drops ``config``/``set`` (the run's own config is used); a new run's folder must not hold one unless
    ``overwrite``."""
    if "out" not in run:
        raise InputError("run config: out (the run folder) is missing")
    out, resume, overwrite = Path(str(run["out"])), flag(run, "resume"), flag(run, "overwrite")
    if resume and overwrite:
        raise InputError("run config: resume continues the run in out, overwrite starts it again: set one of them")
    if resume:
        return read_run_config(out), out, True
    overrides = [item for item in str(run.get("set", "")).split(";") if item.strip()]
    config = load_config(str(run.get("config", "")) or None, overrides)
    new_run_folder(out, overwrite, "set resume = true to continue it, overwrite = true, or another out")
    return config, out, False


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    run = dict(context.run_config)
    config, out, resume = open_run(run)
    with locked(out / RUN_LOCK, busy=f"run directory {out}"):  # one writer per run folder, as fl.run and fl.flower
        if resume:
            config = read_run_config(out)
        else:
            write_text_atomically(out / "config.json", json.dumps(config.to_dict(), indent=2))
        exp = FlowerExperiment(config, grid, timeout=float(run.get("timeout", 600)))
        execute(config, out, resume=resume, quiet=True, exp=exp)
