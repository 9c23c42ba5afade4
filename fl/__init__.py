"""shufflefl.fl: the torch federated-learning engine, algorithms, data layer and synthetic-data methods.

``fl.train`` (:func:`fl.api.train`) runs one experiment from Python; it is imported on first use, so ``import fl``
stays cheap (no torch).
"""

import os as _os
import sys as _sys


def _off_the_path_in_a_data_folder() -> None:
    """``python -m fl.run --resume .`` in a run folder: Python put the working directory first on ``sys.path``, so a
    ``PIL.py`` (any module) lying there would shadow a library for everything imported after. Where the working
    directory is a folder the package wrote (:func:`fl.plugins.written_folder`: a run, a sweep, a store, ...), it
    leaves the path before anything else of ours is imported; the package itself is found through its install.
    Nothing runs from a data folder."""
    try:
        here = _os.getcwd()
    except OSError:  # a working directory removed meanwhile: nothing can be imported from it
        return
    if not _sys.path or _sys.path[0] not in ("", here):
        return
    entry = _sys.path.pop(0)  # off while fl.plugins is imported: nothing in the folder shadows what it imports
    from pathlib import Path

    from fl.plugins import written_folder

    if written_folder(Path(here)) is None:
        _sys.path.insert(0, entry)


_off_the_path_in_a_data_folder()

__all__ = ["train"]


def __getattr__(name: str):
    """``fl.train``, imported when first asked for (the package's own modules import each other by their full names,
    ``import fl.provenance as provenance``, never names from this file)."""
    if name == "train":
        from fl.api import train

        return train
    raise AttributeError(f"module 'fl' has no attribute {name!r}")
