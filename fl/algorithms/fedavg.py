"""FedAvg (McMahan et al. 2017): local SGD from x, then x <- Σ_S w_i y_i. All of it lives in the base class."""

from fl.algorithms.base import Algorithm


class FedAvg(Algorithm):
    """FedAvg: no correction, weighted average of the local models."""
