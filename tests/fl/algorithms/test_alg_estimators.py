"""fl.estimators on the float64 tiny problem (clients of 5, 8 and 7 samples) against per-sample gradients taken one
by one with autograd: ζ², σ², a method's weights on the client objectives, and δ² with the identity
E_i ||∇f_i - ∇f̃||² = ζ² + δ² (Fedssyn eq. D-11), which needs ∇f to be the uniform mean over clients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fl.clients import ClientSet
from fl.estimators import measure


def per_sample(tiny, w, data, index) -> torch.Tensor:
    return torch.stack([tiny.gradient(w, data.x[j : j + 1], data.y[j : j + 1], False) for j in index.tolist()])


def with_pool(tiny, pool_size: int = 6) -> ClientSet:
    """The tiny clients plus a 'received' pool of extra samples dealt 2/2/2 into their training sets."""
    data = tiny.make_data()
    generator = torch.Generator().manual_seed(7)
    n = len(data.y)
    x = torch.cat([data.x, 2 * torch.randn(pool_size, tiny.D, generator=generator, dtype=tiny.DTYPE)])
    y = torch.cat([data.y, torch.randint(0, tiny.K, (pool_size,), generator=generator)])
    received = [torch.arange(n + 2 * i, n + 2 * i + 2) for i in range(3)]
    train = [torch.cat([t, r]) for t, r in zip(data.original, received)]
    return ClientSet(x, y, train, data.val, data.original, received, x, y, tiny.K)


@pytest.mark.parametrize("weights", [None, [0.5, 1.0, 2.0]])
def test_moments_and_weights_against_autograd(tiny, weights):
    flat, data = tiny.make_flat(), with_pool(tiny)
    w = flat.params.clone()
    out = measure(flat, w, data, 100, torch.Generator().manual_seed(0), weights)  # subsample = whole client
    scale = [1.0] * 3 if weights is None else weights
    for key, sets, s in (("", data.original, [1.0] * 3), ("_hat", data.train, scale)):
        grads = [per_sample(tiny, w, data, index) for index in sets]
        means = torch.stack([c * g.mean(0) for c, g in zip(s, grads)])
        zeta2 = float((means - means.mean(0)).pow(2).sum(1).mean())
        sigma2 = float(np.mean([c**2 * (g - g.mean(0)).pow(2).sum(1).mean() for c, g in zip(s, grads)]))
        assert out["zeta2" + key] == pytest.approx(zeta2, rel=1e-9)
        assert out["sigma2" + key] == pytest.approx(sigma2, rel=1e-9)


def test_delta2_uses_the_uniform_client_mean_and_satisfies_d11(tiny):
    flat, data = tiny.make_flat(), with_pool(tiny)
    w = flat.params.clone()
    out = measure(flat, w, data, 100, torch.Generator().manual_seed(0))
    g_i = torch.stack([per_sample(tiny, w, data, index).mean(0) for index in data.original])
    g_tilde = per_sample(tiny, w, data, torch.cat(data.received)).mean(0)
    assert out["delta2"] == pytest.approx(float((g_i.mean(0) - g_tilde).pow(2).sum()), rel=1e-9)
    lhs = float((g_i - g_tilde).pow(2).sum(1).mean())  # E_i ||∇f_i - ∇f̃||²
    assert lhs == pytest.approx(out["zeta2"] + out["delta2"], rel=1e-9)
    sizes = torch.tensor([len(o) for o in data.original], dtype=tiny.DTYPE)  # the size-weighted mean differs here
    weighted = float(((sizes[:, None] * g_i).sum(0) / sizes.sum() - g_tilde).pow(2).sum())
    assert abs(weighted - out["delta2"]) > 1e-6 * out["delta2"]


def test_cross_entropy_reference_matches_model(tiny):
    """The per-sample reference above differentiates the same loss the engine uses."""
    flat, data = tiny.make_flat(), tiny.make_data()
    w = flat.params.clone()
    expected = F.cross_entropy(tiny.forward(w, data.x, False), data.y)
    assert float(F.cross_entropy(flat.model(data.x), data.y).detach()) == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("weights", [None, [1.0, 1.0, 1.0], [0.5, 1.0, 2.0]])
def test_an_unchanged_objective_is_measured_once_with_the_same_numbers(tiny, monkeypatch, weights):
    """With nothing shuffled in and every weight 1 the hatted moments are the plain ones: one pass over the clients
    instead of two, the same numbers and the same generator state after (σ̃²'s subsample draws from it) as the two
    passes. Any other weight takes the second pass."""
    import fl.estimators as estimators

    flat, data = tiny.make_flat(), tiny.make_data(sizes=(12, 9, 10))
    w = flat.params.clone()
    generator = torch.Generator().manual_seed(0)
    synthetic = (torch.randn(6, tiny.D, generator=generator, dtype=tiny.DTYPE), torch.full((6, tiny.K), 1 / tiny.K))
    calls, real = [], estimators.moments
    monkeypatch.setattr(estimators, "moments", lambda *a, **k: calls.append(1) or real(*a, **k))

    def run(**patch):
        with monkeypatch.context() as m:
            for name, value in patch.items():
                m.setattr(estimators, name, value)
            g = torch.Generator().manual_seed(3)
            out = measure(flat, w, data, 4, g, weights, synthetic, synthetic_weight=0.5)  # 4 < every client's size
            return out, g.get_state()

    calls.clear()
    once, state = run()
    passes = len(calls)
    twice, forced_state = run(same_objective=lambda data, weights: False)
    assert passes == (2 if weights and weights[0] == 0.5 else 1)
    assert once == twice and torch.equal(state, forced_state)
