"""Batched clients: the local updates of many same-architecture clients at once, with ``torch.func``.

The m participants' parameter vectors are stacked into W ∈ R^{m×P}; every local step evaluates all of them in
one call, ``vmap(grad(loss))`` over (W, their batches) with ``functional_call`` on the shared module, so a round of
100 small clients is a few large kernels instead of thousands of tiny ones. Everything else is the sequential
engine's step (:func:`fl.engine.local_train`), row by row:

- batches: client i's mini-batches are exactly the sequential backend's (:func:`fl.clients.batches` with the
  same generator seeded from (seed, round, i)), padded to B with zero-weight samples; the loss is the weighted
  mean Σ_j m_j CE_j / Σ_j m_j, i.e. the mean over the real samples of the batch;
- clients of unequal size take K_i steps each: at step s ≥ K_i a client is masked (its W, momentum and Adam
  moments stay as they are);
- the algorithm's correction (``vmap`` of :meth:`~fl.algorithms.Algorithm.correction` over the rows and the
  clients' stacked states), weight decay λw, then plain SGD, heavy-ball momentum or Adam (torch.optim.Adam's
  formulas with each client's own step count);
- ``chunk`` bounds the clients per vmap call (memory: about chunk × B samples of activations at once).

What cannot be batched, :func:`unbatchable` names in one line and the engine trains sequentially: a method's
per-client objective (FedCOG's distillation, HFMDs' mixed batches and prototypes: a :class:`LocalTask`), batch
norm (running statistics are per-client module state), and dropout (its masks would be drawn differently from the
sequential backend's; with ``backend = "batched"`` named explicitly dropout runs with vmap's independent draws).
In float64 the two backends agree to ~1e-12 (tested over two rounds of every algorithm with unequal clients and
partial participation); in float32 to rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fl.algorithms import Algorithm, Context
from fl.clients import STEP_KEY, batches, carried_rows
from fl.flat import FlatModel

BACKENDS = ("auto", "sequential", "batched")


def unbatchable(model: nn.Module, tasks: list, explicit: bool, augment: str = "none") -> str | None:
    """Why these clients cannot be trained batched (one line), or None when they can."""
    if augment != "none":
        return f"train.augment = {augment!r} transforms each client's batches in the sequential backend"
    if any(task is not None for task in tasks):
        return "the method gives each client its own objective (a LocalTask)"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "the model has batch norm (running statistics per client)"
    if not explicit and any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()):
        return "the model has dropout (set train.backend = 'batched' to accept independent dropout draws)"
    return None


def plan(
    indices: list[torch.Tensor], batch_size: int, generators: list[torch.Generator], epochs: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every client's batches as (index (S, m, B), weight (S, m, B), K (m,)): S = max K_i steps, batches padded
    with index 0 and weight 0, a client past its K_i steps all zero weight."""
    lists = [list(batches(index, batch_size, g, epochs, steps)) for index, g in zip(indices, generators)]
    counts = torch.tensor([len(b) for b in lists])
    n_steps, m = int(counts.max()) if len(lists) else 0, len(lists)
    device = indices[0].device if indices else "cpu"
    index = torch.zeros(n_steps, m, batch_size, dtype=torch.long, device=device)
    weight = torch.zeros(n_steps, m, batch_size, device=device)
    for i, client in enumerate(lists):
        for s, batch in enumerate(client):
            index[s, i, : len(batch)] = batch
            weight[s, i, : len(batch)] = 1
    return index, weight, counts


def train_clients(
    flat: FlatModel,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: list[torch.Tensor],
    generators: list[torch.Generator],
    algorithm: Algorithm,
    contexts: list[Context],
    lr: float,
    local,
    chunk: int = 0,
    randomness: str = "error",
) -> tuple[torch.Tensor, list[int]]:
    """Local training of the clients with training sets ``indices`` from the server model (``contexts[i].x``):
    their final models (m, P) and step counts K_i, in chunks of ``chunk`` clients (0: all at once)."""
    size = chunk or len(indices) or 1
    outs, steps = [], []
    for start in range(0, len(indices), size):
        part = slice(start, start + size)
        w, k = _train_chunk(
            flat, x, y, indices[part], generators[part], algorithm, contexts[part], lr, local, randomness
        )
        outs.append(w)
        steps += k
    return torch.cat(outs), steps


def _train_chunk(flat, x, y, indices, generators, algorithm, contexts, lr, local, randomness):
    model, named = flat.model, flat.named
    model.train()
    index, weight, counts = plan(indices, local.batch_size, generators, local.epochs, local.steps)
    m, dtype = len(indices), flat.params.dtype
    weight = weight.to(dtype)
    x0 = contexts[0].x
    W = x0.detach().expand(m, -1).clone()
    clients = {k: torch.stack([c.client[k] for c in contexts]) for k in algorithm.client_keys}
    server, head_mask = contexts[0].server, contexts[0].head_mask
    probe = algorithm.correction(x0, Context(x0, server, {k: v[0] for k, v in clients.items()}, head_mask))

    def loss(w, xb, yb, mb):
        logits = functional_call(model, named(w), (xb,))
        return (F.cross_entropy(logits, yb, reduction="none") * mb).sum() / mb.sum().clamp_min(1)

    def correction(w, client):
        return algorithm.correction(w, Context(x0, server, client, head_mask))

    gradients = vmap(grad(loss), randomness=randomness)
    corrections = vmap(correction) if probe is not None else None
    carried = carried_rows(local)  # kept optimiser state: start from each client's rows
    velocity = torch.zeros_like(W) if local.momentum else None
    if velocity is not None and carried:
        velocity = torch.stack([c.client["momentum"] for c in contexts])
    adam = local.optimizer == "adam"
    if adam:
        first, second = torch.zeros_like(W), torch.zeros_like(W)
        done = torch.zeros(m, 1, dtype=W.dtype, device=W.device)  # steps taken before this round
        if carried:
            first = torch.stack([c.client["adam_m"] for c in contexts])
            second = torch.stack([c.client["adam_v"] for c in contexts])
            done = torch.stack([c.client[STEP_KEY] for c in contexts])
    for s in range(index.shape[0]):
        active = (counts > s).to(W.device)[:, None]
        g = gradients(W, x[index[s]], y[index[s]], weight[s])
        if corrections is not None:
            g = g + corrections(W, clients)
        if local.weight_decay:
            g = g + local.weight_decay * W
        if adam:  # torch.optim.Adam (β = 0.9, 0.999, ε = 1e-8), step t = (steps before) + s + 1 per active client
            first = torch.where(active, first.lerp(g, 0.1), first)
            second = torch.where(active, second.mul(0.999).addcmul(g, g, value=0.001), second)
            t = done + (s + 1)
            step_size = lr / (1 - 0.9**t)
            denom = second.sqrt() / (1 - 0.999**t).sqrt() + 1e-8
            update = step_size * first / denom
        elif velocity is not None:
            velocity = torch.where(active, velocity * local.momentum + g, velocity)
            update = lr * velocity
        else:
            update = lr * g
        W = torch.where(active, W - update, W)
    for j, c in enumerate(contexts):  # the new kept state, as the sequential backend leaves it
        if adam and carried:
            c.client.update(adam_m=first[j], adam_v=second[j], **{STEP_KEY: done[j] + counts[j].item()})
        elif carried:
            c.client.update(momentum=velocity[j])
    return W, counts.tolist()
