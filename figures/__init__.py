"""shufflefl.figures: the artefact pipeline on top of everything (``python -m figures``): the paper's figures and
tables built from simulators and FL runs, the run store, the run ledger behind results/REPORT.md, and the report's
generated sections (images are never committed)."""

import theory.datafolder  # noqa: F401  (first: a data folder as working directory leaves sys.path)
