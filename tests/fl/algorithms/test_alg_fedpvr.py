"""FedPVR: SCAFFOLD's option-II correction on the head parameters only (flat.head_mask), plain SGD below.

The model here has a linear body (nn.Linear(4, 4): 20 parameters) under the linear head (nn.Linear(4, 3): 15), so
that both parts carry parameters; with a parameter-free body (nn.Flatten) the mask is all True and FedPVR must be
SCAFFOLD.
"""

import math

import pytest
import torch

from fl.algorithms import Context, FedPVR, Scaffold

ROUNDS, SEED, LR = 3, 17, 0.3
N_BODY, N_HEAD = 20, 15


def reference_fedpvr(tiny, weighting, server_lr):
    flat, data, config = tiny.make_flat(body_params=True), tiny.make_data(), tiny.local(weighting)
    m = tiny.head_mask(True).to(tiny.DTYPE)
    n_clients = data.n_clients
    x = flat.params.detach().clone()
    c = torch.zeros_like(x)
    ci = torch.zeros(n_clients, x.numel(), dtype=x.dtype)
    out = [(x, c, ci.clone())]
    for t in range(1, ROUNDS + 1):
        selected = list(range(n_clients))
        ys, new = [], []
        for i in selected:
            correction = lambda w, i=i, c=c: m * (c - ci[i])  # noqa: E731
            y, k = tiny.local_sgd(x, data, i, t, SEED, config, LR, correction, body_params=True)
            assert k == config.epochs * math.ceil(len(data.train[i]) / config.batch_size)
            ys.append(y)
            new.append(m * (ci[i] - c + (x - y) / (k * LR)))
        w = tiny.aggregation_weights(data, selected, weighting)
        x_new = x + server_lr * (sum(w_i * y_i for w_i, y_i in zip(w, ys)) - x)
        c = c + (len(selected) / n_clients) * torch.stack([new[j] - ci[i] for j, i in enumerate(selected)]).mean(0)
        for j, i in enumerate(selected):
            ci[i] = new[j]
        x = x_new
        out.append((x, c, ci.clone()))
    return out


def test_head_mask_layout(tiny):
    flat = tiny.make_flat(body_params=True)
    assert flat.n_params == N_BODY + N_HEAD
    assert torch.equal(flat.head_mask, tiny.head_mask(True))
    assert torch.equal(flat.head_mask[:N_BODY], torch.zeros(N_BODY, dtype=torch.bool))
    assert tiny.make_flat(body_params=False).head_mask.all()


@pytest.mark.parametrize("weighting", ["size", "uniform"])
@pytest.mark.parametrize("server_lr", [1.0, 0.5])
def test_fedpvr_matches_reference(tiny, weighting, server_lr):
    states = tiny.run_engine(FedPVR(server_lr=server_lr), tiny.local(weighting), ROUNDS, SEED, LR, body_params=True)
    expected = reference_fedpvr(tiny, weighting, server_lr)
    tiny.assert_close(states[0]["x"], expected[0][0])
    for t in range(1, ROUNDS + 1):
        x, c, ci = expected[t]
        tiny.assert_close(states[t]["x"], x)
        tiny.assert_close(states[t]["server"]["c"], c)
        tiny.assert_close(states[t]["clients"]["c"], ci)


def test_fedpvr_control_variates_vanish_outside_the_head(tiny):
    states = tiny.run_engine(FedPVR(), tiny.local(), ROUNDS, SEED, LR, body_params=True)
    for s in states[1:]:
        assert torch.count_nonzero(s["server"]["c"][:N_BODY]) == 0
        assert torch.count_nonzero(s["clients"]["c"][:, :N_BODY]) == 0
        assert torch.count_nonzero(s["server"]["c"][N_BODY:]) > 0  # the head does carry them
        assert torch.count_nonzero(s["clients"]["c"][:, N_BODY:]) > 0


def test_fedpvr_body_follows_plain_sgd(tiny):
    """The correction and the new control variate, on a context with control variates everywhere (even in the
    body, which FedPVR never produces): body entries get plain SGD (0) and a zero variate, the head SCAFFOLD's."""
    flat = tiny.make_flat(body_params=True)
    generator = torch.Generator().manual_seed(0)
    x, w, y, c, ci = (torch.randn(flat.n_params, generator=generator, dtype=tiny.DTYPE) for _ in range(5))
    ctx = Context(x, {"c": c}, {"c": ci}, flat.head_mask)
    m = tiny.head_mask(True)
    correction = FedPVR().correction(w, ctx)
    assert torch.count_nonzero(correction[~m]) == 0
    torch.testing.assert_close(correction[m], (c - ci)[m], rtol=0, atol=0)
    steps, lr = 6, 0.3
    new = FedPVR().client_update(y, ctx, steps, lr)["c"]
    assert torch.count_nonzero(new[~m]) == 0
    tiny.assert_close(new[m], (ci - c + (x - y) / (steps * lr))[m])


@pytest.mark.parametrize("weighting", ["size", "uniform"])
def test_fedpvr_with_all_head_is_scaffold(tiny, weighting):
    pvr = tiny.run_engine(FedPVR(), tiny.local(weighting), ROUNDS, SEED, LR, body_params=False)
    scaffold = tiny.run_engine(Scaffold(), tiny.local(weighting), ROUNDS, SEED, LR, body_params=False)
    exact = {"rtol": 0, "atol": 0}
    for a, b in zip(pvr, scaffold):
        tiny.assert_close(a["x"], b["x"], **exact)
        tiny.assert_close(a["server"]["c"], b["server"]["c"], **exact)
        tiny.assert_close(a["clients"]["c"], b["clients"]["c"], **exact)


def test_fedpvr_differs_from_scaffold_with_a_body(tiny):
    pvr = tiny.run_engine(FedPVR(), tiny.local(), 2, SEED, LR, body_params=True)
    scaffold = tiny.run_engine(Scaffold(), tiny.local(), 2, SEED, LR, body_params=True)
    tiny.assert_close(pvr[1]["x"], scaffold[1]["x"])  # round 1: no correction anywhere
    assert (pvr[2]["x"][:N_BODY] - scaffold[2]["x"][:N_BODY]).abs().max() > 1e-8


def test_fedpvr_communication(tiny):
    flat = tiny.make_flat(body_params=True)
    n_head = int(flat.head_mask.sum())
    assert n_head == N_HEAD
    assert FedPVR().communication(flat.n_params, n_head) == 2 * flat.n_params + 2 * n_head == 100
