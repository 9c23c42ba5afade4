"""The engine's method hooks (fl.methods.base) on the float64 tiny problem: each hook is called where the round
loop promises, its result is used, a method without hooks changes nothing and stores nothing; τ local steps and
client momentum against hand-written references."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F

import fl.engine
from fl.algorithms import FedAvg, Scaffold
from fl.clients import LocalConfig
from fl.engine import init_state, local_train, run_round
from fl.methods import Method

LR, SEED = 0.3, 0


@dataclass
class ScaledLoss:
    """A local objective: cross-entropy times ``scale``, counting its calls."""

    scale: float
    calls: list

    def loss(self, model, x, y):
        self.calls.append(len(y))
        return self.scale * F.cross_entropy(model(x), y)


@dataclass(frozen=True)
class Recorder(Method):
    """Every hook records its call; the local objective is CE x 2; the server model is halved after aggregation."""

    name: ClassVar[str] = "recorder"
    calls: ClassVar[list] = []

    def before_round(self, s):
        Recorder.calls.append(("round", s.t, s.clients))

    def before_client(self, c):
        Recorder.calls.append(("before", c.t, c.i))
        c.state["clients"][c.i] = {"seen": torch.tensor(c.t)}
        return ScaledLoss(2.0, Recorder.calls)

    def after_client(self, c, y):
        Recorder.calls.append(("after", c.t, c.i))
        c.log.setdefault("clients", []).append(c.i)

    def after_aggregate(self, s):
        Recorder.calls.append(("server", s.t))
        s.state["server"]["rounds"] = torch.tensor(s.t)
        s.log["server"] = s.t
        return s.x / 2


def test_every_hook_is_called_in_order_and_used(tiny):
    Recorder.calls.clear()
    flat, data = tiny.make_flat(), tiny.make_data()
    config = LocalConfig(epochs=1, batch_size=3, participation=2 / 3)
    state = init_state(flat, FedAvg(), data.n_clients, LR)
    x0 = state.x.clone()
    new, record = run_round(state, flat, FedAvg(), data, config, SEED, Recorder())
    selected = record["clients"]
    steps = [math.ceil(tiny.SIZES[i] / 3) for i in selected]
    # the round's start, every participant's objective, their training (the objective's calls), each one's end
    expected = [("round", 1, tuple(selected)), *(("before", 1, i) for i in selected)]
    for i, k in zip(selected, steps):
        batch_sizes = [3] * (tiny.SIZES[i] // 3) + ([tiny.SIZES[i] % 3] if tiny.SIZES[i] % 3 else [])
        expected += batch_sizes[:k]
    expected += [("after", 1, i) for i in selected]
    assert Recorder.calls == [*expected, ("server", 1)]
    assert record["method"] == {"clients": selected, "server": 1}
    assert set(new.method["clients"]) == set(selected) and int(new.method["server"]["rounds"]) == 1
    # the objective was used (CE x 2 = plain SGD at twice the step) and the server hook's result is the new x
    weights = tiny.aggregation_weights(data, selected, "size")
    ys = [tiny.local_sgd(x0, data, i, 1, SEED, LocalConfig(1, 3), 2 * LR)[0] for i in selected]
    tiny.assert_close(new.x, sum(w * y for w, y in zip(weights, ys)) / 2)


@pytest.mark.parametrize("algorithm", [FedAvg(), Scaffold()])
def test_a_method_without_hooks_changes_nothing_and_stores_nothing(tiny, algorithm):
    data, config = tiny.make_data(), tiny.local(participation=2 / 3)
    runs = []
    for method in (None, Method()):
        flat = tiny.make_flat()
        state = init_state(flat, algorithm, data.n_clients, LR)
        for _ in range(2):
            state, record = run_round(state, flat, algorithm, data, config, SEED, method)
        runs.append((state, record))
    (a, _), (b, rb) = runs
    assert torch.equal(a.x, b.x) and all(torch.equal(a.clients[k], b.clients[k]) for k in a.clients)
    assert b.method == {"server": {}, "clients": {}} and "method" not in rb


def reference_steps(w0, data, i, tau, batch_size, lr, momentum=0.0, adam=False, weight_decay=0.0):
    """τ steps of heavy-ball SGD (v <- βv + g, w <- w - ηv) or of Adam (β = 0.9, 0.999, ε = 1e-8, bias-corrected)
    on g = ∇loss + λw (weight decay λ), fresh permutations from the engine's seeding."""
    generator = torch.Generator().manual_seed(fl.engine.client_seed(SEED, 1, i))
    index, w, v, taken = data.train[i], w0.clone(), torch.zeros_like(w0), 0
    m, u = torch.zeros_like(w0), torch.zeros_like(w0)
    while taken < tau:
        order = index[torch.randperm(len(index), generator=generator)]
        for start in range(0, len(order), batch_size):
            w_ = w.detach().clone().requires_grad_(True)
            batch = order[start : start + batch_size]
            loss = F.cross_entropy(w_[:12].reshape(3, 4).matmul(data.x[batch].T).T + w_[12:], data.y[batch])
            (g,) = torch.autograd.grad(loss, w_)
            g = g + weight_decay * w
            taken += 1
            if adam:
                m, u = 0.9 * m + 0.1 * g, 0.999 * u + 0.001 * g * g
                w = w - lr * (m / (1 - 0.9**taken)) / ((u / (1 - 0.999**taken)).sqrt() + 1e-8)
                if taken == tau:
                    break
                continue
            v = momentum * v + g
            w = w - lr * v
            if taken == tau:
                break
    return w


@pytest.mark.parametrize("tau, momentum, weight_decay", [(7, 0.0, 0.0), (7, 0.9, 0.0), (1, 0.5, 0.0), (7, 0.9, 0.05)])
def test_local_steps_and_momentum_against_reference(tiny, tau, momentum, weight_decay):
    """K = τ batches running through fresh permutations (n = 5, B = 3: 2 per pass), with client momentum and
    weight decay (g + λw)."""
    flat, data = tiny.make_flat(), tiny.make_data()
    x0 = flat.params.clone()
    generator = torch.Generator().manual_seed(fl.engine.client_seed(SEED, 1, 0))
    k = local_train(
        flat, (data.x, data.y, data.train[0]), LocalConfig(epochs=1, batch_size=3, steps=tau, momentum=momentum,
        weight_decay=weight_decay), LR, lambda w: None, generator,
    )  # fmt: skip
    assert k == tau
    tiny.assert_close(flat.params, reference_steps(x0, data, 0, tau, 3, LR, momentum, weight_decay=weight_decay))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adam_clients_against_reference(tiny, weight_decay):
    flat, data = tiny.make_flat(), tiny.make_data()
    x0 = flat.params.clone()
    generator = torch.Generator().manual_seed(fl.engine.client_seed(SEED, 1, 1))
    k = local_train(
        flat, (data.x, data.y, data.train[1]), LocalConfig(epochs=2, batch_size=3, optimizer="adam",
        weight_decay=weight_decay), 0.05, lambda w: None, generator,
    )  # fmt: skip
    assert k == 2 * math.ceil(tiny.SIZES[1] / 3)
    tiny.assert_close(flat.params, reference_steps(x0, data, 1, k, 3, 0.05, adam=True, weight_decay=weight_decay))
