"""gpu-bench's fleets on a device: run-rounds per second against the runs in one computation, replayed as a graph
and eagerly (``python -m figures gpu-bench``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from plots.figure import finish


def plot_fleet(curves: dict[str, tuple[list[int], list[float]]], path: Path, title: str = "") -> None:
    """One line per (arm, graphs): run-rounds per second by runs in the fleet (log-2 x axis)."""
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for label, (runs, speed) in curves.items():
        ax.plot(runs, speed, marker="o", lw=1.2, ls="-" if "graph" in label else "--", label=label)
    ax.set(xlabel="runs in one computation (20 clients each)", ylabel="run-rounds per second")
    ax.set_xscale("log", base=2)
    finish(fig, path, title, (ax,))
