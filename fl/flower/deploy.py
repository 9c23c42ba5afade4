"""The ServerApp of a real Flower deployment: the run config (``[tool.flwr.app.config]`` of ``flower/pyproject.toml``,
or ``flwr run ... --run-config``) names the TOML config (``config``; "" for the defaults), its overrides (``set``:
``;``-separated ``section.key=value``) and the run folder (``out``, locked as ``fl.run`` locks it while the run
writes); the ClientApp is :data:`fl.flower.app.client_app`."""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fl.atomic import locked
from fl.config import load_config
from fl.flower.app import FlowerExperiment
from fl.run import RUN_LOCK, execute

server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    run = context.run_config
    overrides = [item for item in str(run.get("set", "")).split(";") if item.strip()]
    config = load_config(str(run["config"]) or None, overrides)
    out = Path(str(run["out"]))
    out.mkdir(parents=True, exist_ok=True)
    with locked(out / RUN_LOCK, busy=f"run directory {out}"):  # one writer per run folder, as fl.run and fl.flower
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
        execute(config, out, quiet=True, exp=FlowerExperiment(config, grid, timeout=float(run.get("timeout", 600))))
