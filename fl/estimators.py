"""ζ², σ², δ² of a neural network at one fixed server model (Fedssyn Fig. 5d, appendix A.3.5), on real clients.

At the server model x (dropout off), for a list of client sample sets:

- ḡ_i, the client's full-data gradient (exact: mini-batched backward passes over all its samples);
- ζ² = (1/N) Σ_i ||ḡ_i - ḡ||²  (Assumption 1), through :func:`theory.estimators.zeta2` on the client means;
- σ²_i = E_j ||g_ij||² - ||ḡ_i||², with E_j ||g_ij||² estimated from per-sample gradients (``torch.func``:
  vmap of grad) of a random subsample of ``samples`` per client (unbiased for the mean squared norm), and
  σ² = (1/N) Σ_i σ²_i (Assumption 2, client average);
- δ² = ||∇f - ∇f̃||² between the real data and the shuffled-in / synthetic pool (Lemma D-3), with
  f = (1/N) Σ_i f_i the *uniform* mean over clients, as in ζ² (so E_i ||∇f_i - ∇f̃||² = ζ² + δ², eq. D-11).

Measured on D_i gives (ζ², σ²); on the client's training set after shuffling gives (ζ̂²_p, σ̂²_p).

With a synthetic-data method the hatted quantities are those of the objective each client actually minimises at
the server model: client i's real-data loss enters with the method's weight w_i (``weights``; FedCOG's A.2.2
weights, 1 otherwise), so its gradient is w_i ḡ_i and its single-sample noise w_i² σ²_i; a method's extra term
whose gradient vanishes at the server model (FedCOG's distillation toward the server model itself) adds nothing.
A synthetic set D̃ that every local step mixes in with weight w̃ (HFMDs' pool, eq. 6: w_i = α, w̃ = 1 − α) adds the
same w̃∇f̃ to every client's gradient, so ζ̂² = α²ζ² exactly (Lemma 1, D-5, with p = 1 − α and one shared D̃),
and, the real and synthetic samples of a step being drawn independently, its noise per sample pair
σ̂²_i = w_i²σ²_i + w̃²σ̃², σ̃² the per-sample gradient variance on D̃.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from fl.flat import FlatModel
from theory import estimators


def soft_cross_entropy(logits: torch.Tensor, probabilities: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of −Σ_c p_c log softmax(logits)_c (cross-entropy with soft labels)."""
    return -(probabilities * F.log_softmax(logits, 1)).sum(1).mean()


def mean_gradient(flat: FlatModel, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor, chunk: int = 1024):
    """∇ of the mean loss over x[index] at the loaded parameters (a flat vector)."""
    flat.grads.zero_()
    for start in range(0, len(index), chunk):
        batch = index[start : start + chunk]
        (F.cross_entropy(flat.model(x[batch]), y[batch], reduction="sum") / len(index)).backward()
    return flat.grads.clone()


def mean_sq_norm(flat: FlatModel, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor) -> float:
    """Mean over ``index`` of the squared norm of per-sample gradients (torch.func.vmap over grad); ``y`` holds
    class indices or, as rows, label probabilities."""
    params = {name: p.detach() for name, p in flat.model.named_parameters()}

    def loss(params, xi, yi):
        return F.cross_entropy(functional_call(flat.model, params, (xi[None],)), yi[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x[index], y[index])
    # each sample's norm without a squared copy of its gradients (10x faster than .pow(2).sum(1) on the HFMDs CNN)
    return float(sum(torch.linalg.vector_norm(g.flatten(1), dim=1).square() for g in grads.values()).mean())


def synthetic_gradient(
    flat: FlatModel, x_params: torch.Tensor, synthetic: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """∇f̃ at ``x_params``: the gradient of the soft-label cross-entropy on a synthetic set (inputs, probabilities)."""
    flat.load(x_params)
    flat.model.eval()
    flat.grads.zero_()
    inputs, probabilities = synthetic
    soft_cross_entropy(flat.model(inputs), probabilities).backward()
    return flat.grads.clone()


def delta2(flat: FlatModel, x_params: torch.Tensor, data, synthetic: tuple[torch.Tensor, torch.Tensor]) -> float:
    """δ² = ||∇f - ∇f̃||² alone (as :func:`measure` reports it): f the uniform mean of the clients' full-data losses
    on their original sets D_i, f̃ the soft-label loss on ``synthetic``."""
    flat.load(x_params)
    flat.model.eval()
    g_real = torch.stack([mean_gradient(flat, data.x, data.y, index) for index in data.original]).double().mean(0)
    g_tilde = synthetic_gradient(flat, x_params, synthetic).double()
    return float((g_real - g_tilde).pow(2).sum())


def moments(
    flat: FlatModel,
    x_params: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    sets: list[torch.Tensor],
    samples: int,
    generator: torch.Generator,
    weights: list[float] | None = None,
) -> dict:
    """ζ², σ² (and the client means) of the client sample sets ``sets`` at parameters ``x_params``, each client's
    loss scaled by ``weights[i]`` (1 by default)."""
    flat.load(x_params)
    flat.model.eval()
    means, sigma2 = [], []
    for i, index in enumerate(sets):
        w = 1.0 if weights is None else float(weights[i])
        g_i = mean_gradient(flat, x, y, index)
        sub = index[torch.randperm(len(index), generator=generator)[:samples].to(index.device)]
        sigma2.append(w**2 * (mean_sq_norm(flat, x, y, sub) - float(g_i.pow(2).sum())))
        means.append(w * g_i.double().cpu().numpy())
    means = np.stack(means)
    return {"zeta2": estimators.zeta2(means[:, None, :]), "sigma2": float(np.mean(sigma2)), "means": means}


def same_objective(data, weights: list[float] | None) -> bool:
    """Whether every client trains on exactly its original set D_i with weight 1 (no shuffle, no reweighting), so
    that (ζ̂², σ̂²) = (ζ², σ²) by definition."""
    unweighted = weights is None or all(float(w) == 1.0 for w in weights)
    return unweighted and len(data.train) == len(data.original) and all(map(torch.equal, data.train, data.original))


def measure(
    flat: FlatModel,
    x_params: torch.Tensor,
    data,
    samples: int,
    generator: torch.Generator,
    weights: list[float] | None = None,
    synthetic: tuple[torch.Tensor, torch.Tensor] | None = None,
    synthetic_weight: float = 0.0,
) -> dict:
    """ζ², σ² on the original D_i; ζ̂²_p, σ̂²_p on the training sets (real-data losses scaled by a method's
    ``weights``); δ² real vs the received pool, or vs a ``synthetic`` set (inputs, label probabilities) held
    outside the clients; their ratios. With ``synthetic_weight`` w̃ > 0 every local step also trains on the
    ``synthetic`` set: σ̂²_p gains w̃²σ̃² (reported as ``sigma2_synthetic`` = σ̃²)."""
    state = generator.get_state()  # the same subsample draws before and after shuffling: less noise in the ratio
    before = moments(flat, x_params, data.x, data.y, data.original, samples, generator)
    if same_objective(data, weights):  # nothing shuffled in, every weight 1: the second pass would repeat the first
        after = before  # (its draws too: the generator already stands where that pass would leave it)
    else:
        generator.set_state(state)
        after = moments(flat, x_params, data.x, data.y, data.train, samples, generator, weights)
    out = {
        "zeta2": before["zeta2"],
        "sigma2": before["sigma2"],
        "zeta2_hat": after["zeta2"],
        "sigma2_hat": after["sigma2"],
    }
    pool = torch.cat(data.received)
    g_real = before["means"].mean(0)  # ∇f, f = (1/N) Σ f_i: the uniform mean, as in ζ² (eq. D-11)
    if len(pool):
        flat.load(x_params)
        g_tilde = mean_gradient(flat, data.x, data.y, pool).double().cpu().numpy()
        out["delta2"] = float(np.sum((g_real - g_tilde) ** 2))
    elif synthetic is not None:  # a set the server holds (DynaFed's D_syn): soft labels
        g_tilde = synthetic_gradient(flat, x_params, synthetic)
        out["delta2"] = float(np.sum((g_real - g_tilde.double().cpu().numpy()) ** 2))
        if synthetic_weight:
            inputs, probabilities = synthetic
            sub = torch.randperm(len(inputs), generator=generator)[:samples].to(inputs.device)
            out["sigma2_synthetic"] = mean_sq_norm(flat, inputs, probabilities, sub) - float(g_tilde.pow(2).sum())
            out["sigma2_hat"] += synthetic_weight**2 * out["sigma2_synthetic"]
    if before["zeta2"] > 0:
        out["zeta2_ratio"] = after["zeta2"] / before["zeta2"]
    return out
