"""Per-round communication of every algorithm, and fl.config.build_algorithm's validation of ``[algorithm]``."""

import math

import pytest

from fl.algorithms import (
    ALGORITHMS,
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedDyn,
    FedNova,
    FedProx,
    FedPVR,
    FedYogi,
    Scaffold,
)
from fl.config import build_algorithm
from theory.errors import InputError


@pytest.mark.parametrize("body_params", [False, True])
def test_communication(tiny, body_params):
    flat = tiny.make_flat(body_params=body_params)
    p, p_head = flat.n_params, int(flat.head_mask.sum())
    assert (p, p_head) == ((35, 15) if body_params else (15, 15))
    assert FedAvg().communication(p, p_head) == 2 * p
    assert FedAvgM().communication(p, p_head) == 2 * p
    assert FedProx().communication(p, p_head) == 2 * p
    assert FedDyn().communication(p, p_head) == 2 * p
    assert Scaffold().communication(p, p_head) == 4 * p
    assert FedPVR().communication(p, p_head) == 2 * p + 2 * p_head


def test_registry():
    assert ALGORITHMS == {
        "fedavg": FedAvg,
        "fedavgm": FedAvgM,
        "fedprox": FedProx,
        "scaffold": Scaffold,
        "feddyn": FedDyn,
        "fedpvr": FedPVR,
        "fedadam": FedAdam,
        "fedyogi": FedYogi,
        "fedadagrad": FedAdagrad,
        "fednova": FedNova,
    }


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"name": "fedprox", "mu": 0.1}, FedProx(mu=0.1)),
        ({"name": "fedprox", "mu": 0}, FedProx(mu=0.0)),
        ({"name": "fedavg"}, FedAvg()),
        ({}, FedAvg()),
        ({"name": "fedavgm", "beta": 0.5, "server_lr": 2}, FedAvgM(beta=0.5, server_lr=2.0)),
        ({"name": "scaffold", "server_lr": 0.5}, Scaffold(server_lr=0.5)),
        ({"name": "feddyn", "alpha": 0.05}, FedDyn(alpha=0.05)),
        ({"name": "fedpvr"}, FedPVR()),
    ],
)
def test_build_algorithm(spec, expected):
    algorithm = build_algorithm(spec)
    assert type(algorithm) is type(expected) and algorithm == expected
    for key in spec.keys() - {"name"}:
        assert isinstance(getattr(algorithm, key), float)


def test_build_algorithm_does_not_mutate_the_spec():
    spec = {"name": "fedprox", "mu": 0.1}
    build_algorithm(spec)
    assert spec == {"name": "fedprox", "mu": 0.1}


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "fedsgd"},
        {"name": "FedAvg"},
        {"name": "fedavg", "mu": 1},
        {"name": "fedprox", "beta": 0.9},
        {"name": "scaffold", "alpha": 0.1},
        {"name": "fedprox", "mu": -0.1},
        {"name": "fedavgm", "beta": -1},
        {"name": "fedavgm", "server_lr": -0.5},
        {"name": "feddyn", "alpha": -0.01},
        {"name": "fedprox", "mu": "0.1"},
        {"name": "fedprox", "mu": True},
        {"name": "fedprox", "mu": [0.1]},
    ],
    ids=repr,
)
def test_build_algorithm_rejects(spec):
    with pytest.raises(InputError, match="algorithm"):
        build_algorithm(spec)


@pytest.mark.parametrize("name", [["fedavg"], {"x": 1}], ids=repr)
def test_build_algorithm_rejects_a_non_string_name(name):
    """TOML allows ``name = ["fedavg"]``; the lookup must not raise TypeError (unhashable) past the CLI's handler."""
    with pytest.raises(InputError, match="algorithm"):
        build_algorithm({"name": name})


@pytest.mark.parametrize("spec", [{"name": "fedprox", "mu": math.nan}, {"name": "feddyn", "alpha": math.nan}], ids=repr)
def test_build_algorithm_rejects_nan(spec):
    """TOML allows ``mu = nan``; ``nan < 0`` is False, so the ">= 0" check must not let it through."""
    with pytest.raises(InputError, match="algorithm"):
        build_algorithm(spec)


def test_build_algorithm_rejects_feddyn_alpha_zero():
    """FedDyn's server step is x <- mean(y) - h/α: α = 0 passes the ">= 0" check and turns x into NaN (0/0)."""
    with pytest.raises(InputError, match="alpha"):
        build_algorithm({"name": "feddyn", "alpha": 0})
