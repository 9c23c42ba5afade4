"""The lab: the operations around the FL library, apart from it. The run records (:mod:`lab.records`: the run ledger,
its check, a GPU lease's archives), the GPU lease's scheduler (:mod:`lab.campaign`) and a run's price in FLOPs and
minutes (:mod:`lab.cost`). The lab imports ``fl`` and ``theory``; ``fl`` never imports the lab, and the artefact
pipeline (``figures``) stands on both.
"""

import os as _os

# first: a data folder as working directory leaves sys.path (theory/datafolder.py, run by its path: a theory/ planted
# in the working directory is never imported in its stead)
_GUARD = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "theory", "datafolder.py")
with open(_GUARD) as _f:
    exec(compile(_f.read(), _GUARD, "exec"), {"__name__": "shufflefl_datafolder_guard"})
