"""Synthetic-data methods, one file each, registered by name (see :mod:`fl.methods.base` for the hooks)."""

from fl.methods.base import (
    BatchedTask,
    ClientRound,
    Extra,
    LocalTask,
    Method,
    Picture,
    ServerRound,
    Setup,
    Split,
    new_state,
)
from fl.methods.dynafed import DynaFed
from fl.methods.fedcog import FedCOG
from fl.methods.fedssyn import CentralReal, CentralSynthetic, Fedssyn, OwnSynthetic
from fl.methods.hfmds import FMDS, HFMDs

METHODS: dict[str, type[Method]] = {
    cls.name: cls
    for cls in (Method, Fedssyn, OwnSynthetic, CentralReal, CentralSynthetic, FedCOG, DynaFed, FMDS, HFMDs)
}

__all__ = [
    "FMDS",
    "METHODS",
    "BatchedTask",
    "CentralReal",
    "CentralSynthetic",
    "ClientRound",
    "DynaFed",
    "Extra",
    "FedCOG",
    "Fedssyn",
    "HFMDs",
    "LocalTask",
    "Method",
    "OwnSynthetic",
    "Picture",
    "ServerRound",
    "Setup",
    "Split",
    "new_state",
]
