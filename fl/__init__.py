"""shufflefl.fl: the torch federated-learning engine, algorithms, data layer and synthetic-data methods.

``fl.train`` (:func:`fl.api.train`) runs one experiment from Python; it is imported on first use, so ``import fl``
stays cheap (no torch).
"""

import theory.datafolder  # noqa: F401  (first: a data folder as working directory leaves sys.path)

__all__ = ["train"]


def __getattr__(name: str):
    """``fl.train``, imported when first asked for (the package's own modules import each other by their full names,
    ``import fl.provenance as provenance``, never names from this file)."""
    if name == "train":
        from fl.api import train

        return train
    raise AttributeError(f"module 'fl' has no attribute {name!r}")
