"""shufflefl.sims: numpy simulators of the Fedssyn theory (least squares, Sec. 2.3; MNIST softmax, appendix B)."""

import os as _os

# first: a data folder as working directory leaves sys.path (theory/datafolder.py, run by its path: a theory/ planted
# in the working directory is never imported in its stead)
_GUARD = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "theory", "datafolder.py")
with open(_GUARD) as _f:
    exec(compile(_f.read(), _GUARD, "exec"), {"__name__": "shufflefl_datafolder_guard"})
