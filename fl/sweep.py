"""``python -m fl.sweep``: a family of ``fl.run`` experiments around one config, with a table and a figure.

    python -m fl.sweep --config configs/fedssyn_fmnist_vae.toml \\
        --vary method.n_tilde=250,500,1000,2000 --vary method.sample_epoch=1,2,5,10 --seeds 0,1

Each ``--vary KEY=V1,V2,...`` changes one key of the base config at a time (Fedssyn Fig. 4a-b: ρ, ñ, generator
epochs); ``--product`` runs every combination instead (e.g. ``method.name`` × ``algorithm.name``). The base
config itself is run too. Every run is repeated for each seed (``train.seed``: the partition, the generators and
the model's initialisation all derive from it), so the table gives mean ± standard deviation over seeds.

Generators are shared through the synthetic cache: a sweep over ñ or ``sample_epoch`` trains them once.
Runs live in ``OUT/<name>/seed<s>/`` (ordinary ``fl.run`` directories, each run under its lock as ``fl.run``
holds it): a finished run is reused, an interrupted one resumed, so re-running the same command after Ctrl-C
continues where it stopped. Outputs: ``table.csv``, ``sweep.json`` (every run's summary), ``sweep.png`` (accuracy
per round; final accuracy against each value). OUT is fl.sweep's own (theory.cli.make_dir): a non-empty folder that
fl.sweep did not make is refused; ``--overwrite`` writes beside its files, unless one has a name the sweep writes,
which is refused even so (a sweep never replaces a file it did not write).

``--jobs N`` runs N of the runs at a time, each in its own ``python -m fl.run --resume FOLDER`` process with one torch
thread and no client workers (:func:`run_processes`, the pool ``python -m figures --jobs`` runs its arms in): every
draw of a run derives from its seed and each process computes with one thread, so the numbers are those of
``--jobs 1`` bit for bit; each run holds its folder's lock as ``fl.run`` does, and Ctrl-C or SIGTERM checkpoints every
running one (re-running the command resumes them). ``--tensorboard DIR`` writes one TensorBoard run per arm and seed,
``DIR/<name>/seed<s>`` (:mod:`fl.sinks`; a finished run that is reused has its rows written there once);
``--mlflow DIR`` one MLflow run per arm and seed into the local MLflow store DIR (named ``OUT/<name>/seed<s>``).

The base arm (the config with none of the ``--vary`` values; folder ``OUT/base``) is labelled by its values of the
varied keys in the table (column ``arm``) and the figure, e.g. ``method.name=none (base)``: a ``--vary`` value
equal to the base's is that arm, run once. ``--no-base`` leaves it out.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import fl.provenance as provenance
from fl.atomic import locked
from fl.config import RunConfig, load_config, parse_override
from fl.fleet import run_fleet
from fl.loop import execute
from fl.metrics import read_metrics
from fl.runfolder import RUN_LOCK, RUN_NAMES, saved_config
from fl.sinks import (
    MLflow,
    curves_folder,
    curves_path,
    refuse_tools_folders,
    replay,
    require_mlflow,
    require_tensorboard,
)
from theory.cli import OWNER, ArgumentParser, check_seed, format_table, guarded, make_dir, refuse_foreign_folder
from theory.errors import InputError
from theory.output import read_object, refuse_link, to_json, write_csv, write_text_atomically
from theory.verdict import sample_mean_sd as mean_sd

TOOL = "fl.sweep"
ESTIMATES = ("zeta2_ratio", "zeta2_hat", "sigma2_hat", "delta2")
OUTPUTS = ("table.csv", "sweep.json", "sweep.png")  # and a folder per run name, holding seed<s>/ run folders
MAX_RUNS = 10_000  # runs (arms x seeds) a sweep plans at most: each is a config checked and a folder, before any runs


def planned_runs(varies: list[tuple[str, list[str]]], product: bool, seeds: int) -> int:
    """How many runs :func:`plan` would make for ``seeds`` seeds (the base included, before duplicates go), counted
    without making them; a one-line InputError past :data:`MAX_RUNS`, before anything is planned."""
    sizes = [len(overrides) for _, overrides in varies]
    arms = 1 + (math.prod(sizes) if product and sizes else sum(sizes))
    if arms * seeds > MAX_RUNS:
        how = " x ".join(map(str, sizes)) if product else " + ".join(map(str, sizes))
        raise InputError(
            f"{'--product of' if product else '--vary of'} {how} values plans {arms:,} runs x {seeds} seed(s) = "
            f"{arms * seeds:,} runs, over the {MAX_RUNS:,} a sweep takes; vary fewer values (or split the sweep)"
        )
    return arms * seeds


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
    """The folder of run ``name``: its characters kept where a folder name may hold them; where any had to be
    replaced (``data.data_root=/a/x``), a digest of the name follows, so two names never share a folder."""
    kept = "".join(c if c.isalnum() or c in "._=,-" else "_" for c in name)
    return kept if kept == name else f"{kept}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def plugin_change(config: RunConfig, out: Path) -> str | None:
    """How a plug-in's code differs from the code a finished run in ``out`` recorded (its provenance), or None: a
    finished run is reused only as the code that made it."""
    recorded = provenance.recorded_plugins(out)
    for key, now in config.plugins().items():
        then = recorded.get(key, {}) if isinstance(recorded.get(key), dict) else {}
        if then.get("sha256") != now.get("sha256"):
            return f"plug-in {now['spec']} ({key}) is code {now.get('sha256')} now, the run used {then.get('sha256')}"
    return None


def cores_note(jobs: int) -> str:
    """What ``--jobs`` meets: the cores seen, how busy they are (the 1-minute load average), and the choice; a hint
    when the runs will share busy cores (then ``--jobs`` can be slower than one run at a time)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not on every system
        return f"fl.sweep: {jobs} runs at a time on {cores} cores"
    note = f"fl.sweep: {jobs} runs at a time on {cores} cores (1-minute load average {load:.1f})"
    if load + jobs > cores:
        note += "; the runs will share busy cores, which can make --jobs slower than --jobs 1 (each run's clients "
        note += "already use every core)"
    return note


def run_state(config: RunConfig, out: Path, overwrite: bool = False) -> str:
    """What the run folder ``out`` holds for ``config``, read only: "done" (a readable summary.json), "resume" (a
    checkpoint), "restart" (a run of this config that stopped before its first checkpoint) or "start" (no folder,
    an empty one, or one fl.run made). A folder holding another config, a corrupt config.json or summary.json, and
    a non-empty folder without a config.json that fl.run did not make (unless ``overwrite``, and even then where it
    holds a file of a name a run writes: theory.cli.refuse_foreign_folder) are one-line errors, and so is ``out``
    itself a symbolic link (a run folder is never written through one)."""
    refuse_link(out, "run directory")
    if (out / "config.json").exists():
        if saved_config(out).identity() != json.loads(json.dumps(config.identity())):
            raise InputError(f"{out} holds a run of another config; use another --out or remove it")
        if (out / "summary.json").exists():
            read_summary(out)
            changed = plugin_change(config, out)
            if changed:
                raise InputError(f"{out}: {changed} since this run finished; restore it, or remove {out} to run again")
            return "done"
        return "resume" if (out / "checkpoint.pt").exists() else "restart"
    refuse_foreign_folder(out, "run directory", "fl.run", overwrite, RUN_NAMES)
    return "start"


def prepare_run(config: RunConfig, out: Path, overwrite: bool = False) -> str:
    """What ``out`` needs for ``config`` (:func:`run_state`): "done", "resume", or "start" (``config.json``
    written; a run that stopped before its first checkpoint starts again)."""
    state = run_state(config, out, overwrite)
    if state in ("done", "resume"):
        return state
    make_dir(out, "run directory", tool="fl.run", overwrite=overwrite, writes=RUN_NAMES, earlier=state == "restart")
    write_text_atomically(out / "config.json", json.dumps(config.to_dict(), indent=2))
    return "start"


def read_summary(out: Path) -> dict:
    """A finished run's summary.json (a one-line InputError when it is missing, corrupt or not an object)."""
    return read_object(out / "summary.json", "summary.json of a run")


def run_one(config: RunConfig, out: Path, quiet: bool, overwrite: bool = False) -> dict:
    """Finished: read its summary; started: resume; else start (:func:`prepare_run`). The run holds the folder's
    lock, as ``fl.run`` does: a second process on the same folder stops in one line."""
    if prepare_run(config, out, overwrite) == "done":
        return read_summary(out)
    with locked(out / RUN_LOCK, busy=f"run directory {out}"):
        state = prepare_run(config, out)  # again, under the lock: another process may have moved it on
        if state == "done":
            return read_summary(out)
        return execute(config, out, resume=state == "resume", quiet=quiet)


def run_processes(
    pending: Sequence[tuple[RunConfig, Path]], jobs: int, poll: float = 0.5, hold: Callable[[Path], Path] | None = None,
    flags: Callable[[Path], list[str]] | None = None, quiet_output: bool = False, overwrite: bool = False,
) -> None:  # fmt: skip
    """Each run of ``pending`` (config, folder) in its own ``python -m fl.run --resume FOLDER --quiet`` (one torch
    thread, no client workers: ``jobs`` is the parallelism), ``jobs`` at a time. Its folder is made ready first
    (:func:`prepare_run`, under the folder's lock); the process then holds that lock as ``fl.run`` does. ``hold``:
    a lock file per folder held for the whole run as well (``python -m figures``' ``<hash>.lock``); ``flags``: more
    flags per folder; ``quiet_output``: drop the processes' standard output (their errors still show);
    ``overwrite``: as :func:`prepare_run`'s. On Ctrl-C /
    SIGTERM every running one gets SIGTERM (it checkpoints and exits) and is waited for before the interrupt goes
    on; a run that fails stops the others the same way, then the whole with its exit code in one line."""
    queue, running = list(pending), []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "SHUFFLEFL_WORKERS": "1"}
    output = subprocess.DEVNULL if quiet_output else None
    try:
        while queue or running:
            while queue and len(running) < jobs:
                config, folder = queue.pop(0)
                lock = contextlib.ExitStack()
                if hold is not None:
                    lock.enter_context(locked(hold(folder)))
                ready = prepare_run(config, folder, overwrite)  # as run_one: the folder first, then its lock
                if ready != "done":
                    with locked(folder / RUN_LOCK, busy=f"run directory {folder}"):
                        ready = prepare_run(config, folder)
                if ready == "done":  # another process finished it while we waited
                    lock.close()
                    continue
                command = [sys.executable, "-m", "fl.run", "--resume", str(folder), "--quiet"]
                command += flags(folder) if flags is not None else []
                process = subprocess.Popen(command, env=env, stdout=output)
                running.append((process, lock, folder, time.perf_counter()))
            time.sleep(poll)
            for entry in [r for r in running if r[0].poll() is not None]:
                process, lock, folder, start = entry
                running.remove(entry)
                lock.close()
                if process.returncode:
                    raise InputError(f"{folder}: python -m fl.run exited with {process.returncode} (see above)")
                done, total = len(pending) - len(queue) - len(running), len(pending)
                print(f"  finished {folder} ({time.perf_counter() - start:.0f} s; {done} of {total} runs)", flush=True)
    except BaseException:
        for process, *_ in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, lock, *_ in running:
            with contextlib.suppress(KeyboardInterrupt):
                process.wait()
            lock.close()
        raise


def run_as_fleet(runs: Sequence[tuple[RunConfig, Path]], quiet: bool, overwrite: bool = False) -> None:
    """The runs not yet finished, all in this process as one fleet (:func:`fl.fleet.run_fleet`), each holding its
    folder's lock as ``fl.run`` does."""
    with contextlib.ExitStack() as locks:
        pending = []
        for config, folder in runs:
            ready = prepare_run(config, folder, overwrite)
            if ready != "done":
                locks.enter_context(locked(folder / RUN_LOCK, busy=f"run directory {folder}"))
                ready = prepare_run(config, folder)  # again, under the lock
            print(f"{folder} ({ready})", flush=True)
            if ready != "done":
                pending.append((config, folder, ready == "resume"))
        if pending:
            print(f"fleet: {len(pending)} runs in this process, their clients trained together", flush=True)
            run_fleet(pending, quiet=True)


def accuracy_curve(out: Path) -> list[tuple[int, float]]:
    """(round, test accuracy) of every row of a run's metrics.jsonl that has one, but a diverged round's (its model
    is NaN: :func:`fl.metrics.finite_accuracies`); a row that is not a JSON object is a one-line InputError."""
    path = out / "metrics.jsonl"
    curve = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{path}: line {number} is not JSON") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}: line {number} is not a JSON object")
        if row.get("test_accuracy") is not None and "round" in row and not row.get("diverged"):
            curve.append((row["round"], row["test_accuracy"]))
    return curve


def shown_value(value) -> str:
    """A config value as a ``--vary`` would give it: ``0.5``, ``none``, ``true``, ``[0.1, 0.05]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(shown_value, value)) + "]"
    return str(value)


def base_values(config: RunConfig, keys: list[str]) -> dict[str, str]:
    """The base config's value of each varied key (``section.key``), as :func:`shown_value` writes it; a key the
    base's method or algorithm does not have (another method's) is "unset"."""
    tree = config.to_dict()
    tree["algorithm"] = tree["algorithm_fields"]  # every hyper-parameter, its default included
    out = {}
    for key in keys:
        section, _, name = key.partition(".")
        table = tree.get(section, {})
        out[key] = shown_value(table[name]) if name in table else "unset"
    return out


def arm_label(name: str, values: dict[str, str]) -> str:
    """What the table and the figure call the run ``name``: the base arm by its values of the varied keys,
    ``method.name=none (base)`` (``base`` alone where nothing is varied); any other arm by its name."""
    if name != "base" or not values:
        return name
    return ",".join(f"{key}={value}" for key, value in values.items()) + " (base)"


def aggregate(name: str, summaries: list[dict], label: str | None = None) -> dict:
    """Mean and standard deviation over seeds of the numbers a sweep reports (``label``: what the run is called
    in the table's ``arm`` column, :func:`arm_label`; its name where not given)."""

    row = {"run": name, "arm": label or name, "seeds": len(summaries)}
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
    row["worst_client_accuracy"] = mean_sd([(s.get("worst_client") or {}).get("accuracy") for s in summaries])[0]
    return row


@dataclass(frozen=True)
class Sweep:
    """What one sweep runs and how: the base config (``config_path`` with the ``base`` overrides), each ``varies``
    key's values (one arm per value, or every combination with ``product``), the ``seeds``, the folder ``out``
    (fl.sweep's own; ``overwrite``: or any, see :func:`sweep_folder`), with or without the base arm
    (``with_base``); ``jobs`` runs at a time (:func:`run_processes`; 1: one after another in this process) or every
    run in this process (``fleet``: their clients' training one computation, :mod:`fl.fleet`); ``tensorboard``: a
    TensorBoard run per arm and seed there; ``mlflow``: a local MLflow store, an MLflow run per arm and seed."""

    config_path: Path | None
    base: list[str]
    varies: list[tuple[str, list[str]]]
    seeds: list[int]
    out: Path
    product: bool = False
    quiet: bool = False
    with_base: bool = True
    overwrite: bool = False
    jobs: int = 1
    tensorboard: Path | None = None
    fleet: bool = False
    mlflow: Path | None = None

    def folder(self, name: str, seed: int) -> Path:
        """The run folder of arm ``name``, seed ``seed``."""
        return self.out / run_dir_name(name) / f"seed{seed}"


Planned = tuple[list[tuple[str, list[str]]], dict[tuple[str, int], RunConfig], dict]


def planned(s: Sweep) -> Planned:
    """The arms (name, overrides) that run, every (arm, seed)'s config (all checked before anything runs) and the
    base's values of the varied keys. A variation equal to the base config (e.g. its own value) is the base run."""
    planned_runs(s.varies, s.product, len(s.seeds))  # said at once: a plan past the bound is never built
    runs = plan(s.base, s.varies, s.product)
    configs = {
        (name, seed): load_config(s.config_path, [*overrides, f"train.seed={seed}"])
        for name, overrides in runs
        for seed in s.seeds
    }
    base_runs = [(name, o) for name, o in runs[1:] if all(configs[name, t] == configs["base", t] for t in s.seeds)]
    values = base_values(configs["base", s.seeds[0]], [key for key, _ in s.varies])
    for name, _ in base_runs:
        print(f"{name} is the base config: reported as '{arm_label('base', values)}' (folder base)")
    runs = [run for run in runs if run not in base_runs]
    if not s.with_base:
        if len(runs) == 1:
            raise InputError("--no-base needs at least one --vary")
        runs = runs[1:]
    return runs, configs, values


def prepared(s: Sweep, runs: list[tuple[str, list[str]]], configs: dict) -> dict:
    """Check every run folder and the curves folders (none another tool's output folder) before anything is
    written, claim ``s.out``, and point each run's curves at its own TensorBoard folder (DIR/<arm>/seed<s>) and
    the MLflow store: the configs the runs run with."""
    refuse_link(s.out, "sweep folder")
    for name, _ in runs:
        refuse_link(s.out / run_dir_name(name), "a sweep's folder of runs")
        for seed in s.seeds:
            run_state(configs[name, seed], s.folder(name, seed), s.overwrite)
    refuse_tools_folders(s.out, s.tensorboard, s.mlflow)  # never among another tool's files
    sweep_folder(s.out, s.overwrite)
    if s.tensorboard is not None:
        require_tensorboard()
        curves = {(name, seed): curves_path(s.tensorboard, run_dir_name(name), f"seed{seed}") for name, _ in runs
                  for seed in s.seeds}  # fmt: skip
        configs = {k: replace(c, log=replace(c.log, tensorboard=str(curves[k]))) for k, c in configs.items()
                   if k in curves}  # fmt: skip
    if s.mlflow is not None:
        require_mlflow()
        configs = {k: replace(c, log=replace(c.log, mlflow=str(s.mlflow))) for k, c in configs.items()}
    return configs


def run_elsewhere(s: Sweep, runs: list[tuple[str, list[str]]], configs: dict) -> None:
    """The runs not done yet, ``s.jobs`` processes at a time, or all in this process as a fleet (``s.fleet``);
    with neither, :func:`collect` runs them one after another."""
    if s.jobs > 1:
        print(cores_note(s.jobs), flush=True)
        pending = []
        for index, (name, _) in enumerate(runs):
            for seed in s.seeds:
                folder = s.folder(name, seed)
                state = run_state(configs[name, seed], folder, s.overwrite)
                print(f"[{index + 1}/{len(runs)}] {name} seed {seed} -> {folder} ({state})", flush=True)
                if state != "done":
                    pending.append((configs[name, seed], folder))

        def curve_flags(folder: Path) -> list[str]:  # the run's own TensorBoard folder, DIR/<name>/seed<s>
            flags = ["--tensorboard", str(s.tensorboard / folder.parent.name / folder.name)] if s.tensorboard else []
            return flags + (["--mlflow", str(s.mlflow)] if s.mlflow is not None else [])

        run_processes(pending, s.jobs, flags=curve_flags, quiet_output=True, overwrite=s.overwrite)
    if s.fleet:
        run_as_fleet([(configs[name, seed], s.folder(name, seed)) for name, _ in runs for seed in s.seeds],
                     s.quiet, s.overwrite)  # fmt: skip


def collect(s: Sweep, runs: list[tuple[str, list[str]]], configs: dict, values: dict) -> tuple[dict, list[dict]]:
    """Each arm's summaries and curves (running each run here when no other process or fleet did), its curves
    replayed into TensorBoard and MLflow where asked, and its row of the table."""
    results, rows = {}, []
    for index, (name, _) in enumerate(runs):
        summaries = []
        for seed in s.seeds:
            folder = s.folder(name, seed)
            if s.jobs > 1 or s.fleet:
                summaries.append(read_summary(folder))
            else:
                print(f"[{index + 1}/{len(runs)}] {name} seed {seed} -> {folder}", flush=True)
                summaries.append(run_one(configs[name, seed], folder, s.quiet, s.overwrite))
            if s.tensorboard is not None:  # a reused finished run: its rows, once
                replay(read_metrics(folder / "metrics.jsonl"), curves_path(s.tensorboard, run_dir_name(name),
                       f"seed{seed}"), str(folder.resolve()))  # fmt: skip
            if s.mlflow is not None:  # the same: the rounds the store does not hold yet
                with MLflow(s.mlflow, read_metrics(folder / "metrics.jsonl"), str(folder.resolve()), str(folder)):
                    pass
        results[name] = {
            "label": arm_label(name, values),
            **({"base_values": values} if name == "base" else {}),
            "overrides": dict(runs)[name],
            "summaries": summaries,
            "curves": [accuracy_curve(s.folder(name, seed)) for seed in s.seeds],
        }
        rows.append(aggregate(name, summaries, arm_label(name, values)))
    return results, rows


def write_sweep(s: Sweep, results: dict, rows: list[dict]) -> None:
    """table.csv, sweep.json and sweep.png into ``s.out``, and the table printed."""
    headers = list(rows[0])
    write_csv(s.out / "table.csv", headers, [[row[h] for h in headers] for row in rows])
    write_text_atomically(
        s.out / "sweep.json", json.dumps(to_json({"seeds": s.seeds, "product": s.product, "runs": results}), indent=1)
    )
    from plots.sweep import plot_sweep

    plot_sweep(results, [key for key, _ in s.varies], s.product, s.out / "sweep.png")
    shown = ["arm", "seeds", "final_test_accuracy", "final_test_accuracy_std", "rounds_to_target", "reached_target"]
    shown += ["diverged"] if any(r["diverged"] for r in rows) else []
    shown += [k for k in ("zeta2_ratio", "delta2", "dp_epsilon") if any(np.isfinite(r[k]) for r in rows)]
    print(format_table(shown, [[row[h] for h in shown] for row in rows]))
    print(f"table: {s.out / 'table.csv'}  figure: {s.out / 'sweep.png'}")


def sweep(s: Sweep) -> list[dict]:
    """Run (or reuse) every run of the sweep ``s`` and write its table, record and figure: the table's rows."""
    s = replace(s, seeds=[check_seed(seed, "a sweep's seed") for seed in s.seeds])
    runs, configs, values = planned(s)
    configs = prepared(s, runs, configs)
    run_elsewhere(s, runs, configs)
    results, rows = collect(s, runs, configs, values)
    write_sweep(s, results, rows)
    return rows


def _is_seed_run(folder: Path) -> bool:
    return folder.is_dir() and folder.name.startswith("seed") and (folder / "config.json").is_file()


def earlier_sweep(out: Path) -> bool:
    """Whether ``out`` is a sweep folder written before folders had owner files: no owner file, at least one
    folder of ``seed<s>/`` run folders (each with a config.json), nothing else but fl.sweep's outputs, and a
    sweep.json, where there is one, that is a sweep's."""
    try:
        if (out / OWNER).exists():
            return False
        runs = 0
        for entry in out.iterdir():
            if entry.is_dir():
                seeds = list(entry.iterdir())
                if not (seeds and all(_is_seed_run(seed) for seed in seeds)):
                    return False
                runs += 1
            elif entry.name not in OUTPUTS:
                return False
        if (out / "sweep.json").exists() and "runs" not in read_object(out / "sweep.json", "sweep.json"):
            return False
        return runs > 0
    except (OSError, InputError):
        return False


def sweep_folder(out: Path, overwrite: bool = False) -> Path:
    """``out`` made (or taken) as fl.sweep's folder: a non-empty folder that fl.sweep did not make is refused in
    one line unless ``overwrite``, and even then where it holds a file of a name the sweep writes (:data:`OUTPUTS`;
    theory.cli.make_dir), except a sweep folder of before owner files (:func:`earlier_sweep`), which is taken as
    fl.sweep's."""
    return make_dir(out, "sweep folder", tool=TOOL, overwrite=overwrite, writes=OUTPUTS, earlier=earlier_sweep(out))


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` -> [0, 1, 2]: distinct seeds, each a whole number from 0 to 2^32-1 (theory.cli.check_seed)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds {text!r}: expected whole numbers separated by commas, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text!r}: give distinct whole numbers")
    return [check_seed(seed, f"--seeds {text!r}: each seed") for seed in seeds]


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m fl.sweep", description="A family of fl.run experiments, table + figure.")
    add = parser.add_argument
    add("--config", type=Path, help="base TOML config")
    add("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a base config value")
    add("--vary", action="append", default=[], metavar="SECTION.KEY=V1,V2", help="values to sweep (repeatable)")
    add("--product", action="store_true", help="every combination of the --vary values (default: one at a time)")
    add("--seeds", default="0", help="seeds, e.g. 0,1,2 (default 0)")
    add("--out", type=Path, help="sweep folder (default results/sweeps/<config name>)")
    add(
        "--overwrite", action="store_true",
        help="write into a non-empty --out (and run folders in it) that fl.sweep (fl.run) did not make, beside the "
        "files there; one holding a file of a name it writes is refused even so",
    )  # fmt: skip
    add("--no-base", action="store_true", help="run only the variations, not the base config itself")
    add("--quiet", action="store_true", help="no per-round progress bars")
    add(
        "--jobs", type=int, default=1, metavar="N",
        help="runs at a time, each its own fl.run process with one torch thread (default 1: one after another)",
    )  # fmt: skip
    add(
        "--fleet", action="store_true",
        help="every run in this process, their clients' local training one batched computation (fl.fleet)",
    )  # fmt: skip
    add(
        "--tensorboard",
        type=curves_folder,
        metavar="DIR",
        help="TensorBoard event files, one run per arm and seed: DIR/NAME/seedS",
    )
    add(
        "--mlflow", type=curves_folder, metavar="DIR",
        help="a local MLflow tracking store, one MLflow run per arm and seed (pip install 'shufflefl[mlflow]')",
    )  # fmt: skip
    return parser


@guarded(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    varies = [parse_vary(v) for v in args.vary]
    keys = [key for key, _ in varies]
    if len(set(keys)) != len(keys):
        raise InputError("--vary: each key once (put all its values in one --vary)")
    if "train.seed" in keys + [".".join(parse_override(text)[0]) for text in args.set]:
        raise InputError("fl.sweep sets train.seed of every run from --seeds (e.g. --seeds 0,1,2); drop train.seed")
    if args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: give a whole number >= 1")
    if args.fleet and args.jobs > 1:
        raise InputError("--fleet runs every run in this process: drop --jobs")
    out = args.out or Path("results/sweeps") / (args.config.stem if args.config else "default")
    seeds = parse_seeds(args.seeds)
    sweep(
        Sweep(args.config, list(args.set), varies, seeds, out, args.product, args.quiet, not args.no_base,
              args.overwrite, args.jobs, args.tensorboard, args.fleet, args.mlflow)
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
