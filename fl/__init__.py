"""shufflefl.fl: the torch federated-learning engine, algorithms, data layer and synthetic-data methods.

``fl.train`` (:func:`fl.api.train`) runs one experiment from Python; it is imported on first use, so ``import fl``
stays cheap (no torch).
"""

import importlib

__all__ = ["train"]


def __getattr__(name: str):
    """``fl.train``, imported when first asked for. (By name: every ``from fl import provenance`` of the package's
    own modules reads this file, and the API imports them; an import statement here would read as a loop.)"""
    if name == "train":
        return importlib.import_module("fl.api").train
    raise AttributeError(f"module 'fl' has no attribute {name!r}")
