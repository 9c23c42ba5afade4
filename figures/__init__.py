"""shufflefl.figures: plotting code shared by the simulators and experiments (images are never committed)."""
