"""DynaFed arms matched in several precisions: test accuracy over rounds and the matching loss over iterations
(``python -m figures.precision``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from plots.figure import finish


def plot_precision(curves: dict[str, tuple[list, list]], losses: dict[str, tuple[list, list]], path: Path,
                   title: str = "") -> None:  # fmt: skip
    """Left: each arm's test accuracy (%) by round; right: its logged matching loss by outer iteration."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for label, (rounds, accuracy) in curves.items():
        left.plot(rounds, [100 * a for a in accuracy], lw=1.2, label=label)
    for label, (iterations, loss) in losses.items():
        right.plot(iterations, loss, lw=1.0, label=label)
    left.set(xlabel="round", ylabel="test accuracy (%)")
    right.set(xlabel="outer iteration", ylabel="matching loss")
    finish(fig, path, title, (left, right))
