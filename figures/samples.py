"""A PNG grid of images per class (generated samples next to real ones, Fedssyn Fig. B.1 style)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


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
    fig.savefig(path, dpi=100)
    plt.close(fig)
