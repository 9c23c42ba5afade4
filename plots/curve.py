"""A run's learning curve: test accuracy and test loss per round, side by side (fl.run's ``curve.png``).

Drawn on a :class:`matplotlib.figure.Figure` of its own, never pyplot's global figures, so that runs drawing at
once (a fleet's runs end in threads of one process) never draw into each other's figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure

from plots.figure import save


def plot_curve(
    rounds: Sequence[int], accuracy: Sequence[float], loss: Sequence[float], path: Path, title: str = ""
) -> None:
    """Test accuracy (left) and test loss (right) at each of ``rounds`` into ``path`` (a NaN loss is a gap)."""
    fig = Figure(figsize=(8, 3.2))
    left, right = fig.subplots(1, 2)
    marker = "o" if len(rounds) <= 30 else None
    left.plot(rounds, accuracy, marker=marker, ms=3)
    left.set(xlabel="round", ylabel="test accuracy", ylim=(0, 1))
    right.plot(rounds, loss, marker=marker, ms=3, color="tab:red")
    right.set(xlabel="round", ylabel="test loss")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save(fig, path, dpi=100)
