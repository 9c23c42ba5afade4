"""Per-client accuracy over rounds: one box per evaluated round (fl.run's ``clients.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from plots.figure import save


def plot_clients(rounds: Sequence[int], accuracies: Sequence[Sequence[float]], path: Path) -> None:
    """A box of the clients' held-out accuracies at each of ``rounds``, the worst client's marked."""
    fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * len(rounds) + 2), 3.2))
    ax.boxplot([list(a) for a in accuracies], positions=range(len(rounds)), widths=0.6)
    ax.plot(range(len(rounds)), [min(a) for a in accuracies], "rv", ms=4, label="worst client")
    step = max(1, len(rounds) // 12)
    ax.set_xticks(range(0, len(rounds), step), [str(t) for t in rounds][::step])
    ax.set(xlabel="round", ylabel="held-out accuracy per client", ylim=(0, 1))
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path, dpi=120)
    plt.close(fig)
