"""shufflefl.fl: the torch federated-learning engine, algorithms, data layer and synthetic-data methods.

``fl.train`` (:func:`fl.api.train`) runs one experiment from Python; it is imported on first use, so ``import fl``
stays cheap (no torch).
"""

import os as _os

# first: a data folder as working directory leaves sys.path (theory/datafolder.py, run by its path: a theory/ planted
# in the working directory is never imported in its stead)
_GUARD = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "theory", "datafolder.py")
with open(_GUARD) as _f:
    exec(compile(_f.read(), _GUARD, "exec"), {"__name__": "shufflefl_datafolder_guard"})

__all__ = ["train"]


def __getattr__(name: str):
    """``fl.train``, imported when first asked for (the package's own modules import each other by their full names,
    ``import fl.provenance as provenance``, never names from this file)."""
    if name == "train":
        from fl.api import train

        return train
    raise AttributeError(f"module 'fl' has no attribute {name!r}")
