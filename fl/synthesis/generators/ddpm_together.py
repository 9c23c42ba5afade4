"""Several clients' DDPMs trained in one computation: :func:`fit_together`.

A client's DDPM (:class:`~fl.synthesis.generators.ddpm.DDPM`, a width-32 U-Net on 28 × 28 images in batches of
128) leaves most of a GPU idle: one step is a few hundred small kernels. Here the R clients' U-Nets are stacked
(every parameter gets a leading axis of R) and each step is one ``vmap(grad(L_simple))`` over the R rows, each row
with its own batch, time indices and noise; then each row's gradient clipping, AdamW step and EMA. Every row does
exactly what :meth:`DDPM.fit <fl.synthesis.generators.ddpm.DDPM.fit>` does for that client:

- its batches, t and ε come from its own ``torch.Generator`` in the same order (an epoch's permutation, then per
  step t and ε), its last batch of an epoch is shorter (padded, weight 0);
- L_simple is the mean over the row's real samples and pixels; the gradient is clipped to the row's own norm
  (``torch.nn.utils.clip_grad_norm_``'s formula), AdamW's formulas with the row's step count, the EMA's warm-up
  decay from the row's own ``steps_done``;
- a client that has finished its epochs is masked (its weights, moments and EMA stay), and each client's epoch end
  writes its weights back into its DDPM and calls its ``on_epoch`` (its checkpoint), as ``fit`` does.

So each client's DDPM equals its ``fit`` alone to float rounding (the vmapped convolutions are grouped: they sum in
another order; tested). Not batched: DP-SGD (per-sample clipping has its own engine) and dropout (vmap's draws
would not be ``fit``'s): :func:`fit_together` refuses both in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from fl.optim import adam_update
from fl.synthesis.generators.base import minibatches, to_unit
from fl.synthesis.generators.ddpm import DDPM
from theory.errors import InputError


class _Client:
    """One DDPM's data, draws and epoch bookkeeping in :func:`fit_together`."""

    def __init__(self, model: DDPM, x: np.ndarray, y: np.ndarray, epochs: int, generator: torch.Generator,
                 on_epoch: Callable[[int, DDPM], None] | None) -> None:  # fmt: skip
        if not isinstance(epochs, int) or epochs < 0:
            raise InputError(f"DDPM fit epochs: must be an integer >= 0, got {epochs!r}")
        x = np.asarray(x)
        if x.dtype != np.uint8 or x.ndim != 4 or tuple(x.shape[1:]) != model.in_shape or not len(x):
            raise InputError(f"DDPM fit x: must be uint8 images of shape (n >= 1, {model.in_shape}), got {x.shape}")
        labels = model._check_labels(y, "fit y")
        if len(labels) != len(x):
            raise InputError(f"DDPM fit: x has {len(x)} images but y has {len(labels)} labels")
        self.model, self.generator, self.on_epoch, self.epochs_left = model, generator, on_epoch, epochs
        self.data, self.labels = model._to_device(to_unit(x)), model._to_device(labels)
        self.queue: list[torch.Tensor] = []
        self.history: list[dict[str, float]] = []
        self.total, self.seen = torch.zeros((), dtype=torch.float64, device=model.device), 0
        self.steps = model.steps_done

    def pending(self) -> bool:
        """Whether this client takes another step (starting its next epoch: the permutation is drawn here, as
        ``fit`` draws it before the epoch's first step)."""
        if not self.queue and self.epochs_left:
            self.queue = list(minibatches(len(self.data), self.model.config.batch_size, self.generator))
            self.total, self.seen = torch.zeros_like(self.total), 0
        return bool(self.queue)


def _check(models: Sequence[DDPM]) -> None:
    first = models[0]
    for model in models:
        if not isinstance(model, DDPM):
            raise InputError(f"fit_together: DDPMs only, got {type(model).__name__}")
        same = (model.config, model.in_shape, model.n_classes, model.device)
        if same != (first.config, first.in_shape, first.n_classes, first.device):
            raise InputError("fit_together: the DDPMs must share config, image shape, classes and device")
        if model.optimizer is not None:
            raise InputError("fit_together: a DDPM with optimiser state continues with its own fit")
    if first.config.dropout > 0:
        raise InputError("fit_together: a DDPM with dropout trains with its own fit (vmap draws other masks)")


def fit_together(
    models: Sequence[DDPM],
    data: Sequence[tuple[np.ndarray, np.ndarray]],
    epochs: Sequence[int],
    generators: Sequence[torch.Generator],
    on_epoch: Sequence[Callable[[int, DDPM], None] | None] | None = None,
) -> list[list[dict[str, float]]]:
    """Train every ``models[r]`` on ``data[r]`` (uint8 images, labels) for ``epochs[r]`` epochs with the draws of
    ``generators[r]``, in one computation (see the module docstring); each model's per-epoch history, as
    :meth:`DDPM.fit` returns it. Afterwards each model holds its weights, EMA, counters and an AdamW with its
    moments, as after its own ``fit``."""
    if not len(models) or not len(models) == len(data) == len(epochs) == len(generators):
        raise InputError("fit_together: give one (data, epochs, generator) per DDPM, and at least one DDPM")
    _check(models)
    hooks = list(on_epoch) if on_epoch is not None else [None] * len(models)
    clients = [_Client(m, x, y, e, g, h) for m, (x, y), e, g, h in zip(models, data, epochs, generators, hooks)]
    first, config = models[0], models[0].config
    unet, device, rows = first.model, first.device, len(models)
    names = [name for name, _ in unet.named_parameters()]
    W = {n: torch.stack([dict(m.model.named_parameters())[n].detach() for m in models]) for n in names}
    ema = None
    if first.ema_model is not None:
        ema = {n: torch.stack([dict(m.ema_model.named_parameters())[n].detach() for m in models]) for n in names}
    moments = {n: torch.zeros_like(w) for n, w in W.items()}, {n: torch.zeros_like(w) for n, w in W.items()}
    taken = torch.zeros(rows, dtype=torch.float64, device=device)  # AdamW's step count per row (fresh optimiser)

    def loss(params, x_t, t, y, noise, mask):
        pred = functional_call(unet, params, (x_t, t, y))
        value = ((pred - noise).pow(2).flatten(1).mean(1) * mask).sum() / mask.sum().clamp_min(1)
        return value, value

    gradients = vmap(grad(loss, has_aux=True))
    shape = first.in_shape
    unet.train()
    try:
        while True:
            active = [client.pending() for client in clients]
            if not any(active):
                break
            x0, noise, mask, t, y, sizes = _next_batches(clients, active, first)
            scale = (-1,) + (1,) * len(shape)
            a = first._sqrt_ab.to(device)[t].view(rows, *scale)
            s = first._sqrt_1m_ab.to(device)[t].view(rows, *scale)
            grads, values = gradients(W, a * x0 + s * noise, t, y, noise, mask)
            on = torch.tensor(active, device=device)
            taken += on
            _step(W, grads, moments, taken, on, config)
            if ema is not None:
                _ema_step(ema, W, clients, on, config)
            for r, client in enumerate(clients):
                if active[r]:
                    client.steps += 1
                    client.total += values[r].detach().double() * sizes[r]
                    client.seen += sizes[r]
                    if not client.queue:
                        _end_epoch(client, r, W, ema, moments, taken)
    finally:
        for client in clients:
            client.model.model.eval()
    return [client.history for client in clients]


def _next_batches(clients: Sequence[_Client], active: list[bool], first: DDPM) -> tuple:
    """Every row's next batch, padded to ``batch_size``: (x0, ε, mask, t, y, sizes). An active row pops its next
    batch of indices and draws t, then ε, from its own generator (:meth:`DDPM.fit`'s order); an idle row stays
    zeros with mask 0."""
    config, shape, device, rows = first.config, first.in_shape, first.device, len(clients)
    x0 = torch.zeros(rows, config.batch_size, *shape, device=device)
    noise, mask = torch.zeros_like(x0), torch.zeros(rows, config.batch_size, device=device)
    t = torch.zeros(rows, config.batch_size, dtype=torch.long, device=device)
    y = torch.zeros(rows, config.batch_size, dtype=torch.long, device=device)
    sizes = []
    for r, client in enumerate(clients):
        if not active[r]:
            sizes.append(0)
            continue
        idx = first._to_device(client.queue.pop(0))
        g = client.generator  # fit's order: t, then ε
        t_r = first._to_device(torch.randint(0, config.timesteps, (len(idx),), generator=g, device=g.device))
        x0[r, : len(idx)], y[r, : len(idx)], t[r, : len(idx)] = client.data[idx], client.labels[idx], t_r
        noise[r, : len(idx)] = first._randn((len(idx), *shape), g)
        mask[r, : len(idx)] = 1
        sizes.append(len(idx))
    return x0, noise, mask, t, y, sizes


def _ema_step(ema: dict, W: dict, clients: Sequence[_Client], on: torch.Tensor, config) -> None:
    """Each active row's EMA of its weights after its step (decay ``config.ema``, with warm-up (1+n)/(10+n) over
    its n steps where ``config.ema_warmup``), as :meth:`DDPM.fit` updates its EMA model; idle rows keep theirs."""
    done = torch.tensor([c.steps + 1 for c in clients], dtype=torch.float64, device=on.device)
    decay = torch.full_like(done, config.ema)
    if config.ema_warmup:
        decay = torch.minimum(decay, (1 + done) / (10 + done))
    for n in ema:
        view = (-1,) + (1,) * (W[n].dim() - 1)
        lerped = ema[n].lerp(W[n], (1 - decay).to(W[n].dtype).view(view))
        ema[n] = torch.where(on.view(view), lerped, ema[n])


def _step(W: dict, grads: dict, moments: tuple[dict, dict], taken: torch.Tensor, on: torch.Tensor, config) -> None:
    """Each active row's gradient clipping (``clip_grad_norm_``'s formula) and AdamW step (torch.optim.AdamW's
    defaults, as :meth:`DDPM.fit` uses them: β = 0.9, 0.999, ε = 1e-8), in place in ``W``."""
    first, second = moments
    rows = len(taken)
    coef = torch.ones(rows, device=taken.device)
    if config.grad_clip > 0:
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], 1).norm(dim=1)
        coef = (config.grad_clip / (norms + 1e-6)).clamp(max=1.0)
    for n, w in W.items():
        view = (-1,) + (1,) * (w.dim() - 1)
        g, keep = grads[n] * coef.view(view).to(w.dtype), on.view(view)
        first[n], second[n], update = adam_update(first[n], second[n], g, taken.view(view), config.lr,
                                                  keep)  # fmt: skip
        W[n] = torch.where(keep, w * (1 - config.lr * config.weight_decay) - update, w)  # AdamW: decay, then Adam


def _end_epoch(client: _Client, r: int, W: dict, ema: dict | None, moments: tuple[dict, dict], taken) -> None:
    """Client r's epoch is over: its weights, EMA, counters and AdamW moments into its DDPM, its record, its hook."""
    model = client.model
    with torch.no_grad():
        for n, p in model.model.named_parameters():
            p.copy_(W[n][r])
        if ema is not None:
            for n, p in model.ema_model.named_parameters():
                p.copy_(ema[n][r])
    model.steps_done = client.steps
    model.epochs_done += 1
    client.epochs_left -= 1
    params = dict(model.model.named_parameters())
    model.optimizer = torch.optim.AdamW(params.values(), lr=model.config.lr, weight_decay=model.config.weight_decay)
    for n, p in params.items():
        model.optimizer.state[p] = {"step": torch.tensor(float(taken[r])), "exp_avg": moments[0][n][r].clone(),
                                    "exp_avg_sq": moments[1][n][r].clone()}  # fmt: skip
    client.history.append({"loss": float(client.total) / max(client.seen, 1)})
    if client.on_epoch is not None:
        model.model.eval()
        client.on_epoch(model.epochs_done, model)
        model.model.train()
