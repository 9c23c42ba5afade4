"""FedDyn against a hand-written float64 reference, checking x, the server's h and the clients' g after every
round:

    local step   w <- w - η (∇F(w; batch) - g_k + α (w - x))
    client       g_k <- g_k - α (y_k - x)
    server       h <- h - α (1/N) Σ_S (y_k - x),  x <- (1/|S|) Σ_S y_k - h/α   (uniform over S)
"""

import pytest
import torch

from fl.algorithms import FedDyn

ROUNDS, SEED, LR = 3, 13, 0.3


def reference_feddyn(tiny, alpha):
    flat, data, config = tiny.make_flat(), tiny.make_data(), tiny.local()
    n_clients = data.n_clients
    x = flat.params.detach().clone()
    h = torch.zeros_like(x)
    g = torch.zeros(n_clients, x.numel(), dtype=x.dtype)
    out = [(x, h, g.clone())]
    for t in range(1, ROUNDS + 1):
        selected = list(range(n_clients))
        ys = []
        for i in selected:
            correction = lambda w, i=i, x=x: -g[i] + alpha * (w - x)  # noqa: E731
            ys.append(tiny.local_sgd(x, data, i, t, SEED, config, LR, correction)[0])
        for j, i in enumerate(selected):
            g[i] = g[i] - alpha * (ys[j] - x)
        h = h - alpha * sum(y - x for y in ys) / n_clients
        x = sum(ys) / len(ys) - h / alpha
        out.append((x, h, g.clone()))
    return out


@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_feddyn_matches_reference(tiny, alpha):
    states = tiny.run_engine(FedDyn(alpha=alpha), tiny.local(), ROUNDS, SEED, LR)
    expected = reference_feddyn(tiny, alpha)
    assert set(states[0]["server"]) == {"h"} and set(states[0]["clients"]) == {"g"}
    for t in range(1, ROUNDS + 1):
        x, h, g = expected[t]
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["h"], h)
        tiny.assert_close(states[t]["clients"]["g"], g)
    assert torch.count_nonzero(states[-1]["clients"]["g"]) > 0


def test_feddyn_average_is_uniform_whatever_the_weighting(tiny):
    """FedDyn's server averages uniformly over S; the config's "size" weighting must not leak in."""
    size = tiny.run_engine(FedDyn(alpha=0.1), tiny.local("size"), 2, SEED, LR)
    uniform = tiny.run_engine(FedDyn(alpha=0.1), tiny.local("uniform"), 2, SEED, LR)
    for a, b in zip(size, uniform):
        assert torch.equal(a["x"], b["x"])


def test_feddyn_first_round(tiny):
    """With g = h = 0 the first round's x is mean(y) + mean(y - x) (full participation: h = -α mean(y - x))."""
    alpha = 0.1
    states = tiny.run_engine(FedDyn(alpha=alpha), tiny.local(), 1, SEED, LR)
    x0 = states[0]["x"]
    data, config = tiny.make_data(), tiny.local()
    ys = [
        tiny.local_sgd(x0, data, i, 1, SEED, config, LR, lambda w: alpha * (w - x0))[0] for i in range(data.n_clients)
    ]
    mean_y = torch.stack(ys).mean(0)
    tiny.assert_close(states[1]["x"], 2 * mean_y - x0)
    tiny.assert_close(states[1]["server"]["h"], -alpha * (mean_y - x0))


def test_feddyn_communication(tiny):
    flat = tiny.make_flat()
    assert FedDyn().communication(flat.n_params, int(flat.head_mask.sum())) == 2 * flat.n_params
