"""``python -m fl.flower``: one config through Flower's simulation engine (one SuperNode per client).

    python -m fl.flower --config configs/fmnist_quick.toml --out results/runs/quick_flower
    python -m fl.flower --resume results/runs/quick_flower

The run folder is ``fl.run``'s (config.json, metrics.jsonl, checkpoint.pt, summary.json), so ``python -m fl.run
--compare`` and the figures read it alike.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from fl.config import from_dict, load_config
from theory.cli import ArgumentParser, guarded, make_dir
from theory.errors import InputError


def simulate(config, out: Path, resume: bool = False, cpus_per_client: float = 1.0) -> dict:
    """Run ``config`` into ``out`` in Flower's simulation engine; returns the summary."""
    try:
        from flwr.simulation import run_simulation
    except ImportError:
        raise InputError('Flower is not installed: pip install -e ".[flower]"') from None
    from fl.flower.app import check_supported, client_app, server_app_for

    check_supported(config)
    run_simulation(
        server_app_for(config, out, resume), client_app, num_supernodes=config.data.clients,
        backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}},
    )  # fmt: skip
    summary = out / "summary.json"
    if not summary.exists():
        raise InputError(f"{out}: the Flower run ended without a summary (see the log above)")
    return json.loads(summary.read_text())


@guarded("fl.flower")
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m fl.flower", description="Run one config in Flower's simulation engine.")
    parser.add_argument("--config", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--cpus-per-client", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.resume:
        out = args.resume
        try:
            config = from_dict(json.loads((out / "config.json").read_text()))
        except FileNotFoundError:
            raise InputError(f"{out}: not a run directory (no config.json)") from None
    else:
        config = load_config(args.config, args.set)
        out = args.out or Path("results/runs") / f"{args.config.stem if args.config else 'default'}_flower"
        if (out / "metrics.jsonl").exists() and not args.overwrite:
            raise InputError(f"{out} already holds a run; use --resume {out}, --overwrite, or another --out")
        make_dir(out, "run directory")
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    summary = simulate(config, out, bool(args.resume), args.cpus_per_client)
    print(f"{out}: {summary['rounds']} rounds, final test accuracy {summary['final_test_accuracy']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
