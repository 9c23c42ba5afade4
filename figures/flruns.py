"""The ``fl.run`` experiments behind the FL artefacts, kept once and shared.

An artefact names *arms* (a label and ``--set`` overrides) on top of a scale's :class:`Protocol` (a base TOML config,
its overrides, the seeds). Each (arm, seed) is one ordinary ``fl.run`` directory under ``ROOT/_runs/<hash>``, the
hash taken over the resolved config: two artefacts asking for the same experiment (Fig. 3's FedAvg arms are Table
1's and Fig. 5's) share one run, a finished run is read back, an interrupted one resumed (:func:`fl.sweep.run_one`).
Fedssyn's generators are cached in ``ROOT/_synthetic``, shared by every run that trains the same ones.

With ``jobs`` > 1 (``python -m figures --jobs N``: the :class:`~figures.artefacts.Build`'s ``jobs``) independent runs go
N at a time to their own processes, ``python -m fl.run --resume FOLDER`` with one torch thread each: the small CNNs of
the cpu scale train faster as N one-thread processes than as one N-thread process. Ctrl-C or SIGTERM reaches every such
process, which saves its checkpoint and stops, and the build waits for them: the next invocation resumes. A run folder
is locked while it runs (``<hash>.lock``), so two builds sharing a run never write it together: the second waits and
reads the first's result.

A :class:`~figures.artefacts.Build` with a ``plan`` (``python -m figures status``) makes :func:`run_arms` record the
runs instead: it returns None, and a builder stops there (:func:`plan`).

Seeds are summarised as mean ± sample standard deviation, and two arms differ "beyond the seed spread" when their
means differ by more than the combined standard deviation sqrt(sd_a² + sd_b²) (:func:`beyond`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from figures.artefacts import Artefact, Build, Plan
from figures.verdict import HELD, censored_mark, direction
from fl.atomic import locked
from fl.config import RunConfig, load_config
from fl.experiment import missing_prepared
from fl.metrics import read_metrics
from fl.sweep import mean_sd, run_one
from fl.sweep import run_processes as sweep_processes
from lab.records.keys import LEDGER_MARK, RUNS, SYNTHETIC, run_key
from plots.figure import save as save_figure
from theory.errors import InputError


class NotInStore(InputError):
    """Raised by :func:`run_arms` on a run ledger (read only) when runs an artefact needs are missing or partial:
    the message names each of them."""


def read_only(runs: Path) -> bool:
    """Whether the run store ``runs`` is a run ledger, which builds read and never train in."""
    return (runs / LEDGER_MARK).exists()


@dataclass(frozen=True)
class Protocol:
    """A scale's experiment: base TOML ``config``, ``overrides`` on it, ``seeds`` (``train.seed``)."""

    config: str
    overrides: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Arm:
    """One bar, line or row: ``label`` (tables and legends) and its ``overrides`` on the protocol."""

    label: str
    overrides: tuple[str, ...] = ()


@dataclass
class Result:
    """An arm's runs over the seeds: their summaries and per-round metrics rows (``fl.run``'s files)."""

    arm: Arm
    summaries: list[dict]
    rows: list[list[dict]]

    def values(self, key: str) -> list:
        return [s.get(key) for s in self.summaries]

    def estimate(self, key: str) -> list[float | None]:
        """Per seed, the mean over the measured rounds of estimator ``key`` (ζ̂², σ̂², δ², ...)."""
        return [s["estimates_mean"].get(key) for s in self.summaries]

    def curve(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(rounds, values per seed x round) of a metrics key (``test_accuracy``) or an estimate (``zeta2_ratio``);
        NaN where a seed has no value at a round."""
        per_seed = []
        for rows in self.rows:
            per_seed.append({r["round"]: r.get(key, r.get("estimates", {}).get(key)) for r in rows})
        rounds = sorted({t for seed in per_seed for t, v in seed.items() if v is not None})
        table = np.array([[np.nan if s.get(t) is None else s[t] for t in rounds] for s in per_seed], dtype=float)
        return np.array(rounds), table


def config_of(protocol: Protocol, arm: Arm, seed: int, root: Path) -> RunConfig:
    """The resolved config of (arm, seed); methods with a generator cache keep it under ``root``."""
    cache = f"method.cache_dir={json.dumps(str(root / SYNTHETIC))}"  # dropped by methods without a cache
    overrides = [*protocol.overrides, *arm.overrides, f"train.seed={seed}", cache]
    return load_config(protocol.config, overrides, notes=[])  # "method none has no key rho": expected, unshown


def run_folder(config: RunConfig, root: Path) -> Path:
    return root / RUNS / run_key(config)


def lock_file(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


def run_locked(config: RunConfig, folder: Path) -> dict:
    """:func:`fl.sweep.run_one` (reuse, resume or start) in this process, holding the folder's lock; the rounds'
    progress bar shows on a terminal."""
    with locked(lock_file(folder)):
        return run_one(config, folder, quiet=False)


def run_processes(pending: Sequence[tuple[RunConfig, Path]], jobs: int, poll: float = 0.5) -> None:
    """Each run in its own ``python -m fl.run --resume FOLDER`` (one torch thread), ``jobs`` at a time, each holding
    its folder's lock (:func:`fl.sweep.run_processes`, with the store's ``<hash>.lock`` held as well). On Ctrl-C /
    SIGTERM every running one gets SIGTERM (it checkpoints and exits) and is waited for before the interrupt goes
    on; a run that fails stops the build with its exit code."""
    sweep_processes(pending, jobs, poll, hold=lock_file)


def run_arms(ctx: Build, name: str, protocol: Protocol, arms: Sequence[Arm]) -> list[Result] | None:
    """Every (arm, seed) run in ``ctx``'s store, reused, resumed or started (``ctx.jobs`` at a time), one progress
    line each; the results in ``arms``' order. While planning (``ctx.plan``) the runs are recorded there and none
    is run or read: None, and the builder returns."""
    root = ctx.store
    configs = [[config_of(protocol, arm, seed, root) for seed in protocol.seeds] for arm in arms]  # all checked first
    tasks = [(arm, seed, config, run_folder(config, root)) for arm, per_seed in zip(arms, configs)
             for seed, config in zip(protocol.seeds, per_seed)]  # fmt: skip
    if ctx.plan is not None:
        ctx.plan.tasks.extend((name, arm.label, seed, config, folder) for arm, seed, config, folder in tasks)
        return None
    ctx.use(folder for *_, folder in tasks)
    if read_only(root):
        absent = [(arm, seed, config, folder) for arm, seed, config, folder in tasks
                  if not (folder / "summary.json").exists()]  # fmt: skip
        if not any(folder.exists() for *_, folder in tasks):
            raise NotInStore(f"none of its {len(tasks)} runs is in {root}")
        if absent:
            named = "; ".join(f"{arm.label}, seed {seed} ({folder.name}: {reached(config, folder)})"
                              for arm, seed, config, folder in absent)  # fmt: skip
            raise NotInStore(f"{len(absent)} of its {len(tasks)} runs are not finished in {root}: {named}")
    for k, (arm, seed, _, folder) in enumerate(tasks, 1):
        state = "reused" if (folder / "summary.json").exists() else "to run"
        print(f"  {name} [{k}/{len(tasks)}] {arm.label}, seed {seed}: {state} ({folder})", flush=True)
    pending = [(config, folder) for _, _, config, folder in tasks if not (folder / "summary.json").exists()]
    if ctx.jobs > 1 and len(pending) > 1:
        run_processes(pending, ctx.jobs)
    else:
        for config, folder in pending:
            run_locked(config, folder)
    results = []
    for arm, per_seed in zip(arms, configs):
        folders = [run_folder(config, root) for config in per_seed]
        summaries = [json.loads((f / "summary.json").read_text()) for f in folders]
        results.append(Result(arm, summaries, [read_metrics(f / "metrics.jsonl") for f in folders]))
    return results


def absent_data(protocol: Protocol, arm: Arm, root: Path) -> str | None:
    """Why an arm whose data come from elsewhere (a GPU lease's DDPM sets, unpacked into the store's ``_synthetic``
    with ``python -m fl.synthesis unpack``) cannot be had here, or None: each of its runs is finished in the run
    store ``root``, or finds every client's synthetic set in the cache (:func:`fl.experiment.missing_prepared`) and
    so trains no generator on this machine. A run ledger only reads: there an unfinished run is absent."""
    runs = {seed: (c, run_folder(c, root)) for seed in protocol.seeds for c in [config_of(protocol, arm, seed, root)]}
    unfinished = {seed: run for seed, run in runs.items() if progress(*run)["state"] != "done"}
    if unfinished and read_only(root):
        states = {seed: reached(*cf) for seed, cf in unfinished.items()}
        if all(state == "absent" for state in states.values()):
            generator = next(iter(runs.values()))[0].method.get("generator", "")
            needs = " (its sets need a GPU)" if generator == "ddpm" else ""
            return f"not run{needs}: no run in the ledger"
        seeds = ", ".join(f"seed {seed} ({state})" for seed, state in states.items())
        return f"not finished in the run ledger: {seeds}"
    why = []
    for seed, (config, _) in unfinished.items():
        if missing := missing_prepared(config):
            generator = config.method.get("generator", config.method["name"])
            why.append(f"seed {seed}: {len(missing)} of {config.data.clients} clients' {generator} sets are not in "
                       f"{root / SYNTHETIC}")  # fmt: skip
    return "; ".join(why) or None


def run_with_optional(
    ctx: Build, name: str, protocol: Protocol, arms: Sequence[Arm], optional: Sequence[Arm]
) -> tuple[list[Result], dict[str, Result], list[str]] | None:
    """:func:`run_arms` of ``arms`` and of those ``optional`` arms whose data are here (:func:`absent_data`), in one
    go: (the results of ``arms`` in order, the optional arms' results by label, one note per reason for leaving
    optional arms out). While planning, the arms left out are recorded with the runs, and it returns None."""
    ready, left_out = [], {}
    for arm in optional:
        why = absent_data(protocol, arm, ctx.store)
        if why:
            left_out.setdefault(why, []).append(arm.label)  # arms sharing one cache share the reason: one note
        else:
            ready.append(arm)
    if ctx.plan is not None:
        ctx.plan.left_out.extend((name, label, why) for why, labels in left_out.items() for label in labels)
    results = run_arms(ctx, name, protocol, [*arms, *ready])
    if results is None:
        return None
    notes = [f"{'; '.join(labels)}: left out, {why}" for why, labels in left_out.items()]
    return results[: len(arms)], {r.arm.label: r for r in results[len(arms) :]}, notes


def plan(artefact: Artefact, scale: str, root: Path, runs: Path | None = None) -> Plan:
    """The runs an FL artefact would use at ``scale`` (run store: ``runs``, else ``$SHUFFLEFL_RUNS``, else
    ``root``), without running or reading any: its build with a :class:`~figures.artefacts.Plan`, in which
    :func:`run_arms` records each (artefact, arm, seed, config, folder) and :func:`run_with_optional` each optional
    arm it would leave out (artefact, arm, reason); the build stops at its first :func:`run_arms`."""
    recorded = Plan()
    artefact.build(artefact.context(scale, root, runs=runs, plan=recorded))
    return recorded


def progress(config: RunConfig, folder: Path) -> dict:
    """A run folder's state: done, partial (rounds done, measured seconds per round) or not started."""
    rounds = config.train.rounds
    if (folder / "summary.json").exists():
        return {"state": "done", "round": rounds, "rounds": rounds}
    rows = read_metrics(folder / "metrics.jsonl") if (folder / "metrics.jsonl").exists() else []
    if not rows:
        return {"state": "not started", "round": 0, "rounds": rounds}
    per_round = rows[-1]["seconds"] / len(rows)
    return {"state": "partial", "round": rows[-1]["round"], "rounds": rounds, "seconds_per_round": per_round}


def reached(config: RunConfig, folder: Path) -> str:
    """A run's progress in words: "absent" or "round r of R"."""
    state = progress(config, folder)
    return "absent" if state["state"] == "not started" else f"round {state['round']} of {state['rounds']}"


def show(values: Sequence[float | None], digits: int = 3) -> str:
    """``mean ± sd`` over seeds ("-" when no value; "a ± b (k of n)" when only k seeds have one)."""
    mean, sd = mean_sd(values)
    if not np.isfinite(mean):
        return "-"
    kept = sum(v is not None for v in values)
    text = f"{mean:.{digits}g} ± {sd:.2g}" if len(values) > 1 else f"{mean:.{digits}g}"
    return text if kept == len(values) else f"{text} ({kept} of {len(values)})"


def beyond(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """Whether mean(a) exceeds mean(b) by more than the combined seed spread sqrt(sd_a² + sd_b²), two seeds or
    more on each side: :func:`figures.verdict.direction` says held."""
    return direction(a, b) == HELD


def seeds_text(protocol: Protocol) -> str:
    """ "mean ± sd over 2 seeds" (or "1 seed": no spread)."""
    n = len(protocol.seeds)
    return f"mean ± sd over {n} seeds" if n > 1 else "1 seed"


CAPPED = "never reached: last round + 1"


def rounds_or_cap(result: Result) -> list[float]:
    """Rounds to the target per seed, a run that never reached it counted as its last round + 1 (a lower bound on
    its true count: speed-ups computed from it are lower bounds when the baseline never reached the target)."""
    return [s["rounds_to_target"] or s["rounds"] + 1 for s in result.summaries]


def censored(result: Result) -> list[bool]:
    """Per seed, whether the run never reached the target (its rounds count is then a lower bound)."""
    return [not s["rounds_to_target"] for s in result.summaries]


def show_rounds(result: Result) -> str:
    """Rounds to the target, ``mean ± sd`` over seeds, a seed that never reached it counted as its last round + 1;
    marked "≥" when one did (the mean is then a lower bound)."""
    return censored_mark(any(censored(result)), False) + show(rounds_or_cap(result))


def show_ratio(without: Result, with_: Result, ratios: Sequence[float]) -> str:
    """A rounds ratio without / with (a speed-up), marked "≥" when a run without never reached the target (its
    count is a lower bound), "≤" when one with it never did, "?" when both."""
    return censored_mark(any(censored(without)), any(censored(with_))) + show(ratios)


def save(ctx: Build, fig, name: str) -> list[str]:
    """PNG (for the report) and PDF (for a paper) of ``fig`` as ``name`` in the build's folder; their names
    (relative to it). Not drawn where ``ctx.draw`` is off (:func:`figures.ledger.rebuild`)."""
    path = ctx.folder / name
    if ctx.draw:
        fig.tight_layout(rect=(0, 0, 1, 0.95) if fig.get_suptitle() else None)  # room for the title
        save_figure(fig, path.with_suffix(".png"), dpi=120)  # each through a temporary file, never via a link
        save_figure(fig, path.with_suffix(".pdf"))
    plt.close(fig)
    return [path.with_suffix(".png").name, path.with_suffix(".pdf").name]
