"""Fedssyn Fig. B.2 as reproduced by sims.mnist: test loss per round, and ζ̂²_p/ζ², σ̂²_p against Lemma 1."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from plots.figure import save


def plot_fig_b2(result: dict, path: Path) -> None:
    """One panel per (partition, E): seed-mean test loss of the server model per round, one line per p."""
    config = result["config"]
    schemes, epochs = config.partitions, config.epochs
    fig, axes = plt.subplots(len(schemes), len(epochs), figsize=(4.6 * len(epochs), 3.6 * len(schemes)), squeeze=False)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(config.p_values)))
    for i, scheme in enumerate(schemes):
        for e, E in enumerate(epochs):
            ax = axes[i, e]
            for color, p in zip(colors, config.p_values):
                idx = [r for r, one in enumerate(result["runs"]) if one.scheme == scheme and one.p == p]
                ax.plot(result["loss"][e, idx].mean(axis=0), color=color, label=f"p={p:g}")
            ax.set(title=f"{scheme}, E={E}", xlabel="round", ylabel="test loss")
            ax.set_yscale("log")
            ax.legend(fontsize=7)
    fig.suptitle(f"softmax regression on {config.dataset}, σ̄²={config.sigma_bar2:g}, B={config.batch_size}")
    fig.tight_layout()
    save(fig, path, dpi=120)
    save(fig, Path(path).with_suffix(".pdf"))
    plt.close(fig)


def plot_dissimilarity(result: dict, path: Path) -> None:
    """Left: measured ζ̂²_p/ζ² (every measurement, all rounds, E and seeds) against (1-p)²; right: σ̂²_p against
    Lemma 1's bound (1-p)σ² + pσ̃² + p(1-p)ζ², per partition."""
    config = result["config"]
    records = result["estimates"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    p_line = np.linspace(0, 1, 101)
    markers = {"iid": "s", "split-by-class": "o"}
    for scheme in config.partitions:
        mine = [d for d in records if d["scheme"] == scheme and d["zeta2"] > 0]
        p = np.array([d["p"] for d in mine])
        axes[0].scatter(p, [d["zeta2_hat"] / d["zeta2"] for d in mine], marker=markers[scheme], alpha=0.5, label=scheme)
        axes[1].scatter(
            [d["sigma2_lemma1"] for d in mine], [d["sigma2_hat"] for d in mine], marker=markers[scheme], alpha=0.5,
            label=scheme,
        )  # fmt: skip
    axes[0].plot(p_line, (1 - p_line) ** 2, "r:", label="(1−p)² (Lemma 1)")
    axes[0].set(title="ζ̂²_p / ζ² at the server model", xlabel="p", ylabel="ratio")
    lims = axes[1].get_xlim()
    axes[1].plot(lims, lims, "k--", linewidth=0.8, label="σ̂²_p = bound")
    axes[1].set(title="σ̂²_p against Lemma 1's bound", xlabel="(1−p)σ² + pσ̃² + p(1−p)ζ²", ylabel="measured σ̂²_p")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path, dpi=120)
    save(fig, Path(path).with_suffix(".pdf"))
    plt.close(fig)
