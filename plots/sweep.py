"""The figure of ``python -m fl.sweep``: per swept key, test accuracy per round (mean over seeds, min-max band)
and the final accuracy of each value (mean ± standard deviation over the seeds whose model is a number; a value
with diverged seeds says how many). The base arm is shown by its value of
the panel's key, ``none (base)``, where ``results`` gives its values (``base_values``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from plots.figure import save


def _groups(results: dict, keys: list[str], product: bool) -> list[tuple[str, list[str]]]:
    names = list(results)
    if product or not keys:
        return [("all runs", names)]
    base = ["base"] if "base" in results else []
    return [(key, base + [n for n in names if n.split("=", 1)[0] == key]) for key in keys]


def _label(name: str, key: str, results: dict) -> str:
    """A run's name in the panel of ``key``: its value of ``key``; the base arm's value with "(base)" (its whole
    label, ``results[name]["label"]``, in a panel of every run)."""
    if name.startswith(key + "="):
        return name.split("=", 1)[1]
    values = results[name].get("base_values") or {}
    if key in values:
        return f"{values[key]} (base)"
    return results[name].get("label") or name


def plot_sweep(results: dict, keys: list[str], product: bool, path: Path) -> None:
    """``results``: run name -> {"curves": per seed [(round, accuracy)], "summaries": per seed summary, and
    optionally "label" (what the run is called) and, for the base arm, "base_values" (its value of each swept
    key)}."""
    groups = _groups(results, keys, product)
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.6 * len(groups)), squeeze=False)
    for (key, names), (left, right) in zip(groups, axes):
        finals, errors, ticks = [], [], []
        for name in names:
            ticks.append(_label(name, key, results))
            curves = [c for c in results[name]["curves"] if c]
            if not curves:
                finals.append(np.nan)
                errors.append(0.0)
                continue
            length = min(len(c) for c in curves)
            rounds = np.array([r for r, _ in curves[0][:length]])
            acc = np.array([[a for _, a in c[:length]] for c in curves])
            line = left.plot(rounds, acc.mean(0), label=_label(name, key, results))[0]
            if len(acc) > 1:
                left.fill_between(rounds, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.2)
            final = [a for a in (s.get("final_test_accuracy") for s in results[name]["summaries"])
                     if isinstance(a, int | float) and np.isfinite(a)]  # a diverged run's is no number  # fmt: skip
            finals.append(np.mean(final) if final else np.nan)
            lost = len(results[name]["summaries"]) - len(final)
            ticks[-1] += f" ({lost} of {len(results[name]['summaries'])} diverged)" if lost else ""
            errors.append(np.std(final, ddof=1) if len(final) > 1 else 0.0)
        left.set_xlabel("round")
        left.set_ylabel("test accuracy")
        left.set_title(key, fontsize=9)
        left.legend(fontsize=7)
        positions = np.arange(len(names))
        right.errorbar(positions, finals, yerr=errors, fmt="o", capsize=3)
        right.set_xticks(positions, ticks, rotation=30, ha="right", fontsize=7)
        right.set_ylabel("final test accuracy")
        right.set_title(f"{key}: final accuracy (mean ± sd over seeds)", fontsize=9)
    fig.tight_layout()
    save(fig, path, dpi=110)
    plt.close(fig)
