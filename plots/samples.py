"""A PNG grid of images per class (generated samples next to real ones, Fedssyn Fig. B.1 style)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from plots.figure import save


def plot_grid(images: np.ndarray, labels: np.ndarray, path: Path, per_class: int = 8, title: str = "") -> None:
    """One row per class with up to ``per_class`` uint8 images (n, C, H, W) of that class."""
    classes = np.unique(labels)
    fig, axes = plt.subplots(len(classes), per_class, figsize=(per_class * 0.9, len(classes) * 0.9), squeeze=False)
    for row, cls in zip(axes, classes):
        members = images[labels == cls][:per_class]
        for j, ax in enumerate(row):
            ax.axis("off")
            if j < len(members):
                image = members[j].transpose(1, 2, 0)
                ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=255)
        row[0].set_title(str(cls), fontsize=6, loc="left")
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=100)
    plt.close(fig)


def plot_soft_grid(inputs, probabilities, path: Path, per_row: int = 15, title: str = "") -> None:
    """Learned images (n, C, H, W, any float range: each is min-max scaled) with their soft labels: the most likely
    class and its probability above each image; grouped by that class."""
    inputs, probabilities = np.asarray(inputs, dtype=np.float64), np.asarray(probabilities, dtype=np.float64)
    order = np.lexsort((-probabilities.max(1), probabilities.argmax(1)))
    rows = -(-len(order) // per_row)
    fig, axes = plt.subplots(rows, per_row, figsize=(per_row * 0.8, rows * 0.95), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, k in zip(axes.flat, order):
        image = inputs[k].transpose(1, 2, 0)
        image = (image - image.min()) / max(image.max() - image.min(), 1e-12)
        ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1)
        ax.set_title(f"{probabilities[k].argmax()} ({probabilities[k].max():.2f})", fontsize=5)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=100)
    plt.close(fig)
