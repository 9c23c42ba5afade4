"""shufflefl.sims: numpy simulators of the Fedssyn theory (least squares, Sec. 2.3; MNIST softmax, appendix B)."""

import theory.datafolder  # noqa: F401  (first: a data folder as working directory leaves sys.path)
