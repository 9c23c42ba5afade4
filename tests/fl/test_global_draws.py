"""fl.engine.global_draws: the dropout draws of ``fork_rng`` + ``torch.manual_seed``, faster on the CPU."""

from __future__ import annotations

import torch

from fl.engine import global_draws


def manual(seed: int) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.functional.dropout(torch.ones(64), 0.5, training=True)


def test_it_draws_what_torch_manual_seed_draws_and_restores_the_global_state():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    with global_draws(12345):
        ours = torch.nn.functional.dropout(torch.ones(64), 0.5, training=True)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(ours, manual(12345))
    with global_draws(12346):
        assert not torch.equal(torch.nn.functional.dropout(torch.ones(64), 0.5, training=True), ours)
