"""FL algorithms, one file each (client correction, client state update and server update side by side)."""

from fl.algorithms.base import Algorithm, Context, State
from fl.algorithms.fedavg import FedAvg
from fl.algorithms.fedavgm import FedAvgM
from fl.algorithms.feddyn import FedDyn
from fl.algorithms.fedprox import FedProx
from fl.algorithms.fedpvr import FedPVR
from fl.algorithms.scaffold import Scaffold

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (FedAvg, FedAvgM, FedProx, Scaffold, FedDyn, FedPVR)}

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Context",
    "FedAvg",
    "FedAvgM",
    "FedDyn",
    "FedPVR",
    "FedProx",
    "Scaffold",
    "State",
]
