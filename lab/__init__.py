"""The lab: the operations around the FL library, apart from it. The run records (:mod:`lab.records`: the run ledger,
its check, a GPU lease's archives), the GPU lease's scheduler (:mod:`lab.campaign`) and a run's price in FLOPs and
minutes (:mod:`lab.cost`). The lab imports ``fl`` and ``theory``; ``fl`` never imports the lab, and the artefact
pipeline (``figures``) stands on both.
"""

import theory.datafolder  # noqa: F401  (first: a data folder as working directory leaves sys.path)
