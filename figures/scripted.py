"""What the artefacts built from the experiment scripts' runs share (:mod:`figures.fedcog`, :mod:`figures.dynafed`,
:mod:`figures.hfmds`).

Those runs are hours each at the papers' settings (``scripts/fedcog-experiments.sh``, ``dynafed-experiments.sh``,
``hfmds-experiments.sh``); the scripts start and resume them in the run store (``$SHUFFLEFL_RUNS/runs``). The
artefacts run nothing: a build reads the runs as far as they have got, names the rounds each reached, and is
rebuilt with ``--force`` as they go on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from figures.artefacts import Build
from figures.verdict import CONTRADICTED, HELD, direction
from fl.sweep import mean_sd


def runs_root(ctx: Build) -> Path:
    """The folder the experiment scripts write their runs to: ``$SHUFFLEFL_RUNS/runs`` (or ``--runs``/runs)."""
    return ctx.store / "runs"


def rows_of(run: Path) -> list[dict]:
    """The metrics rows of ``run`` (none when it has not started)."""
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_rows(ctx: Build, run: Path) -> list[dict]:
    """:func:`rows_of` ``run``, which the build ``ctx`` names when it has rows (a run never started is not
    evidence, and the ledger check would take it for a deleted entry)."""
    if (run / "metrics.jsonl").exists():
        ctx.use([run])
    return rows_of(run)


def accuracy_numbers(rows: list[dict], target: float = 0.7, last: int = 5) -> dict:
    """Rounds reached, final / best accuracy, the mean of the last ``last`` evaluated rounds, the first round at
    ``target`` (None when never) and the curve [(round, accuracy)] of a run's rows."""
    curve = [(r["round"], r["test_accuracy"]) for r in rows if r.get("test_accuracy") is not None]
    accuracy = [a for _, a in curve]
    return {
        "rounds": rows[-1]["round"] if rows else 0,
        "final": accuracy[-1] if accuracy else None,
        "best": max(accuracy) if accuracy else None,
        "last5": float(np.mean(accuracy[-last:])) if accuracy else None,
        "to_target": next((t for t, a in curve if a >= target), None),
        "curve": curve,
    }


def window_mean(curve: Sequence[tuple[int, float]], first: int, last: int) -> float | None:
    """Mean accuracy over rounds first..last (None when the curve has none of them)."""
    kept = [a for t, a in curve if first <= t <= last]
    return float(np.mean(kept)) if kept else None


def plain(values: Sequence[float | None], digits: int = 2) -> str:
    """Values over seeds as ``mean ± sd`` (sample sd), ``-`` when none; one value alone."""
    kept = [v for v in values if v is not None]
    if not kept:
        return "-"
    mean, sd = mean_sd(kept)
    return f"{mean:.{digits}f}" if len(kept) == 1 else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def points(values: Sequence[float | None], digits: int = 2) -> str:
    """Accuracies (fractions) as ``mean ± sd`` in percent over seeds, ``-`` when none; one value alone."""
    return plain([None if v is None else 100 * v for v in values], digits)


def seed_list(seeds: Sequence[int]) -> str:
    """ "seed 0" or "seeds 0, 1, 2"."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def spread_verdict(gains: Sequence[float], baseline: Sequence[float], method: Sequence[float]) -> str:
    """Whether the mean gain (method − baseline, paired by seed) lies beyond the seed spread: |mean gain| larger
    than sqrt(sd_baseline² + sd_method²) over the seeds; one seed has no spread to judge by."""
    if len(gains) < 2:
        return "one seed: no spread to judge by"
    (_, sa), (_, sb) = mean_sd(list(baseline)), mean_sd(list(method))
    mean_gain, spread = float(np.mean(gains)), float(np.hypot(sa, sb))
    side = "beyond" if direction(method, baseline) in (HELD, CONTRADICTED) else "within"
    return f"{side} the seed spread ({100 * mean_gain:+.2f} points against ±{100 * spread:.2f})"
