"""DynaFed (dynafed.txt Sec. 4, Algorithms 1-2, appendix B): server-side data synthesis from the global trajectory.

Clients run the engine's algorithm unchanged. The server records the global models w^1, ..., w^L of the first L
rounds (``trajectory_rounds``; on the CPU). After aggregating round L it learns D_syn = (X, y) by trajectory
matching (Algorithm 1, eq. 3-4):

    min_{X, y}  E_{t ~ U(1, L−s)} d(w̃, w*),   w̃ = A(X, y, w^t, s'),

where A takes s' (``inner_steps``) full-batch SGD steps w <- w − α ∇_w CE(w; X, softmax(y)) from w^t, unrolled and
differentiated with ``torch.func`` (``functional_call`` + ``grad``: no copied modules), and the target w* is
w^{t+s} (s = ``segment`` = 5) averaged with ``target_average`` = 2 checkpoints drawn between w^t and w^{t+s}
(Sec. 6: "the target checkpoint is averaged with 2 checkpoints sampled between"). X starts as Gaussian noise, the
label logits y at zero (equal probabilities over all labels, Sec. 4.1); X is learned by Adam at ``data_lr`` =
5e-2 (the paper) and y by Adam at ``label_lr`` = 1e-2 (the paper names one rate; the authors' code uses these
two), for ``iterations`` = N outer steps (paper: 1000). |D_syn| = ``per_class`` × classes (150 on 10 classes).
d (``distance``): "euclidean", ||w̃ − w*||² / ||w^t − w*||² over all parameters (the normalised trajectory
matching loss the authors' code optimises), or "cosine", 1 − cos(w̃ − w^t, w* − w^t) (the distance Fig. 6 plots).
The inner step size α starts at ``inner_lr`` and is itself learned by Adam at ``inner_lr_lr`` (the authors'
code: the paper's "inner lr 1e-5" is the learning rate of a learnable step size that starts at 0.04; 0 keeps α
fixed). ``augment = "dsa"`` (the default) applies the code's differentiable siamese augmentation
(:mod:`fl.augment`, strategy ``dsa_strategy``, one group per call) to X in every inner step and in every
fine-tuning step; "none" turns it off.

From round L+1 on (Algorithm 2; the code also fine-tunes in round L itself), after every aggregation, the server
fine-tunes the global model on D_syn (Algorithm 2 line 12) with ``finetune_steps`` full-batch steps of
``finetune_optimizer`` at ``finetune_lr`` on the soft labels softmax(y). The paper gives none of the three; we
take the authors' code's: 20 epochs of Adam at 1e-4 with batches of 256, i.e. 20 full-batch steps on 150 images
(a fresh Adam each round).

How the unroll and its backward are computed (:class:`MatchingPath`, the key ``matching``) does not change the
numbers beyond rounding: the reference path (:func:`unroll`: ``torch.func.grad`` through ``functional_call``) and
the fast path (:class:`FastUnroll`: the model's layers as functions, an instance norm with hand-written first and
second derivatives, ``torch.autograd.grad``; on CUDA also TF32, channels-last and one CUDA graph per inner step)
give the same D_syn to 1e-10 in float64 (tests/fl/methods/test_dynafed_fast.py). The batched path
(``matching = "batched"``: :func:`unroll_many`, the reference unroll vmapped over runs) lets a
fleet compute the syntheses of several runs as one (:func:`synthesize_together`), each run's D_syn that of its
synthesis alone to float64 rounding (tests/fl/test_fleet.py).

The synthesis log (seconds, matching loss every ``log_every`` iterations, the learned α, the matching path) lands in
the metrics row of round L; the run folder gets ``dynafed_dsyn.png`` (D_syn with each image's most likely soft label
and its probability). The estimators' δ² compares ∇f of the real clients with ∇ of the soft-label loss on D_syn.

The code: this module holds the method (its hooks) and the synthesis that runs it (:class:`Synthesis`, alone or
several runs' together); the matching loss and the reference unroll are :mod:`fl.methods.dynafed_matching`, the
fast path and its switches :mod:`fl.methods.dynafed_fast`, the saved progress :mod:`fl.methods.dynafed_progress`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fl.augment import DSA_STRATEGY, dsa, strategy_groups
from fl.batched import FLEET
from fl.methods.base import WORK_FOLDER, Method, Picture, ServerRound, require
from fl.methods.dynafed_fast import (
    CUDA_SWITCHES,
    MATCHING_ENV,
    SWITCHES,
    FastUnroll,
    MatchingPath,
    average_pool,
    functional_layers,
    instance_norm,
    relative_error,
)
from fl.methods.dynafed_matching import (
    Matching,
    distance,
    label_loss,
    match_loss,
    match_target,
    unroll,
    unroll_many,
)
from fl.methods.dynafed_progress import Progress, progress_key
from fl.precision import PRECISIONS, arithmetic
from theory.errors import InputError

__all__ = [  # what other code imports from here, wherever it is defined
    "CUDA_SWITCHES", "MATCHING_ENV", "SWITCHES", "DynaFed", "FastUnroll", "Matching", "MatchingPath", "Progress",
    "Synthesis", "average_pool", "distance", "functional_layers", "instance_norm", "iterate_together", "label_loss",
    "match_loss", "match_target", "progress_key", "relative_error", "return_memory", "synthesize_together", "unroll",
    "unroll_many",
]  # fmt: skip

DISTANCES = ("cosine", "euclidean")
OPTIMISERS = ("sgd", "adam")
AUGMENTS = ("dsa", "none")
TARGET_DRAWS = ("paper", "code")


class Synthesis:
    """One run's synthesis (Algorithm 1) in progress: D_syn's images X and label logits y, the inner step size α,
    their Adam optimisers, the segment draws and DSA's generator (the round's), continued from its saved progress
    (:class:`Progress`, in the run folder of :data:`WORK_FOLDER` when it was made)."""

    def __init__(self, method: DynaFed, s: ServerRound, path: MatchingPath | None = None) -> None:
        server, flat, device, dtype = s.state["server"], s.flat, s.x.device, s.x.dtype
        self.method, self.flat, self.together_with = method, flat, 1
        self.trajectory = trajectory = server.pop("trajectory").to(device)
        n_classes, shape = s.data.n_classes, tuple(s.data.x.shape[1:])
        n = method.per_class * n_classes
        self.inputs = torch.randn((n, *shape), generator=s.generator, dtype=dtype).to(device).requires_grad_(True)
        self.label_logits = torch.zeros(n, n_classes, dtype=dtype, device=device, requires_grad=method.label_lr > 0)
        self.lr = torch.tensor(method.inner_lr, dtype=dtype, device=device, requires_grad=method.inner_lr_lr > 0)
        groups = [{"params": [self.inputs], "lr": method.data_lr}]
        groups += [{"params": [self.label_logits], "lr": method.label_lr}] if method.label_lr > 0 else []
        self.optimiser = torch.optim.Adam(groups)
        self.lr_optimiser = torch.optim.Adam([self.lr], lr=method.inner_lr_lr) if method.inner_lr_lr > 0 else None
        self.draws, self.generator = np.random.default_rng(s.seed), s.generator
        self.augment = method.augmenter(s.generator, shape)
        flat.model.eval()
        self.path = (path or MatchingPath.parse(method.matching)).on(device, dtype, method.precision)
        self.device = device
        self.fast = FastUnroll(flat.model, flat.layout, self.path) if self.path.fast else None
        self.learned = [v for v in (self.inputs, self.label_logits, self.lr) if v.requires_grad]
        self.progress = Progress(WORK_FOLDER.get(), method, trajectory, s.seed)
        self.first, self.losses, earlier = self.progress.restore(self._state())
        self.start = time.perf_counter() - earlier

    def _state(self) -> tuple:
        return self.inputs, self.label_logits, self.lr, self.optimiser, self.lr_optimiser, self.draws, self.generator

    def key(self) -> tuple:
        """What must agree for syntheses to be computed as one: the method's settings, the model, the shapes,
        dtype and device, and the iteration they continue from."""
        shapes = tuple((name, tuple(shape)) for name, shape in self.flat.layout)
        return ("dynafed", self.method, repr(self.flat.model), shapes, tuple(self.inputs.shape), self.inputs.dtype,
                self.inputs.device, tuple(self.trajectory.shape), self.first)  # fmt: skip

    def run(self) -> None:
        """The synthesis alone, from its first iteration to the last."""
        for n_iter in range(self.first, self.method.iterations):
            self.iterate(n_iter)

    def iterate(self, n_iter: int) -> torch.Tensor:
        """Outer iteration ``n_iter`` alone: a segment, the matching loss, its backward and the updates; the loss."""
        method = self.method
        t, middle = method.draw_segment(self.draws, len(self.trajectory))  # w^t, t+s in the trajectory (0-based)
        self.zero_grad()
        with self.arithmetic():
            matching = Matching(
                self.flat.model, self.flat.named, self.trajectory, self.inputs, self.label_logits, self.lr,
                method.inner_steps, method.distance, self.augment, method.class_mean,
            )  # fmt: skip
            loss = match_loss(matching, t, middle, self.fast)
            loss.backward(inputs=self.learned)  # only these: the fast path's first inner step differentiates at a leaf
        self.advance(n_iter, loss)
        return loss.detach()

    def arithmetic(self) -> contextlib.AbstractContextManager:
        """The precision the matching runs in (``method.precision``; "auto": the device's own settings)."""
        if self.method.precision == "auto":
            return contextlib.nullcontext()
        return arithmetic(self.method.precision, self.device)

    def zero_grad(self) -> None:
        self.optimiser.zero_grad()
        if self.lr_optimiser is not None:
            self.lr_optimiser.zero_grad()

    def advance(self, n_iter: int, loss: torch.Tensor) -> None:
        """Iteration ``n_iter``'s update from the gradients of its matching ``loss``, its log and saved progress."""
        method = self.method
        self.optimiser.step()
        if self.lr_optimiser is not None:
            self.lr_optimiser.step()
            with torch.no_grad():
                self.lr.clamp_(min=1e-8)
        if n_iter % method.log_every == 0 or n_iter == method.iterations - 1:
            self.losses.append([n_iter, float(loss.detach())])
        if (n_iter + 1) % method.save_every == 0 or n_iter + 1 == method.iterations:
            self.progress.save(n_iter + 1, self._state(), self.losses, time.perf_counter() - self.start)

    def release(self) -> None:
        """Drop what only the synthesis needed: the fast path's CUDA graphs (each holds a private memory pool, ~10
        GiB at the paper's settings) and both Adam states. D_syn, its labels and α stay (:meth:`finish` keeps
        them). :func:`return_memory` then gives the freed blocks back to the device."""
        if self.fast is not None:
            self.fast.graphs, self.fast.graph_key = None, None
        self.optimiser = self.lr_optimiser = None

    def finish(self, s: ServerRound) -> None:
        """D_syn, its labels and α into the server state; the synthesis log into the round's."""
        server = s.state["server"]
        server["x_syn"] = self.inputs.detach()
        server["y_syn"] = self.label_logits.detach()
        server["alpha"] = self.lr.detach().clone()
        path = self.path.describe() if self.fast is None else self.fast.describe()
        if self.path.batched:
            path += f" ({self.together_with} run{'s' * (self.together_with > 1)})"
        path += "" if self.method.precision == "auto" else f"; {self.method.precision}"
        s.log["synthesis"] = {
            "seconds": time.perf_counter() - self.start, "loss": self.losses, "alpha": float(self.lr.detach()),
            "path": path,
        }  # fmt: skip


def return_memory(device: torch.device) -> None:
    """After a synthesis: collect what it left in reference cycles (a graphed step's closures refer back to their
    :class:`FastUnroll`) and, on CUDA, hand the caching allocator's free blocks back to the device, so that a run's
    later rounds, the syntheses after it in a process and the other processes on the chip find the memory free (the
    lease's scheduler admits by the device's free memory; what syntheses reserved:
    results/ledger/bench/2026-11-27-h100)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def synthesize_together(jobs: list[Synthesis]) -> list[None]:
    """Several runs' syntheses (equal :meth:`Synthesis.key`: settings and shapes, seeds apart) as one computation:
    every iteration one :func:`unroll_many` over the runs, each with its own segment draws, DSA draws, Adam states,
    log and progress file. A run's D_syn equals its synthesis alone to rounding (float64 on the CPU: ~1e-12,
    tested), not bit for bit: the grouped convolutions sum in another order."""
    for job in jobs:
        job.together_with = len(jobs)
    for n_iter in range(jobs[0].first, jobs[0].method.iterations):
        iterate_together(jobs, n_iter)
    return [None] * len(jobs)


def iterate_together(jobs: list[Synthesis], n_iter: int) -> torch.Tensor:
    """Outer iteration ``n_iter`` of every job in one :func:`unroll_many`; their losses (R,)."""
    method, flat = jobs[0].method, jobs[0].flat
    segments = [job.method.draw_segment(job.draws, len(job.trajectory)) for job in jobs]
    for job in jobs:
        job.zero_grad()
    starts = torch.stack([job.trajectory[t] for job, (t, _) in zip(jobs, segments)])
    targets = torch.stack([match_target(job.trajectory, t, middle) for job, (t, middle) in zip(jobs, segments)])
    inputs, label_logits, lr = (
        torch.stack([getattr(job, k) for job in jobs]) for k in ("inputs", "label_logits", "lr")
    )
    with jobs[0].arithmetic():
        ends = unroll_many(flat.model, flat.named, starts, inputs, label_logits, method.inner_steps, lr,
                           [job.augment for job in jobs], method.class_mean)  # fmt: skip
        losses = torch.stack([distance(end, a, b, method.distance) for end, a, b in zip(ends, starts, targets)])
        losses.sum().backward(inputs=[v for job in jobs for v in job.learned])
    for job, loss in zip(jobs, losses):
        job.advance(n_iter, loss)
    return losses.detach()


@dataclass(frozen=True)
class DynaFed(Method):
    """trajectory_rounds: L (20). segment: s (5). inner_steps: s' (not given; 20). per_class: D_syn images per
    class (15: 150 on 10 classes). iterations: N outer steps (1000). data_lr: Adam lr for X and y (5e-2).
    label_lr: Adam lr for the label logits y (1e-2, the authors' code). inner_lr / inner_lr_lr: the learnable
    inner step size α and its Adam lr (0.04 / 1e-5, the authors' code). distance: "euclidean" or "cosine".
    target_average: checkpoints between w^t and w^{t+s} averaged into the target (2). finetune_steps /
    finetune_lr / finetune_optimizer: the server's fine-tuning after each aggregation from round L+1 (20 / 1e-4 /
    "adam", the authors' code; the paper leaves them open). log_every: iterations between logged matching
    losses. save_every: iterations between saves of the synthesis in progress (:class:`Progress`; the numbers do not
    depend on it). precision: the arithmetic of the matching's products and convolutions (:mod:`fl.precision`):
    "auto" (the device's: float32 on the CPU; on CUDA, TF32 on the fast path and cuDNN's default, TF32 convolutions,
    on the others), or "fp32", "tf32" (emulated off CUDA) or "bf16" on any device; the server's fine-tuning is not
    affected. augment: "dsa" (each inner step sees its own differentiable augmentation of X, DSA) or "none".
    dsa_strategy: DSA's transformations, joined by "_" (DSA's and DynaFed's default: all six). target_draw: how a
    segment's target is drawn: "paper" (w^{t+s} averaged with ``target_average`` checkpoints between) or "code"
    (2..s checkpoints of w^{t+1..t+s}, with replacement, as the authors' code draws them). initial_checkpoint: the
    trajectory starts with the initial model w^0 (the authors' code) instead of w^1. class_mean: the matching's
    soft-label loss also averaged over the C classes, as the authors' code's ``kd_loss``. matching: how the
    matching's unroll and its backward are computed (:class:`MatchingPath`): "auto" (the fast path with the switches
    the device takes), "reference", "batched" (the reference unroll vmapped over runs: in a fleet the syntheses of
    the runs that reach theirs together are one computation), or "fast" followed by switches joined by "+" (from
    instance_norm, tf32, channels_last, graphs; e.g. "fast+instance_norm+graphs"); the same numbers to rounding, but
    not bit for bit, so a value other than "auto" is part of the run's identity."""

    name: ClassVar[str] = "dynafed"
    trajectory_rounds: int = 20
    segment: int = 5
    inner_steps: int = 20
    per_class: int = 15
    iterations: int = 1000
    data_lr: float = 0.05
    label_lr: float = 0.01
    inner_lr: float = 0.04
    inner_lr_lr: float = 1e-5
    distance: str = "euclidean"
    target_average: int = 2
    finetune_steps: int = 20
    finetune_lr: float = 1e-4
    finetune_optimizer: str = "adam"
    log_every: int = 10
    save_every: int = 5
    augment: str = "dsa"
    dsa_strategy: str = DSA_STRATEGY
    target_draw: str = "paper"
    initial_checkpoint: bool = False
    class_mean: bool = False
    precision: str = "auto"
    matching: str = "auto"

    def check(self) -> DynaFed:
        require(self.segment >= 1, "segment", "must be >= 1")
        require(
            self.trajectory_rounds >= self.segment + 1, "trajectory_rounds",
            f"L must be >= segment + 1 = {self.segment + 1} (a segment w^t -> w^(t+s) must fit in the trajectory)",
        )  # fmt: skip
        require(self.per_class >= 1, "per_class", "must be >= 1 (D_syn cannot be empty)")
        require(self.inner_steps >= 1, "inner_steps", "must be >= 1")
        require(self.iterations >= 0, "iterations", "must be >= 0")
        require(self.data_lr > 0, "data_lr", "must be > 0")
        require(self.label_lr >= 0, "label_lr", "must be >= 0 (0: the labels stay uniform)")
        require(self.inner_lr > 0, "inner_lr", "must be > 0")
        require(self.inner_lr_lr >= 0, "inner_lr_lr", "must be >= 0 (0: a fixed inner step size)")
        require(self.distance in DISTANCES, "distance", f"must be one of {', '.join(DISTANCES)}")
        require(self.target_average >= 0, "target_average", "must be >= 0")
        require(self.finetune_steps >= 0, "finetune_steps", "must be >= 0")
        require(self.finetune_lr > 0, "finetune_lr", "must be > 0")
        require(self.finetune_optimizer in OPTIMISERS, "finetune_optimizer", f"must be one of {', '.join(OPTIMISERS)}")
        require(self.log_every >= 1, "log_every", "must be >= 1")
        require(self.save_every >= 1, "save_every", "must be >= 1")
        require(self.augment in AUGMENTS, "augment", f"must be one of {', '.join(AUGMENTS)}")
        try:
            strategy_groups(self.dsa_strategy)
        except ValueError as error:
            require(False, "dsa_strategy", str(error))
        require(self.target_draw in TARGET_DRAWS, "target_draw", f"must be one of {', '.join(TARGET_DRAWS)}")
        require(self.target_draw == "paper" or self.segment >= 2, "segment", "must be >= 2 with target_draw 'code'")
        require(self.precision in ("auto", *PRECISIONS), "precision", f"must be auto or one of {', '.join(PRECISIONS)}")
        MatchingPath.parse(self.matching)  # an InputError naming method.matching
        require(
            MATCHING_ENV not in os.environ, "matching",
            f"the environment variable {MATCHING_ENV} is no longer read; unset it and set method.matching = "
            f"{os.environ.get(MATCHING_ENV, '')!r} in the config (or --set method.matching=...)",
        )  # fmt: skip
        return self

    def first_stateful_round(self) -> int:
        return 1  # the trajectory starts with round 1

    def shares_state_with(self, other: Method, next_round: int) -> bool:
        """Before the synthesis the state is the trajectory alone, which the synthesis settings (N, DSA, the target
        draw, ...) do not touch: another DynaFed's with the same trajectory settings is this one's."""
        return (
            isinstance(other, DynaFed)
            and (other.trajectory_rounds, other.initial_checkpoint) == (self.trajectory_rounds, self.initial_checkpoint)
            and next_round <= self.trajectory_rounds
        )

    def client_payload(self, state: dict) -> dict:
        """Nothing: DynaFed's clients train plain FedAvg; its trajectory and D_syn stay on the server."""
        return {}

    def before_round(self, s: ServerRound) -> None:
        if s.t == 1 and self.initial_checkpoint:  # the code's trajectory starts with the initial model w^0
            self.record(s)

    def record(self, s: ServerRound) -> None:
        """Append s.x to the trajectory (replacing the entry: the previous state stays whole). The trajectory lives
        on the CPU; a resumed checkpoint loads it onto the run's device, hence ``previous.cpu()``."""
        server = s.state["server"]
        previous = server.get("trajectory", torch.empty(0, s.x.numel(), dtype=s.x.dtype))
        server["trajectory"] = torch.cat([previous.cpu(), s.x.detach().cpu()[None]])

    def augmenter(self, generator: torch.Generator, shape: tuple[int, ...]) -> Callable | None:
        """DSA with the method's strategy and draws from ``generator`` (None with ``augment = "none"``), for
        images of ``shape`` (C, H, W)."""
        if self.augment == "none":
            return None
        if len(shape) != 3:
            raise InputError(f"method.augment = 'dsa' needs images (C, H, W), not samples of shape {shape}; "
                             "set method.augment = 'none'")  # fmt: skip
        groups = strategy_groups(self.dsa_strategy)
        return lambda batch: dsa(batch, groups, generator)

    def draw_segment(self, draws: np.random.Generator, n_checkpoints: int) -> tuple[int, list[int]]:
        """A start t, uniform over the segments that fit, and the offsets m of the checkpoints averaged into w*."""
        t = int(draws.integers(0, n_checkpoints - self.segment))
        if self.target_draw == "code":  # 2..s checkpoints, with replacement, from w^{t+1..t+s}
            count = int(draws.integers(2, self.segment + 1))
            return t, [int(m) for m in draws.integers(1, self.segment + 1, count)]
        middle = draws.integers(1, self.segment, self.target_average) if self.segment > 1 else []
        return t, [self.segment, *(int(m) for m in middle)]

    def after_aggregate(self, s: ServerRound) -> torch.Tensor:
        if s.t <= self.trajectory_rounds:  # record w^t
            self.record(s)
        if s.t == self.trajectory_rounds:
            self.synthesize(s)
        if s.t > self.trajectory_rounds:
            return self.finetune(s)
        return s.x

    def synthesize(self, s: ServerRound) -> None:
        """Algorithm 1 on the recorded trajectory; keeps D_syn and α, drops the trajectory. On the batched matching
        path (``matching = "batched"``) in a fleet (:mod:`fl.fleet`), the syntheses of the runs that reach
        theirs together with equal settings are computed as one (:func:`synthesize_together`)."""
        job = Synthesis(self, s)
        fleet = FLEET.get()
        if job.path.batched and fleet is not None:
            fleet.together(job.key(), job, synthesize_together)
        elif job.path.batched:
            synthesize_together([job])
        else:
            job.run()
        job.finish(s)
        job.release()
        del job
        return_memory(s.x.device)

    def finetune(self, s: ServerRound) -> torch.Tensor:
        """Algorithm 2 line 12: ``finetune_steps`` full-batch steps on CE(w; X, softmax(y)) from the aggregate."""
        inputs, probabilities = self.synthetic_set(s.state)
        flat = s.flat
        w = s.x.detach().clone().requires_grad_(True)
        optimiser_class = torch.optim.SGD if self.finetune_optimizer == "sgd" else torch.optim.Adam
        optimiser = optimiser_class([w], lr=self.finetune_lr)
        augment = self.augmenter(s.generator, tuple(inputs.shape[1:]))
        flat.model.eval()
        for _ in range(self.finetune_steps):
            optimiser.zero_grad()
            batch = inputs if augment is None else augment(inputs)
            label_loss(functional_call(flat.model, flat.named(w), (batch,)), probabilities, self.class_mean).backward()
            optimiser.step()
        return w.detach()

    def synthetic_set(self, state: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        server = state.get("server", {})
        if "x_syn" not in server:
            return None
        return server["x_syn"], F.softmax(server["y_syn"], 1)

    def report(self, info: dict, state: dict) -> dict:
        synthetic = self.synthetic_set(state)
        if synthetic is None:
            return {}
        return {"dsyn_size": len(synthetic[0]), "dsyn_alpha": float(state["server"]["alpha"])}

    def pictures(self, state: dict) -> list[Picture]:
        synthetic = self.synthetic_set(state)
        if synthetic is None:
            return []
        inputs, probabilities = (v.detach().cpu().double().numpy() for v in synthetic)
        return [Picture("dynafed_dsyn.png", inputs, probabilities, "DynaFed D_syn (soft labels)", soft=True)]
