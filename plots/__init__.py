"""shufflefl.plots: drawing, and nothing else. Every function here turns arrays and dicts into a figure file.

This package is a leaf: it imports numpy and matplotlib, never another package of ours, so anything may draw
(the simulators' CLIs, ``fl.run``'s run writer, ``fl.sweep``, the artefact pipeline ``figures``) without an import
loop. Modules:

- :mod:`plots.samples`: image grids (synthetic samples per class, DynaFed's D_syn with soft labels, HFMDs' pool).
- :mod:`plots.quadratic`: Fedssyn Fig. 2 (least squares) from ``sims.quadratic``'s panels.
- :mod:`plots.mnist`: Fedssyn Fig. B.2 and the dissimilarity panel from ``sims.mnist``'s result.
- :mod:`plots.sweep`: one panel per metric of an ``fl.sweep`` grid.
- :mod:`plots.curve`: a run's learning curve (``fl.run``'s ``curve.png``); :mod:`plots.clients`: its clients'
  accuracies (``clients.png``).
- :mod:`plots.precision`: DynaFed arms matched in several precisions; :mod:`plots.gpu`: gpu-bench's fleets.
- :mod:`plots.figure`: what every drawing ends with (legends, title, file).
"""
