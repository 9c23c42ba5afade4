"""What every drawing here ends with: legends, a title, the layout tightened, the file written, the figure closed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def finish(fig: plt.Figure, path: Path, title: str = "", legends: tuple = ()) -> None:
    """A legend on each of ``legends`` (axes), ``title`` over the figure, then ``path`` written (120 dpi)."""
    for ax in legends:
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
