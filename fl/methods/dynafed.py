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

The synthesis log (seconds, matching loss every ``log_every`` iterations, the learned α) lands in the metrics row
of round L; the run folder gets ``dynafed_dsyn.png`` (D_syn with each image's most likely soft label and its
probability). The estimators' δ² compares ∇f of the real clients with ∇ of the soft-label loss on D_syn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad

from fl.atomic import write_atomically
from fl.augment import DSA_STRATEGY, dsa, strategy_groups
from fl.estimators import soft_cross_entropy
from fl.methods.base import WORK_FOLDER, Method, Picture, ServerRound, require
from theory.errors import InputError

DISTANCES = ("cosine", "euclidean")
OPTIMISERS = ("sgd", "adam")
AUGMENTS = ("dsa", "none")
TARGET_DRAWS = ("paper", "code")


def distance(w: torch.Tensor, start: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """d(w̃, w*) of eq. 3: cosine distance of the updates from ``start``, or the normalised squared distance."""
    if kind == "cosine":
        return 1 - F.cosine_similarity(w - start, target - start, dim=0)
    return (w - target).pow(2).sum() / (start - target).pow(2).sum().clamp_min(torch.finfo(w.dtype).tiny)


def label_loss(logits: torch.Tensor, probabilities: torch.Tensor, class_mean: bool) -> torch.Tensor:
    """CE(w; X, softmax(y)) with soft labels; ``class_mean``: also averaged over the C classes (÷ C), as the
    authors' code's ``kd_loss`` (a mean over batch and classes) computes it."""
    loss = soft_cross_entropy(logits, probabilities)
    return loss / logits.shape[1] if class_mean else loss


def unroll(
    model, named, w, inputs, label_logits, steps: int, lr: torch.Tensor, augment: Callable | None = None,
    class_mean: bool = False,
) -> torch.Tensor:  # fmt: skip
    """A(X, y, w, s'): ``steps`` full-batch SGD steps on CE(w; X, softmax(y)), differentiable in X, y and α; with
    ``augment`` each step sees its own augmentation of X (DSA, differentiable in X)."""

    def loss(vector, batch):
        logits = functional_call(model, named(vector), (batch,))
        return label_loss(logits, F.softmax(label_logits, 1), class_mean)

    step = grad(loss)
    for _ in range(steps):
        w = w - lr * step(w, inputs if augment is None else augment(inputs))
    return w


def match_target(trajectory: torch.Tensor, t: int, middle) -> torch.Tensor:
    """w* of a segment from w^t: the mean of w^{t+m} for m in ``middle`` ("paper": w^{t+s} and 2 between;
    "code": 2 to s draws with replacement from t+1..t+s)."""
    return torch.stack([trajectory[t + m] for m in middle]).mean(0)


def match_loss(
    model, named, trajectory, inputs, label_logits, lr, t: int, middle, steps: int, kind: str,
    augment: Callable | None = None, class_mean: bool = False,
) -> torch.Tensor:  # fmt: skip
    """The matching loss of one segment: start w^t, target the mean of w^{t+m} for m in ``middle``."""
    start = trajectory[t]
    target = match_target(trajectory, t, middle)
    end = unroll(model, named, start, inputs, label_logits, steps, lr, augment, class_mean)
    return distance(end, start, target, kind)


class Progress:
    """The synthesis in progress, kept in ``folder/dynafed_synthesis.pt`` (the run folder, :data:`WORK_FOLDER`)
    every ``save_every`` iterations: D_syn, the label logits, α, both Adam states, the segment draws' and DSA's
    generator states, the losses and the seconds so far. An interrupted run recomputes the round and continues the
    synthesis from there, bit for bit as without the interruption; the file only counts for the same trajectory,
    settings and seed (its ``key``). No folder (tests, Flower): nothing is kept."""

    FILE = "dynafed_synthesis.pt"

    def __init__(self, folder: Path | None, method: DynaFed, trajectory: torch.Tensor, seed: int) -> None:
        self.path = None if folder is None else folder / self.FILE
        digest = hashlib.sha256(trajectory.detach().cpu().double().numpy().tobytes())
        digest.update(repr((dataclasses.replace(method, save_every=1), seed)).encode())  # what shapes the numbers
        self.key = digest.hexdigest()

    def restore(self, inputs, label_logits, lr, optimiser, lr_optimiser, draws, generator) -> tuple[int, list, float]:
        """Load a matching saved synthesis into the given tensors, optimisers and generators; (the next iteration,
        the losses, the seconds so far): (0, [], 0.0) when there is none."""
        if self.path is None or not self.path.exists():
            return 0, [], 0.0
        saved = torch.load(self.path, map_location=inputs.device, weights_only=True)
        if saved["key"] != self.key:
            return 0, [], 0.0
        with torch.no_grad():
            for tensor, name in ((inputs, "inputs"), (label_logits, "label_logits"), (lr, "lr")):
                tensor.copy_(saved[name])
        optimiser.load_state_dict(saved["optimiser"])
        if lr_optimiser is not None:
            lr_optimiser.load_state_dict(saved["lr_optimiser"])
        draws.bit_generator.state = saved["draws"]
        generator.set_state(saved["generator"])
        return saved["iteration"], saved["losses"], saved["seconds"]

    def save(self, iteration, inputs, label_logits, lr, optimiser, lr_optimiser, draws, generator, losses, seconds):
        if self.path is None:
            return
        payload = {
            "key": self.key, "iteration": iteration, "inputs": inputs.detach().cpu(),
            "label_logits": label_logits.detach().cpu(), "lr": lr.detach().cpu(), "optimiser": optimiser.state_dict(),
            "lr_optimiser": None if lr_optimiser is None else lr_optimiser.state_dict(),
            "draws": draws.bit_generator.state, "generator": generator.get_state(), "losses": losses,
            "seconds": seconds,
        }  # fmt: skip
        write_atomically(self.path, lambda tmp: torch.save(payload, tmp))


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
    depend on it)."""

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
        """Algorithm 1 on the recorded trajectory; keeps D_syn and α, drops the trajectory."""
        server, flat, device, dtype = s.state["server"], s.flat, s.x.device, s.x.dtype
        trajectory = server.pop("trajectory").to(device)
        n_classes, shape = s.data.n_classes, tuple(s.data.x.shape[1:])
        n = self.per_class * n_classes
        inputs = torch.randn((n, *shape), generator=s.generator, dtype=dtype).to(device).requires_grad_(True)
        label_logits = torch.zeros(n, n_classes, dtype=dtype, device=device, requires_grad=self.label_lr > 0)
        lr = torch.tensor(self.inner_lr, dtype=dtype, device=device, requires_grad=self.inner_lr_lr > 0)
        groups = [{"params": [inputs], "lr": self.data_lr}]
        groups += [{"params": [label_logits], "lr": self.label_lr}] if self.label_lr > 0 else []
        optimiser = torch.optim.Adam(groups)
        lr_optimiser = torch.optim.Adam([lr], lr=self.inner_lr_lr) if self.inner_lr_lr > 0 else None
        draws = np.random.default_rng(s.seed)
        augment = self.augmenter(s.generator, shape)
        flat.model.eval()
        progress = Progress(WORK_FOLDER.get(), self, trajectory, s.seed)
        first, losses, earlier = progress.restore(inputs, label_logits, lr, optimiser, lr_optimiser, draws, s.generator)
        start = time.perf_counter() - earlier
        for n_iter in range(first, self.iterations):
            t, middle = self.draw_segment(draws, len(trajectory))  # w^t, t+s within the trajectory (0-based)
            optimiser.zero_grad()
            if lr_optimiser is not None:
                lr_optimiser.zero_grad()
            loss = match_loss(
                flat.model, flat.named, trajectory, inputs, label_logits, lr, t, middle, self.inner_steps,
                self.distance, augment, self.class_mean,
            )  # fmt: skip
            loss.backward()
            optimiser.step()
            if lr_optimiser is not None:
                lr_optimiser.step()
                with torch.no_grad():
                    lr.clamp_(min=1e-8)
            if n_iter % self.log_every == 0 or n_iter == self.iterations - 1:
                losses.append([n_iter, float(loss.detach())])
            if (n_iter + 1) % self.save_every == 0 or n_iter + 1 == self.iterations:
                state = (inputs, label_logits, lr, optimiser, lr_optimiser, draws, s.generator)
                progress.save(n_iter + 1, *state, losses, time.perf_counter() - start)
        server["x_syn"] = inputs.detach()
        server["y_syn"] = label_logits.detach()
        server["alpha"] = lr.detach().clone()
        s.log["synthesis"] = {"seconds": time.perf_counter() - start, "loss": losses, "alpha": float(lr.detach())}

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
