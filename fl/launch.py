"""The flags that start or continue a run and what they check before the run folder's lock is taken
(:func:`build_parser`, :func:`start_or_resume`) and under it (:func:`locked_config`): ``python -m fl.run``'s and,
entry by entry, a fleet's (:mod:`fl.fleet`).
"""

from __future__ import annotations

import json
from pathlib import Path

import fl.plugins as plugins
import fl.provenance as provenance
from fl.checkpoints import check_init_from
from fl.config import RunConfig, from_dict, load_config
from fl.data import load
from fl.runfolder import check_run_folder, extension_rounds, new_run_folder
from fl.sinks import curves_folder, refuse_tools_folders, require_mlflow, require_tensorboard, resumed_curves
from theory.cli import ArgumentParser
from theory.errors import InputError
from theory.output import read_object, refuse_link, write_text_atomically


def build_parser() -> ArgumentParser:
    """``python -m fl.run``'s flags; each entry of a fleet (:mod:`fl.fleet`) is parsed with them too."""
    parser = ArgumentParser(prog="python -m fl.run", description="Run one FL experiment from a TOML config.")
    add = parser.add_argument
    add("--config", type=Path, help="TOML config (see configs/); defaults apply to anything it leaves out")
    add("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value")
    add("--out", type=Path, help="run directory (default results/runs/<config name>)")
    add(
        "--resume", type=Path, metavar="RUN_DIR",
        help="continue the interrupted run in RUN_DIR; with --set train.rounds=N (that key alone), a finished or "
        "stopped run goes on to N rounds, equal to a run of N rounds from the start",
    )  # fmt: skip
    add(
        "--init-from", type=Path, metavar="CHECKPOINT",
        help="start from another run's checkpoint (same data, model, algorithm and local training, but train.lr and "
        "train.weight_decay may change from there on; e.g. its checkpoint_round49.pt from train.keep_round) instead "
        "of round 1",
    )  # fmt: skip
    add("--overwrite", action="store_true", help="replace an existing run directory's results")
    add("--device", choices=("auto", "cpu", "cuda"), help="shortcut for --set train.device=...")
    add(
        "--workers", type=int, metavar="N",
        help="shortcut for --set train.workers=N (0: the machine's cores, 1: none); allowed with --resume: the "
        "count changes the speed, never the numbers",
    )  # fmt: skip
    add("--compare", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), help="rounds to target and speed-up")
    add("--quiet", action="store_true", help="no progress bar (on a terminal), no line per round (elsewhere)")
    add(
        "--print-config", action="store_true",
        help="print the resolved config (TOML: every key, defaults included) of --config and --set (or of the run "
        "--resume names) and exit without running",
    )  # fmt: skip
    add(
        "--tensorboard", type=curves_folder, metavar="DIR",
        help="write TensorBoard event files of every round into DIR (shortcut for --set log.tensorboard=DIR; allowed "
        "with --resume; needs pip install 'shufflefl[tensorboard]')",
    )  # fmt: skip
    add(
        "--mlflow", type=curves_folder, metavar="DIR",
        help="write every round into the local MLflow tracking store DIR, one MLflow run per run folder (shortcut "
        "for --set log.mlflow=DIR; allowed with --resume; needs pip install 'shufflefl[mlflow]')",
    )  # fmt: skip
    add(
        "--accept-code-change", action="store_true",
        help="with --resume: continue a run that other code started (the change is recorded in provenance.json)",
    )  # fmt: skip
    return parser


def run_flags(args) -> list[str]:
    """The flags of ``args`` that start or continue a run (which ``--compare``, reading two finished runs, refuses)."""
    given = {
        "--config": args.config, "--set": args.set, "--out": args.out, "--resume": args.resume,
        "--init-from": args.init_from, "--overwrite": args.overwrite, "--device": args.device,
        "--workers": args.workers is not None, "--accept-code-change": args.accept_code_change,
        "--tensorboard": args.tensorboard, "--mlflow": args.mlflow, "--print-config": args.print_config,
    }  # fmt: skip
    return [flag for flag, value in given.items() if value]


def resume_in_place(run: Path | None, out: Path | None, overwrite: bool, accept_code_change: bool) -> None:
    """``--resume RUN`` continues RUN in RUN: refuse RUN itself a symbolic link (never written through), an
    ``--out`` elsewhere and ``--overwrite``, and ``--accept-code-change`` without ``--resume`` (fl.run, fl.flower)."""
    if run is None:
        if accept_code_change:
            raise InputError("--accept-code-change continues a run that other code started: it goes with --resume")
        return
    refuse_link(run, "run directory")
    if out is not None and out.resolve() != run.resolve():
        raise InputError(f"--resume continues the run in its own folder {run}; drop --out {out}")
    if overwrite:
        raise InputError("--overwrite starts a run anew, --resume continues one: use one of them")


def start_or_resume(args) -> tuple[Path, RunConfig | None]:
    """What ``fl.run ARGS`` (a start or a ``--resume``) checks before it takes the run folder's lock
    (:func:`checked_start`): the folder and, for a start, the config, its folder then made (:func:`new_run_folder`);
    one line for what is refused."""
    out, config = checked_start(args)
    if config is not None:
        new_run_folder(out, args.overwrite, f"use --resume {out}, --overwrite, or another --out")
    return out, config


def checked_start(args) -> tuple[Path, RunConfig | None]:
    """What :func:`start_or_resume` checks, reading only (no folder made, no earlier run removed): (the run folder,
    the config of a start; None for a resume). A start's folder is checked as :func:`new_run_folder` checks it."""
    overrides = list(args.set) + ([f"train.device={json.dumps(args.device)}"] if args.device else [])
    overrides += [f"train.workers={args.workers}"] if args.workers is not None else []
    overrides += [f"log.tensorboard={json.dumps(str(args.tensorboard))}"] if args.tensorboard else []
    overrides += [f"log.mlflow={json.dumps(str(args.mlflow))}"] if args.mlflow else []
    if args.init_from and args.resume:
        raise InputError("--init-from starts a new run; --resume continues one: use one of them")
    resume_in_place(args.resume, args.out, args.overwrite, args.accept_code_change)
    if args.resume:
        if args.config:
            raise InputError("--resume takes the run's own config; drop --config/--set")
        extension_rounds(args.set)  # a key other than train.rounds refused before the lock
        if not (args.resume / "config.json").is_file():
            raise InputError(f"{args.resume}: not a run directory (no config.json)")
        refuse_tools_folders(args.resume, args.tensorboard, args.mlflow)
        if args.mlflow:
            require_mlflow()
        return args.resume, None
    config = load_config(args.config, overrides)
    out = args.out or Path("results/runs") / (args.config.stem if args.config else "default")
    refuse_tools_folders(out, config.log.tensorboard, config.log.mlflow)  # curves never among another tool's files
    if config.log.tensorboard:
        require_tensorboard()  # before anything is written: one line naming the extra
    if config.log.mlflow:
        require_mlflow()
    if args.init_from:
        check_init_from(config, args.init_from)  # refused before the folder is made
    check_run_folder(out, args.overwrite, f"use --resume {out}, --overwrite, or another --out")
    if args.overwrite and (out / "metrics.jsonl").exists():  # the new run's data found before the old run goes
        load(config.data.dataset, config.data.data_root or None)
    return out, config


def locked_config(args, out: Path, config: RunConfig | None) -> RunConfig:
    """Under the folder's lock: a resumed run's own config (with what a resume may change: the device, the worker
    count, where the curves go, and ``train.rounds`` to more rounds, which :func:`extend` writes into its folder; a
    changed plug-in refused before it is imported), or a started run's written into ``config.json``."""
    if not args.resume:
        write_text_atomically(out / "config.json", json.dumps(config.to_dict(), indent=2))
        return config
    tree = read_object(out / "config.json", "config.json of the run")
    train = tree.setdefault("train", {})
    if not isinstance(train, dict):
        raise InputError(f"{out / 'config.json'}: its [train] is not a table")
    resumed_curves(out, tree.get("log"), args.tensorboard, args.mlflow)  # curves only where the run wrote them, or
    # where the flags say (never where an edited [log] points)
    if args.device:  # what a resumed run may change: the device, the worker count
        train["device"] = args.device
    if args.tensorboard:  # where the curves go: no number changes
        tree.setdefault("log", {})["tensorboard"] = str(args.tensorboard)
    if args.mlflow:
        tree.setdefault("log", {})["mlflow"] = str(args.mlflow)
    if args.workers is not None:
        train["workers"] = args.workers
    recorded = {} if args.accept_code_change else provenance.recorded_plugins(out)
    with plugins.expecting(recorded):  # a changed plug-in is refused before it is imported
        config = from_dict(tree)
    rounds = extension_rounds(args.set)
    if rounds is not None and rounds < config.train.rounds:
        raise InputError(
            f"--set train.rounds={rounds}: the run in {out} has {config.train.rounds} rounds; a run is extended, "
            "never shortened"
        )
    if rounds is not None:
        config = config.extended(rounds)
    if config.log.tensorboard:
        require_tensorboard()
    if config.log.mlflow:
        require_mlflow()
    return config
