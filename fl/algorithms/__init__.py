"""FL algorithms, one file each (client correction, client state update and server update side by side)."""

from fl.algorithms.base import Algorithm, Context, State
from fl.algorithms.fedadagrad import FedAdagrad
from fl.algorithms.fedadam import FedAdam
from fl.algorithms.fedavg import FedAvg
from fl.algorithms.fedavgm import FedAvgM
from fl.algorithms.feddyn import FedDyn
from fl.algorithms.fednova import FedNova
from fl.algorithms.fedprox import FedProx
from fl.algorithms.fedpvr import FedPVR
from fl.algorithms.fedyogi import FedYogi
from fl.algorithms.scaffold import Scaffold

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (FedAvg, FedAvgM, FedProx, Scaffold, FedDyn, FedPVR, FedAdam, FedYogi, FedAdagrad, FedNova)
}

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Context",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedDyn",
    "FedNova",
    "FedPVR",
    "FedProx",
    "FedYogi",
    "Scaffold",
    "State",
]
