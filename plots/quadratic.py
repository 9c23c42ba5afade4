"""Fig. 2 of Fedssyn as reproduced by sims.quadratic: four panels from the experiment's result dictionaries."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from plots.figure import save


def plot_fig2(panel_a: dict, panels: dict, path: Path) -> None:
    """(a) error per round per σ², p; (b) tuned error curves with fitted R_p bars; (c) A_p/A_0 vs theory; (d) ζ*²."""
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6))
    ax = axes[0]
    styles = ["-", "--", ":", "-."]
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(panel_a["p"])))
    for level, sigma2 in enumerate(panel_a["sigma2"]):
        for j, p in enumerate(panel_a["p"]):
            ax.semilogy(
                panel_a["errors"][level, j],
                styles[level % 4],
                color=colors[j],
                label=f"σ²={sigma2:g}, p={p:g}" if level == 0 or j == 0 else None,
            )
    ax.set(title="(a) fixed step: error per round", xlabel="round", ylabel="‖x_t − x*‖²")
    ax.legend(fontsize=7, ncol=2)

    ax = axes[1]
    p = panels["p"]
    show = np.unique(np.linspace(0, p.size - 1, min(p.size, 6)).astype(int))
    colors = plt.cm.plasma(np.linspace(0, 0.85, show.size))
    eps = panels["eps_target"]
    for color, j in zip(colors, show):
        curve = panels["best_curves"][:, j].mean(axis=0)
        ax.semilogy(curve, color=color, label=f"p={p[j]:g}")
        predicted = panels["A"][j] / np.sqrt(eps) + panels["B"][j]
        if np.isfinite(predicted):
            ax.axvline(predicted, color=color, linestyle=":", linewidth=1)
    ax.axhline(eps, color="gray", linewidth=0.8)
    last = np.nanmax(np.where(np.isfinite(panels["target_rounds"]), panels["target_rounds"], np.nan))
    if np.isfinite(last):
        ax.set_xlim(0, 1.3 * last)
    ax.set(title=f"(b) σ²=0, step tuned per p; bars: A_p/√ε+B_p, ε={eps:g}", xlabel="round")
    ax.legend(fontsize=7)

    ax = axes[2]
    ratio = panels["A_ratio"]
    ci = panels["A_ratio_ci"]
    inside = p < 1
    if ci is not None:
        ax.fill_between(p[inside], ci[0][inside], ci[1][inside], alpha=0.25, label="fitted A_p/A_0, 95% bootstrap")
    ax.plot(p[inside], ratio[inside], "o-", label="fitted A_p/A_0")
    ax.plot(p[inside], panels["theory_ratio"][inside], "k--", label="(1−p)√(1−p+p·L_avg/L_max)")
    ax.plot(p[inside], panels["zeta_star_theory_ratio"][inside], "g-.", label="√(ζ*²_p L_p / ζ*²_0 L_0)")
    ax.plot(p[inside], (1 - p[inside]) ** 2, "r:", label="(1−p)²")
    ax.set(title="(c) A_p/A_0 against theory", xlabel="p", ylabel="ratio")
    ax.legend(fontsize=7)

    ax = axes[3]
    ax.plot(p, panels["zeta2_star_ratio"], "o-", label="measured ζ*²_p / ζ*²_0")
    ax.plot(p, (1 - p) ** 2, "r:", label="(1−p)² (Lemma 1)")
    ax.set(title="(d) dissimilarity at the optimum", xlabel="p", ylabel="ratio")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, path, dpi=120)
    save(fig, Path(path).with_suffix(".pdf"))
    plt.close(fig)
