"""FedCOG (fedcog.txt Sec. 4, Algorithm 1, A.1.1, A.2.2): consensus-oriented generation and distillation.

In round t ≥ ``start_round`` every participating client k, with the global model θ^t and its own local model
θ_k^{t-1,τ} of the last round it took part in, both frozen:

1. generates D̂_k = {(x̂_j, y_j)}: learnable inputs x̂ (``n_generate`` = N = 256 Gaussian-noise images in the
   normalised input space, redrawn each round) optimised for ``generate_steps`` = 100 steps of (eq. 1)

       L_gen = (1/N) Σ_j CE(θ^t; x̂_j, y_j) + λ_dis · L_dis,
       L_dis = 1 − ½ (KL(p_g ‖ p̄) + KL(p_l ‖ p̄)),  p̄ = ½ (p_g + p_l)        (eq. 2, = 1 − JS(p_g, p_l))

   (p_g, p_l the softmax outputs of the global and the previous local model): the global model must recognise
   x̂ while the old local model disagrees with it. Labels y: uniform over the classes (Sec. 4.1), or
   ``labels = "complement"`` (A.1.1): class c gets a share ∝ max(d_k) − d_{k,c} of N, d_k the client's class
   counts (uniform when d_k is already balanced).
2. trains from θ^t on (eq. 3)

       w_ce · CE(θ; D_k) + w_kd · KL(p(θ^t; x̂) ‖ p(θ; x̂)),

   the teacher's soft labels p(θ^t; x̂) fixed for the round: w_ce = 1, w_kd = λ_kd (``kd_weighting =
   "lambda"``, the paper's default λ_kd = 0.01), or the hyper-parameter-free weights of A.2.2 (``"balanced"``):
   w_ce = N_real/(N_real + N_gen), w_kd = N_gen/(N_real + N_gen), N_real = |D_k|, N_gen = Σ_c (max(d_k) − d_{k,c}).
   Every local step takes a batch of B real samples (the algorithm's own step: FedProx, SCAFFOLD, FedDyn
   corrections compose unchanged) and the next ``kd_batch_size`` x̂ (cycling through permutations of D̂_k).

The server aggregates as the algorithm does; FedCOG sends nothing beyond the model (Sec. 4.3).

Choices the paper leaves open, with what we chose:
- The "previous local model" of a client that has not yet taken part since ``start_round − 1``: the global model
  (Algorithm 1 has all clients in every round, so the question never arises there; with the global model L_dis
  is constant and generation is the CE term alone, instead of skipping the client's first FedCOG round).
  Local models are kept on the CPU, and only for clients that have taken part (state ``clients[k]["local"]``).
- The x̂ optimiser: Adam, lr ``generate_lr`` = 0.01, betas (0.5, 0.9) (the authors' code, ``lr_g`` default and
  its Adam betas; the paper names no optimiser). The last iterate is kept.
- Temperature T = 1 for L_dis and the KD term (the paper has none; the code's ``js_T`` and ``T`` default to 1);
  the KD term is multiplied by T² (Hinton et al.) so T changes the softness, not the scale.
- ``kd_batch_size`` = 0 means the training batch size B (the authors' code: ``sample_batch_size = batch_size``).
- Where the authors' code departs from the paper (see ../shared/notes/fedcog.md) we follow the paper: eq. 2 as
  written (their code clamps probabilities and computes KL the other way), uniform labels by default, λ_kd.

At the server model θ the KD term's gradient is zero (its teacher is θ itself: Lemma 5.5), so the objective the
estimators measure there is w_ce · ∇f_k (:meth:`FedCOG.real_weight`); FedCOG has no synthetic distribution
to compare with the real one at the server model, so it reports no δ².
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fl.methods.base import ClientRound, CyclicBatches, Method, require
from fl.synthesis.fedssyn import class_counts

LABELS = ("uniform", "complement")
KD_WEIGHTINGS = ("lambda", "balanced")


def kl(p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) per row, from probabilities p and log-probabilities log q (0·log 0 = 0). For a constant p (a
    teacher): where p is 0 the gradient of p·log p is infinite, so a p that needs a gradient goes to
    :func:`kl_logs`."""
    return F.kl_div(log_q, p, reduction="none").sum(1)


def kl_logs(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) per row from log-probabilities (log_softmax): Σ p·(log p − log q) with finite gradients where p
    underflows to 0 (a confident softmax in float32; F.kl_div's gradient there is 0·∞ = NaN)."""
    return (log_p.exp() * (log_p - log_q)).sum(1)


def js_divergence(logits_a: torch.Tensor, logits_b: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over the batch of JS(p_a, p_b) = ½ KL(p_a ‖ p̄) + ½ KL(p_b ‖ p̄), p̄ = ½(p_a + p_b) (nats, ≤ log 2),
    in log space (log p̄ = logaddexp(log p_a, log p_b) − log 2), so its gradient stays finite for any logits."""
    log_a, log_b = F.log_softmax(logits_a / temperature, 1), F.log_softmax(logits_b / temperature, 1)
    log_mean = torch.logaddexp(log_a, log_b) - math.log(2)
    return (0.5 * (kl_logs(log_a, log_mean) + kl_logs(log_b, log_mean))).mean()


def disagreement_loss(logits_global: torch.Tensor, logits_local: torch.Tensor, temperature: float = 1.0):
    """L_dis of eq. 2: 1 − JS(p_global, p_local); minimising it makes the two models disagree."""
    return 1 - js_divergence(logits_global, logits_local, temperature)


def target_labels(counts: np.ndarray, n: int, scheme: str) -> torch.Tensor:
    """The N target labels, in class blocks: uniform (Sec. 4.1) or complementary to ``counts`` (A.1.1); the
    class counts are rounded by largest remainder so they sum to N.

    >>> target_labels(np.array([500, 0, 400, 200, 400]), 10, "complement").tolist()
    [1, 1, 1, 1, 1, 2, 3, 3, 3, 4]
    """
    n_classes = len(counts)
    share = np.ones(n_classes, np.int64)
    if scheme == "complement" and (counts.max() - counts).sum() > 0:
        share = counts.max() - counts
    per_class = class_counts(np.repeat(np.arange(n_classes), share), n, n_classes)
    return torch.as_tensor(np.repeat(np.arange(n_classes), per_class))


def starting_noise(
    n: int, shape: tuple[int, ...], generator: torch.Generator, device: torch.device | str, dtype: torch.dtype
) -> torch.Tensor:
    """Where generation starts: ``n`` Gaussian inputs of ``shape``, drawn on the CPU from ``generator`` (the same
    numbers on every device), then moved to ``device``."""
    return torch.randn((n, *shape), generator=generator, dtype=dtype).to(device)


def generate(
    global_logits, local_logits, noise: torch.Tensor, labels: torch.Tensor, steps: int, lr: float,
    lambda_dis: float, temperature: float,
) -> tuple[torch.Tensor, list[float]]:  # fmt: skip
    """x̂ = argmin of L_gen (eq. 1) by ``steps`` Adam steps from ``noise`` (:func:`starting_noise`, one input per
    label); returns x̂ and L_gen per step. ``global_logits`` and ``local_logits`` map inputs to the frozen models'
    logits."""
    x_hat = noise.clone().requires_grad_(True)
    labels = labels.to(noise.device)
    optimiser = torch.optim.Adam([x_hat], lr=lr, betas=(0.5, 0.9))
    losses = []
    for _ in range(steps):
        optimiser.zero_grad()
        logits_g = global_logits(x_hat)
        loss = F.cross_entropy(logits_g, labels)
        if lambda_dis:
            loss = loss + lambda_dis * disagreement_loss(logits_g, local_logits(x_hat), temperature)
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    return x_hat.detach(), losses


@dataclass
class Distillation:
    """The local objective of eq. 3 for one round: ``real_weight``·CE on the real batch + ``kd_weight``·T²·KL
    (teacher ‖ student) on the next ``batch_size`` of the x̂ (cycled through permutations from ``generator``)."""

    x_hat: torch.Tensor
    teacher: torch.Tensor  # p(θ^t; x̂) at temperature T, fixed for the round
    real_weight: float
    kd_weight: float
    batch_size: int
    temperature: float
    generator: torch.Generator
    _batches: CyclicBatches | None = field(default=None, repr=False)

    def next_batch(self) -> torch.Tensor:
        if self._batches is None:
            self._batches = CyclicBatches(len(self.x_hat), self.batch_size, self.generator, self.x_hat.device)
        return self._batches.next()

    def kd_loss(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        log_student = F.log_softmax(model(self.x_hat[batch]) / self.temperature, 1)
        return kl(self.teacher[batch], log_student).mean() * self.temperature**2

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.real_weight * F.cross_entropy(model(x), y) + self.kd_weight * self.kd_loss(model, self.next_batch())


@dataclass(frozen=True)
class FedCOG(Method):
    """start_round: first round of generation and distillation (plain local training before; Table 1: 51, after
    50 FedAvg rounds). n_generate: N, the number of x̂ (256). generate_steps: optimisation steps for x̂ (100).
    generate_lr: Adam step size for x̂ (0.01, the authors' code). lambda_dis: λ_dis of eq. 1 (0.1).
    lambda_kd: λ_kd of eq. 3 (0.01). labels: "uniform" or "complement" (A.1.1). kd_weighting: "lambda" (eq. 3)
    or "balanced" (A.2.2). kd_batch_size: x̂ per local step (0: the training batch size). temperature: T of the
    softmax in L_dis and the KD term (1)."""

    name: ClassVar[str] = "fedcog"
    start_round: int = 1
    n_generate: int = 256
    generate_steps: int = 100
    generate_lr: float = 0.01
    lambda_dis: float = 0.1
    lambda_kd: float = 0.01
    labels: str = "uniform"
    kd_weighting: str = "lambda"
    kd_batch_size: int = 0
    temperature: float = 1.0

    def check(self) -> FedCOG:
        require(self.start_round >= 1, "start_round", "must be >= 1")
        require(self.n_generate >= 1, "n_generate", "must be >= 1")
        require(self.generate_steps >= 0, "generate_steps", "must be >= 0")
        require(self.generate_lr > 0, "generate_lr", "must be > 0")
        require(self.lambda_dis >= 0, "lambda_dis", "must be >= 0")
        require(self.lambda_kd >= 0, "lambda_kd", "must be >= 0")
        require(self.labels in LABELS, "labels", f"must be one of {', '.join(LABELS)}")
        require(self.kd_weighting in KD_WEIGHTINGS, "kd_weighting", f"must be one of {', '.join(KD_WEIGHTINGS)}")
        require(self.kd_batch_size >= 0, "kd_batch_size", "must be >= 0 (0: the training batch size)")
        require(self.temperature > 0, "temperature", "must be > 0")
        return self

    def weights(self, counts: np.ndarray) -> tuple[float, float]:
        """(w_ce, w_kd) of eq. 3 for a client with class counts d_k."""
        if self.kd_weighting == "lambda":
            return 1.0, self.lambda_kd
        n_real, n_gen = float(counts.sum()), float((counts.max() - counts).sum())
        return n_real / (n_real + n_gen), n_gen / (n_real + n_gen)

    def counts(self, c_data, i: int) -> np.ndarray:
        return np.bincount(c_data.y[c_data.train[i]].cpu().numpy(), minlength=c_data.n_classes)

    def real_weight(self, i: int, data, state: dict) -> float:
        return self.weights(self.counts(data, i))[0]

    def first_stateful_round(self) -> int:
        return max(self.start_round - 1, 1)

    def before_client(self, c: ClientRound) -> Distillation | None:
        if c.t < self.start_round:
            return None
        flat, x = c.flat, c.x.detach()
        counts = self.counts(c.data, c.i)
        previous = c.state["clients"].get(c.i, {}).get("local")
        local = x if previous is None else previous.to(x.device)
        flat.model.eval()  # frozen models: no dropout

        def logits(vector):
            params = flat.named(vector)
            return lambda inputs: functional_call(flat.model, params, (inputs,))

        labels = target_labels(counts, self.n_generate, self.labels)
        noise = starting_noise(len(labels), tuple(c.data.x.shape[1:]), c.generator, x.device, c.data.x.dtype)
        x_hat, losses = generate(
            logits(x), logits(local), noise, labels, self.generate_steps, self.generate_lr, self.lambda_dis,
            self.temperature,
        )  # fmt: skip
        with torch.no_grad():
            teacher = F.softmax(logits(x)(x_hat) / self.temperature, 1)
        c.log.setdefault("generation_loss", []).append([losses[0], losses[-1]] if losses else [])
        w_ce, w_kd = self.weights(counts)
        batch = self.kd_batch_size or c.local.batch_size
        return Distillation(x_hat, teacher, w_ce, w_kd, batch, self.temperature, c.generator)

    def after_client(self, c: ClientRound, y: torch.Tensor) -> None:
        if c.t >= self.start_round - 1:  # the next FedCOG round needs this client's local model
            c.state["clients"][c.i] = {"local": y.detach().to("cpu", copy=True)}
