"""The folders the package wrote, and a working directory that is one leaving ``sys.path``.

``python -m sims.quadratic --out .``, ``python -m figures check`` inside a ledger's copy or ``python -m fl.run
--resume .`` in a run folder start with the working directory first on ``sys.path``: a ``numpy.py`` or ``PIL.py``
lying there would shadow the library for everything imported after. Importing this module (every package's
``__init__`` does, first) takes the working directory off the path where it is a folder the package wrote
(:func:`written_folder`): nothing runs from a data folder. ``fl``, ``sims``, ``figures`` and ``lab`` run this file
by its path before anything else (so that a ``theory/`` planted in the working directory is never imported in its
stead).
A folder of the user's keeps it (a user's plug-in module there is found). A package of the very name ``python -m``
starts (``fl/`` for ``python -m fl.run``) is found by Python before any of our code runs: no code can refuse that;
run from the project or another folder, or with ``python -P``.

The rule (:func:`is_data_folder`) is the one :mod:`fl.plugins` and the tools share. It uses only ``os`` and ``sys``,
which Python imports before any user code, so nothing in the working directory is imported while it decides.
"""

import os
import sys

# A folder holding one of these is one the package wrote (a run, a sweep, the ledger, a lease's records, an entry,
# any output folder a CLI made: theory.cli.OWNER, unfinished sweeps included; a run's curves: fl.sinks.OWNER):
WRITTEN_MARKS = (
    "provenance.json", "metrics.jsonl", "summary.json", "checkpoint.pt", "sweep.json", "ledger.json", ".ledger",
    ".shufflefl-intake", "lease.json", "init_from.txt", ".shufflefl-output", ".shufflefl-curves",
)  # fmt: skip
# A run store's folders (figures' _runs and _synthetic, the experiment scripts' and the campaign's runs and
# synthetic): one is the package's where a folder in it is (a run, a generator's cache folder), whichever store it
# is in (--runs, --root, $SHUFFLEFL_RUNS); a folder holding a _runs or _synthetic of the package's is a store.
STORE_FOLDERS, STORE_ROOT = ("_runs", "runs", "_synthetic", "synthetic"), ("_runs", "_synthetic")
CACHE_KEY = "key.json"  # in a generator's cache folder (fl.synthesis.fedssyn.client_folder): client<i>-<16 hex>
HEX = frozenset("0123456789abcdef")


def is_cache_name(name: str) -> bool:
    """Whether ``name`` is a generator cache folder's: ``client<i>-<16 hex digits>``."""
    head, dash, key = name.partition("-")
    return bool(dash) and head.startswith("client") and head[6:].isdigit() and len(key) == 16 and set(key) <= HEX


def marked(folder: str) -> bool:
    """Whether ``folder`` holds one of :data:`WRITTEN_MARKS`, or is a generator's cache folder with its key.json."""
    if any(os.path.lexists(os.path.join(folder, mark)) for mark in WRITTEN_MARKS):
        return True
    return is_cache_name(os.path.basename(folder)) and os.path.isfile(os.path.join(folder, CACHE_KEY))


def holds_marked(folder: str, cache_only: bool = False) -> bool:
    """Whether a folder directly in ``folder`` (only generator cache folders, with ``cache_only``) is marked."""
    try:
        with os.scandir(folder) as found:
            return any((not cache_only or is_cache_name(e.name)) and e.is_dir() and marked(e.path) for e in found)
    except OSError:
        return False


def is_data_folder(folder: str) -> bool:
    """The one rule of what the package wrote: ``folder`` holds a mark (:func:`marked`); or it is a run store's
    folder (:data:`STORE_FOLDERS`) or a generator cache, holding a marked folder (a run, a cache folder); or it is a
    store, holding a ``_runs`` or ``_synthetic`` of the package's. Every folder inside one of these is data too
    (:func:`written_folder` looks up to the filesystem's root)."""
    if marked(folder):
        return True
    if os.path.basename(folder) in STORE_FOLDERS and holds_marked(folder):
        return True
    if holds_marked(folder, cache_only=True):
        return True
    return any(
        holds_marked(os.path.join(folder, name)) for name in STORE_ROOT if os.path.isdir(os.path.join(folder, name))
    )


def written_folder(file: str) -> str | None:
    """The folder the package wrote that ``file`` (or the folder ``file``) lies in or is, however deep, up to the
    filesystem's root (:func:`is_data_folder`, or the run store ``$SHUFFLEFL_RUNS``), or None."""
    store = os.environ.get("SHUFFLEFL_RUNS")
    stores = {os.path.realpath(os.path.expanduser(store))} if store else set()
    path = os.path.realpath(file)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    while True:
        if folder in stores or is_data_folder(folder):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def leave_data_folder() -> None:
    """Take the working directory off the front of ``sys.path`` where it is a folder the package wrote, and start
    every Python process this one starts from there without it too (``PYTHONSAFEPATH``: spawned client workers
    import ``multiprocessing`` before they learn this process's path; ``python -m`` children likewise)."""
    try:
        here = os.getcwd()
    except OSError:  # a working directory removed meanwhile: nothing can be imported from it
        return
    if written_folder(here) is None:
        return
    os.environ["PYTHONSAFEPATH"] = "1"
    if sys.path and sys.path[0] in ("", here):
        del sys.path[0]


leave_data_folder()
