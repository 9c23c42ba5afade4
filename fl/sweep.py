"""``python -m fl.sweep``: a family of ``fl.run`` experiments around one config, with a table and a figure.

    python -m fl.sweep --config configs/fedssyn_fmnist_vae.toml \\
        --vary method.n_tilde=250,500,1000,2000 --vary method.sample_epoch=1,2,5,10 --seeds 0,1

Each ``--vary KEY=V1,V2,...`` changes one key of the base config at a time (Fedssyn Fig. 4a-b: ρ, ñ, generator
epochs); ``--product`` runs every combination instead (e.g. ``method.name`` × ``algorithm.name``). The base
config itself is run too. Every run is repeated for each seed (``train.seed``: the partition, the generators and
the model's initialisation all derive from it), so the table gives mean ± standard deviation over seeds.

Generators are shared through the synthetic cache: a sweep over ñ or ``sample_epoch`` trains them once.
Runs live in ``OUT/<name>/seed<s>/`` (ordinary ``fl.run`` directories): a finished run is reused, an interrupted
one resumed, so re-running the same command after Ctrl-C continues where it stopped. Outputs: ``table.csv``,
``sweep.json`` (every run's summary), ``sweep.png`` (accuracy per round; final accuracy against each value).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fl.config import RunConfig, from_dict, load_config, parse_override
from fl.run import execute
from theory.cli import ArgumentParser, format_table, guarded, make_dir
from theory.errors import InputError
from theory.output import to_json, write_csv

ESTIMATES = ("zeta2_ratio", "zeta2_hat", "sigma2_hat", "delta2")


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``section.key=v1,v2`` -> ("section.key", ["section.key=v1", "section.key=v2"]) (values read as TOML)."""
    if "=" not in text:
        raise InputError(f"--vary {text!r}: expected section.key=value1,value2,...")
    key, raw = text.split("=", 1)
    key = key.strip()
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not values:
        raise InputError(f"--vary {text!r}: no values")
    overrides = [f"{key}={v}" for v in values]
    for override in overrides:
        parse_override(override)
    return key, overrides


def plan(base: list[str], varies: list[tuple[str, list[str]]], product: bool) -> list[tuple[str, list[str]]]:
    """(run name, overrides) for the base run (first) and its variations, without duplicates."""
    runs: list[tuple[str, list[str]]] = [("base", [])]
    if product and varies:
        for combo in itertools.product(*(overrides for _, overrides in varies)):
            runs.append((",".join(combo), list(combo)))
    else:
        for _, overrides in varies:
            runs.extend((o, [o]) for o in overrides)
    seen, unique = set(), []
    for name, overrides in runs:
        if name not in seen:
            seen.add(name)
            unique.append((name, base + overrides))
    return unique


def run_dir_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._=,-" else "_" for c in name)


def prepare_run(config: RunConfig, out: Path) -> str:
    """What ``out`` needs for ``config``: "done" (its summary is there), "resume" (a checkpoint is), or "start"
    (``config.json`` written). A folder holding another config is an error."""
    saved = out / "config.json"
    wanted = config.to_dict()
    if saved.exists():
        earlier = from_dict(json.loads(saved.read_text())).identity()  # earlier layouts too
        if earlier != json.loads(json.dumps(config.identity())):
            raise InputError(f"{out} holds a run of another config; use another --out or remove it")
        if (out / "summary.json").exists():
            return "done"
        if (out / "checkpoint.pt").exists():
            return "resume"
    make_dir(out, "run directory")
    saved.write_text(json.dumps(wanted, indent=2))
    return "start"


def run_one(config: RunConfig, out: Path, quiet: bool) -> dict:
    """Finished: read its summary; started: resume; else start (:func:`prepare_run`)."""
    state = prepare_run(config, out)
    if state == "done":
        return json.loads((out / "summary.json").read_text())
    return execute(config, out, resume=state == "resume", quiet=quiet)


def accuracy_curve(out: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["round"], r["test_accuracy"]) for r in rows if r.get("test_accuracy") is not None]


def mean_sd(values: Sequence[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value) of the values that are not None; NaN when none are."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return float("nan"), float("nan")
    return float(np.mean(kept)), float(np.std(kept, ddof=1)) if len(kept) > 1 else 0.0


def aggregate(name: str, summaries: list[dict]) -> dict:
    """Mean and standard deviation over seeds of the numbers a sweep reports."""

    row = {"run": name, "seeds": len(summaries)}
    for key in ("final_test_accuracy", "best_test_accuracy"):
        row[key], row[key + "_std"] = mean_sd([s[key] for s in summaries])
    reached = [s["rounds_to_target"] for s in summaries]
    row["rounds_to_target"], row["rounds_to_target_std"] = mean_sd(reached)
    row["reached_target"] = sum(r is not None for r in reached)
    row["diverged"] = sum(s.get("diverged_at_round") is not None for s in summaries)
    for key in ESTIMATES:
        row[key] = mean_sd([s["estimates_mean"].get(key) for s in summaries])[0]
    for key in ("communication_to_target", "seconds", "seconds_generator_training", "dp_epsilon"):
        row[key] = mean_sd([s.get(key) for s in summaries])[0]
    return row


def sweep(
    config_path: Path | None,
    base: list[str],
    varies: list[tuple[str, list[str]]],
    seeds: list[int],
    out: Path,
    product: bool = False,
    quiet: bool = False,
    with_base: bool = True,
) -> list[dict]:
    """Run (or reuse) every run of the sweep; write table.csv, sweep.json and sweep.png into ``out``."""
    runs = plan(base, varies, product)
    configs = {
        (name, seed): load_config(config_path, [*overrides, f"train.seed={seed}"])
        for name, overrides in runs
        for seed in seeds
    }  # checked before anything runs
    base_runs = [(name, o) for name, o in runs[1:] if all(configs[name, s] == configs["base", s] for s in seeds)]
    for name, _ in base_runs:  # a variation equal to the base config (e.g. its own value) is the base run
        print(f"{name} is the base config: reported as 'base'")
    runs = [run for run in runs if run not in base_runs]
    if not with_base:
        if len(runs) == 1:
            raise InputError("--no-base needs at least one --vary")
        runs = runs[1:]
    make_dir(out, "sweep folder")
    results, rows = {}, []
    for index, (name, _) in enumerate(runs):
        summaries = []
        for seed in seeds:
            folder = out / run_dir_name(name) / f"seed{seed}"
            print(f"[{index + 1}/{len(runs)}] {name} seed {seed} -> {folder}", flush=True)
            summaries.append(run_one(configs[name, seed], folder, quiet))
        results[name] = {
            "overrides": dict(runs)[name],
            "summaries": summaries,
            "curves": [accuracy_curve(out / run_dir_name(name) / f"seed{seed}") for seed in seeds],
        }
        rows.append(aggregate(name, summaries))
    headers = list(rows[0])
    write_csv(out / "table.csv", headers, [[row[h] for h in headers] for row in rows])
    (out / "sweep.json").write_text(
        json.dumps(to_json({"seeds": seeds, "product": product, "runs": results}), indent=1)
    )
    from plots.sweep import plot_sweep

    plot_sweep(results, [key for key, _ in varies], product, out / "sweep.png")
    shown = ["run", "seeds", "final_test_accuracy", "final_test_accuracy_std", "rounds_to_target", "reached_target"]
    shown += ["diverged"] if any(r["diverged"] for r in rows) else []
    shown += [k for k in ("zeta2_ratio", "delta2", "dp_epsilon") if any(np.isfinite(r[k]) for r in rows)]
    print(format_table(shown, [[row[h] for h in shown] for row in rows]))
    print(f"table: {out / 'table.csv'}  figure: {out / 'sweep.png'}")
    return rows


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds {text!r}: expected integers separated by commas, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text!r}: give distinct integers")
    return seeds


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m fl.sweep", description="A family of fl.run experiments, table + figure.")
    add = parser.add_argument
    add("--config", type=Path, help="base TOML config")
    add("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a base config value")
    add("--vary", action="append", default=[], metavar="SECTION.KEY=V1,V2", help="values to sweep (repeatable)")
    add("--product", action="store_true", help="every combination of the --vary values (default: one at a time)")
    add("--seeds", default="0", help="seeds, e.g. 0,1,2 (default 0)")
    add("--out", type=Path, help="sweep folder (default results/sweeps/<config name>)")
    add("--no-base", action="store_true", help="run only the variations, not the base config itself")
    add("--quiet", action="store_true", help="no per-round progress bars")
    return parser


@guarded("fl.sweep")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    varies = [parse_vary(v) for v in args.vary]
    keys = [key for key, _ in varies]
    if len(set(keys)) != len(keys):
        raise InputError("--vary: each key once (put all its values in one --vary)")
    out = args.out or Path("results/sweeps") / (args.config.stem if args.config else "default")
    sweep(args.config, list(args.set), varies, parse_seeds(args.seeds), out, args.product, args.quiet, not args.no_base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
