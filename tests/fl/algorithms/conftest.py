"""Shared set-up for the float64 tests of fl.algorithms against hand-written references.

A tiny linear model (``body`` then ``head``; d = 4 features, k = 3 classes) wrapped in fl.flat.FlatModel, a tiny
ClientSet of N = 3 clients with 5, 8 and 7 samples (with B = 3 every epoch ends on a smaller batch), and a plain-torch
reference of one client's local SGD that reproduces the engine's batch order from the same torch.Generator seeding.
The helpers are handed to the tests through the ``tiny`` fixture.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fl.engine
from fl.clients import ClientSet, LocalConfig
from fl.engine import init_state, run_round
from fl.flat import FlatModel

D, H, K = 4, 4, 3  # features, hidden width of the optional linear body, classes
SIZES = (5, 8, 7)  # n_i: all different, none a multiple of B = 3
DTYPE = torch.float64
TOL = {"rtol": 1e-10, "atol": 1e-12}


class TinyNet(nn.Module):
    def __init__(self, body: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def make_flat(body_params: bool = False, seed: int = 0) -> FlatModel:
    """body = nn.Flatten() (no parameters: the head is the whole model) or nn.Linear(4, 4)."""
    body = nn.Linear(D, H) if body_params else nn.Flatten()
    model = TinyNet(body, nn.Linear(H if body_params else D, K)).to(DTYPE)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator, dtype=DTYPE))
    return FlatModel(model)


def make_data(sizes: tuple[int, ...] = SIZES, seed: int = 0) -> ClientSet:
    generator = torch.Generator().manual_seed(1000 + seed)
    n = sum(sizes)
    x = torch.randn(n, D, generator=generator, dtype=DTYPE)
    y = torch.randint(0, K, (n,), generator=generator, dtype=torch.int64)
    pool = torch.randperm(n, generator=generator)  # clients own scattered, not contiguous, indices
    train, start = [], 0
    for size in sizes:
        train.append(pool[start : start + size].clone())
        start += size
    return ClientSet(
        x=x,
        y=y,
        train=train,
        val=[t.clone() for t in train],
        original=[t.clone() for t in train],
        received=[torch.empty(0, dtype=torch.int64) for _ in train],
        test_x=x.clone(),
        test_y=y.clone(),
        n_classes=K,
    )


def local(weighting: str = "size", participation: float = 1.0) -> LocalConfig:
    return LocalConfig(epochs=2, batch_size=3, participation=participation, weighting=weighting)


def unpack(w: torch.Tensor, body_params: bool) -> list[torch.Tensor]:
    """The flat vector in parameters() order: [body.weight, body.bias,] head.weight, head.bias."""
    shapes = ([(H, D), (H,)] if body_params else []) + [(K, H if body_params else D), (K,)]
    out, offset = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(w[offset : offset + n].reshape(shape))
        offset += n
    assert offset == w.numel()
    return out


def forward(w: torch.Tensor, x: torch.Tensor, body_params: bool) -> torch.Tensor:
    parts = unpack(w, body_params)
    if body_params:
        x = x @ parts[0].T + parts[1]
    return x @ parts[-2].T + parts[-1]


def head_mask(body_params: bool) -> torch.Tensor:
    n_body = H * D + H if body_params else 0
    n_head = K * (H if body_params else D) + K
    return torch.cat([torch.zeros(n_body, dtype=torch.bool), torch.ones(n_head, dtype=torch.bool)])


def gradient(w: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, body_params: bool) -> torch.Tensor:
    w = w.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(F.cross_entropy(forward(w, xb, body_params), yb), w)
    return g


def local_sgd(
    w0: torch.Tensor,
    data: ClientSet,
    i: int,
    t: int,
    seed: int,
    config: LocalConfig,
    lr: float,
    correction=None,
    body_params: bool = False,
) -> tuple[torch.Tensor, int]:
    """Client i's local model y_i after E epochs of mini-batch SGD from w0 in round t, and its K local steps.

    ``correction(w)`` (a tensor or None) is added to every mini-batch gradient.
    """
    generator = torch.Generator().manual_seed(fl.engine.client_seed(seed, t, i))
    index = data.train[i]
    w, steps = w0.clone(), 0
    for _ in range(config.epochs):
        order = index[torch.randperm(len(index), generator=generator)]
        for start in range(0, len(order), config.batch_size):
            batch = order[start : start + config.batch_size]
            g = gradient(w, data.x[batch], data.y[batch], body_params)
            extra = None if correction is None else correction(w)
            w = w - lr * (g if extra is None else g + extra)
            steps += 1
    return w, steps


def aggregation_weights(data: ClientSet, selected: list[int], weighting: str) -> torch.Tensor:
    if weighting == "size":
        n = torch.tensor([len(data.train[i]) for i in selected], dtype=DTYPE)
        return n / n.sum()
    return torch.full((len(selected),), 1.0 / len(selected), dtype=DTYPE)


def snapshot(state, record=None) -> dict:
    return {
        "round": state.round,
        "x": state.x.clone(),
        "server": {k: v.clone() for k, v in state.server.items()},
        "clients": {k: v.clone() for k, v in state.clients.items()},
        "record": record,
    }


def run_engine(algorithm, config: LocalConfig, rounds: int = 3, seed: int = 0, lr: float = 0.3, **kwargs):
    """Snapshots of the engine state: [initial, after round 1, ..., after round ``rounds``]."""
    flat = make_flat(kwargs.pop("body_params", False))
    data = kwargs.pop("data", None) or make_data()
    assert not kwargs
    state = init_state(flat, algorithm, data.n_clients, lr)
    out = [snapshot(state)]
    for _ in range(rounds):
        state, record = run_round(state, flat, algorithm, data, config, seed)
        out.append(snapshot(state, record))
    return out


def assert_close(actual, expected, **tol) -> None:
    torch.testing.assert_close(actual, expected, **(tol or TOL))


@pytest.fixture
def tiny() -> SimpleNamespace:
    return SimpleNamespace(
        D=D,
        H=H,
        K=K,
        SIZES=SIZES,
        DTYPE=DTYPE,
        TOL=TOL,
        make_flat=make_flat,
        make_data=make_data,
        local=local,
        unpack=unpack,
        forward=forward,
        head_mask=head_mask,
        gradient=gradient,
        local_sgd=local_sgd,
        aggregation_weights=aggregation_weights,
        run_engine=run_engine,
        assert_close=assert_close,
    )
