"""Our FL algorithms as a Flower app (optional extra: ``pip install -e ".[flower]"``); see :mod:`fl.flower.app`."""
