"""FedAvg on softmax regression with every (run, client) pair as one batch axis (Fedssyn appendix B, eq. B.2).

A "run" is one (partition, p, seed) combination; all runs share the number of local epochs E, so their rounds
line up and R runs × N clients train as one stack of (R·N) models with batched matrix products.

Local update (eq. B.2): x_i <- x_i - η (∇f_i(x_i; batch) + s),  s ~ N(0, σ̄²/784) entry-wise, on every step.
A local epoch is one pass over the client's n samples in a fresh random order in mini-batches of B (the last
batch of an epoch is smaller when B does not divide n); E epochs per round, then the server averages the N models.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sims.mnist.problem import residuals


def local_epochs(
    x: torch.Tensor,
    features: torch.Tensor,
    labels: torch.Tensor,
    clients: torch.Tensor,
    epochs: int,
    batch_size: int,
    lr: float,
    noise_std: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Run ``epochs`` local epochs from the server models ``x`` (R, 784, 10) on clients (R, N, n); return the
    local models (R, N, 784, 10)."""
    R, N, n = clients.shape
    local = x[:, None].expand(R, N, *x.shape[1:]).clone()
    for _ in range(epochs):
        order = torch.argsort(torch.rand(R, N, n, generator=generator), dim=-1)
        visits = torch.gather(clients, -1, order)
        for start in range(0, n, batch_size):
            batch = visits[..., start : start + batch_size]  # (R, N, B)
            a = features[batch]  # (R, N, B, 784)
            r = residuals(local, a, labels[batch])  # (R, N, B, 10)
            grad = a.transpose(-1, -2) @ r / batch.shape[-1]
            if noise_std > 0:
                grad += noise_std * torch.randn(grad.shape, generator=generator, dtype=grad.dtype)
            local -= lr * grad
    return local


def train(
    features: torch.Tensor,
    labels: torch.Tensor,
    clients: torch.Tensor,
    rounds: int,
    epochs: int,
    batch_size: int,
    lr: float,
    sigma_bar2: float,
    generator: torch.Generator,
    on_round: Callable[[int, torch.Tensor], None],
) -> torch.Tensor:
    """FedAvg from x = 0 for ``rounds`` rounds; ``on_round(t, x)`` sees the server models after round t
    (t = 0 is the initial model). Returns the final server models (R, 784, 10)."""
    R = clients.shape[0]
    x = torch.zeros(R, features.shape[1], int(labels.max()) + 1, dtype=features.dtype)
    noise_std = (sigma_bar2 / features.shape[1]) ** 0.5
    on_round(0, x)
    for t in range(1, rounds + 1):
        x = local_epochs(x, features, labels, clients, epochs, batch_size, lr, noise_std, generator).mean(dim=1)
        on_round(t, x)
    return x
