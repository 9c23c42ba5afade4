"""Fedssyn's protocol (Algorithm I): per-client generators, synthetic data sent once, shuffled by the server.

Client i draws ρ·n_i of its samples (uniformly, without replacement), trains a class-conditional generator on
them for ``epochs`` epochs, generates ñ images whose class counts follow the subset's class frequencies
(largest-remainder rounding, so the counts sum to ñ exactly; uniform counts under DP, see :class:`FedssynConfig`)
and sends them once. The server pools the N sets, permutes them and deals N equal parts D̃_si
(:func:`fl.federation.assemble`, mode "shuffle"); client i trains on D_i ∪ D̃_si, so p = ñ/(n_i + ñ). The "own"
baseline keeps each client's own set (D_i ∪ D̃_i).

Generators and synthetic sets are cached on disk: client i's folder is keyed by everything that determines its
trained generator (dataset, the client's sample indices, ρ, generator name and config, epochs, DP settings, seed)
and holds the checkpoint of every epoch (with ``min_steps``, of its last only); the images drawn for each (ñ,
sample_epoch, sample_steps) sit beside them. Re-running FL never retrains, and ñ and "generator epochs" (Fig. 4a-b)
are swept by sampling only. The sets and the training info of a cache travel to another machine with ``python -m
fl.synthesis pack|unpack`` (:mod:`fl.synthesis.pack`: a GPU lease's DDPM sets reused on the CPU), found there by
the same keys.

The run-time method and its baselines (``method.name``: fedssyn, own, central-real, central-synthetic) are in
:mod:`fl.methods.fedssyn`; D_i alone is "none", the real-data shuffle at the same p is ``data.p``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from fl.atomic import locked
from fl.synthesis.generators.dp import ACCOUNTANTS, DPConfig, compute_epsilon
from fl.torchfiles import first_reason, load_safely
from theory.errors import InputError
from theory.output import npz_headers, read_object, refuse_link, replace_durably

GENERATORS = ("ddpm", "gan", "vae")
CACHED = "file of a generator cache (damaged: remove its client folder to make it again)"


class RealData(Protocol):
    """The real data a client's generator learns from (:class:`fl.data.Dataset` is one): ``name`` (part of every
    cache key), the training images and labels, and the number of classes."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    n_classes: int


@dataclass(frozen=True)
class FedssynConfig:
    """generator: ddpm, gan, vae. rho: ρ, the fraction of a client's data its generator trains on (paper: 0.75).
    n_tilde: ñ, images each client generates (paper: 50000/N). epochs: generator training epochs (a checkpoint
    is kept after each). sample_epoch: the checkpoint the images are drawn from (0: the last, ``epochs``), so
    "generator epochs" (Fig. 4b) is swept without retraining. min_steps: each client's generator trains at least
    this many optimiser steps: client i trains max(epochs, ⌈min_steps / ⌈ρ·n_i / B⌉⌉) epochs (0: ``epochs`` for
    every client; at 20 epochs the smallest clients' DDPMs took 80-100 steps and sampled noise); it
    samples from its own last epoch. train_together: train every client's DDPM in one computation
    (:func:`synthesize`: one vmapped step over the clients; equal to one by one to float rounding, so a cache
    key of its own; no dp, no dropout). sample_steps: DDPM sampling steps (0: the full chain
    of T steps; fewer: strided DDIM). generator_config: overrides of the generator's own config dataclass (e.g.
    {"timesteps": 200}). dp: train the generators with DP-SGD (revised paper Sec. 6), reporting ε (see
    :mod:`fl.synthesis.generators.dp`). dp_noise_multiplier: DP-SGD's noise multiplier σ. dp_max_grad_norm: the
    per-sample gradient clipping norm C. dp_delta: the δ of the (ε, δ) reported. dp_accountant: how ε is
    computed, "prv" (default: Opacus's PRV accountant, Gopi et al. 2021, which Opacus recommends; an upper bound
    on ε, 6-16% below RDP here, e.g. 1.398 against 1.569 at q = 0.1, 30 steps, σ = 1.906, δ = 1e-5) or "rdp"
    (the Rényi-DP accountant the paper's ε come from, kept for comparison). Like dp_delta it only changes the
    reported ε, so it is not part of the generator cache key (ε is recomputed from the counts, also for a
    cached generator).

    What ε covers under dp: the generator's weights, trained with DP-SGD, and hence the ñ synthetic images drawn
    from them. Everything else a client sends is independent of its private data (given n_i): the synthetic
    labels follow uniform class counts (not the subset's class frequencies), the GAN's generator is conditioned
    on uniformly drawn labels in fixed-size batches, the β-VAE samples from the prior. ρ·n_i is public, as the
    accountant's q = B/(ρ·n_i) assumes. The per-epoch losses and ``class_counts_subset`` in a generator's cache
    folder and in the run summary are diagnostics computed from the private data, not covered by ε (they are
    not what Fedssyn sends); an empty Poisson batch (probability about e^{-B} per step) is a further, negligible
    exception (:mod:`fl.synthesis.generators.dp`)."""

    generator: str = "ddpm"
    rho: float = 0.75
    n_tilde: int = 500
    epochs: int = 5
    min_steps: int = 0
    train_together: bool = False
    sample_epoch: int = 0
    sample_steps: int = 50
    generator_config: dict = dataclasses.field(default_factory=dict)
    dp: bool = False
    dp_noise_multiplier: float = 1.906
    dp_max_grad_norm: float = 1.0
    dp_delta: float = 1e-5
    dp_accountant: str = ACCOUNTANTS[0]

    def check(self) -> FedssynConfig:
        if self.generator not in GENERATORS:
            raise InputError(f"config method.generator: must be one of {', '.join(GENERATORS)}")
        if not 0 < self.rho <= 1:
            raise InputError("config method.rho: must lie in (0, 1]")
        if self.n_tilde < 1:  # ñ = 0 sends nothing: D_i alone, which is method.name = "none" without the generators
            raise InputError('config method.n_tilde: must be >= 1 (for D_i alone use method.name = "none")')
        if self.epochs < 1:
            raise InputError("config method.epochs: must be >= 1")
        if not 0 <= self.sample_epoch <= self.epochs:
            raise InputError("config method.sample_epoch: must lie in [0, epochs] (0: the last epoch)")
        if self.min_steps < 0:
            raise InputError("config method.min_steps: must be >= 0 (0: every client trains `epochs` epochs)")
        if self.min_steps and (self.sample_epoch or self.dp):
            raise InputError(
                "config method.min_steps: each client then trains its own number of epochs, so it samples from its "
                "last (sample_epoch = 0) and takes no dp (ε counts `epochs`)"
            )
        if self.train_together and (self.generator != "ddpm" or self.dp):
            raise InputError("config method.train_together: trains DDPMs without dp (generator = 'ddpm', dp = false)")
        if self.sample_steps < 0:
            raise InputError("config method.sample_steps: must be >= 0")
        if self.dp_accountant not in ACCOUNTANTS:
            raise InputError(f"config method.dp_accountant: must be one of {', '.join(ACCOUNTANTS)}")
        if self.dp:
            self.privacy()
        return self

    def privacy(self) -> DPConfig | None:
        """The DP-SGD settings, or None without dp."""
        if not self.dp:
            return None
        try:
            return DPConfig(self.dp_noise_multiplier, self.dp_max_grad_norm, self.dp_delta, self.dp_accountant)
        except InputError as error:
            raise InputError(f"config method.dp_*: {error}") from None

    def training_key(self) -> dict:
        """What determines a trained generator (not ñ nor how it is sampled; not dp_delta nor dp_accountant,
        which only change the reported ε). A DP GAN's key also names its fake labels ("uniform"): DP GANs
        trained before they stopped following the private batch's labels are not reused."""
        keys = ("generator", "rho", "epochs", "generator_config")
        dp_keys = ("dp", "dp_noise_multiplier", "dp_max_grad_norm") if self.dp else ()
        key = {k: getattr(self, k) for k in keys + dp_keys} | ({"min_steps": self.min_steps} if self.min_steps else {})
        key |= {"train_together": True} if self.train_together else {}  # equal to one by one to rounding only
        return key | ({"gan_fake_labels": "uniform"} if self.dp and self.generator == "gan" else {})

    def sampling_key(self) -> dict:
        """What determines a generator's synthetic set besides its weights and the seed. Under dp, the label rule
        ("uniform" counts) is part of it, so synthetic sets cached before that rule are not reused."""
        key = {"n_tilde": self.n_tilde, "sample_epoch": self.last_epoch(), "sample_steps": self.sample_steps}
        return key | ({"labels": "uniform"} if self.dp else {})

    def last_epoch(self) -> int:
        return self.sample_epoch or self.epochs

    def client_epochs(self, subset: int, batch_size: int) -> int:
        """The epochs a client's generator trains on a ρ-subset of ``subset`` images in batches of ``batch_size``:
        ``epochs``, or more until it has taken ``min_steps`` steps."""
        if not self.min_steps:
            return self.epochs
        return max(self.epochs, math.ceil(self.min_steps / math.ceil(subset / batch_size)))


def build_generator(name: str, in_shape: tuple[int, ...], n_classes: int, overrides: dict, device: str = "cpu"):
    """The generator object for ``name`` with its config dataclass updated by ``overrides``; the DDPM trains and
    samples on ``device`` (the GAN and the β-VAE on the CPU: they are small)."""
    if name == "ddpm":
        from fl.synthesis.generators.ddpm import DDPM as cls
        from fl.synthesis.generators.ddpm import DDPMConfig as config_cls
    elif name == "gan":
        from fl.synthesis.generators.gan import CGAN as cls
        from fl.synthesis.generators.gan import CGANConfig as config_cls
    elif name == "vae":
        from fl.synthesis.generators.vae import BetaVAE as cls
        from fl.synthesis.generators.vae import BetaVAEConfig as config_cls
    else:
        raise InputError(f"unknown generator {name!r}; known: {', '.join(GENERATORS)}")
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = set(overrides) - known
    if unknown:
        raise InputError(f"config method.generator_config: unknown {sorted(unknown)} for {name} ({sorted(known)})")
    config = config_cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()})
    if name == "ddpm":
        return cls(tuple(in_shape), n_classes, config, device)
    return cls(tuple(in_shape), n_classes, config)


def class_counts(labels: np.ndarray, n_tilde: int, n_classes: int) -> np.ndarray:
    """ñ split over classes in proportion to ``labels``' class frequencies, summing to ñ exactly.

    >>> class_counts(np.array([0, 0, 0, 1]), 10, 3).tolist()
    [8, 2, 0]
    """
    freq = np.bincount(labels, minlength=n_classes) / max(len(labels), 1)
    exact = freq * n_tilde
    counts = np.floor(exact).astype(np.int64)
    remainder = n_tilde - counts.sum()
    if remainder > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:remainder]] += 1
    return counts


def synthetic_labels(config: FedssynConfig, class_counts_subset: list[int], n_classes: int) -> np.ndarray:
    """The ñ labels a client generates, sorted: class counts in proportion to its subset's class counts
    (:func:`class_counts`), or under ``config.dp`` uniform over the classes, so that the released labels do not
    depend on the private data (the subset's counts are not covered by ε).

    >>> synthetic_labels(FedssynConfig(n_tilde=5), [3, 1, 0], 3).tolist()
    [0, 0, 0, 0, 1]
    >>> synthetic_labels(FedssynConfig(n_tilde=5, dp=True), [3, 1, 0], 3).tolist()
    [0, 0, 1, 1, 2]
    """
    if config.dp:
        counts = class_counts(np.arange(n_classes), config.n_tilde, n_classes)
    else:
        counts = class_counts(np.repeat(np.arange(n_classes), class_counts_subset), config.n_tilde, n_classes)
    return np.repeat(np.arange(n_classes), counts)


def cache_key(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


KEY_FILE = "key.json"  # in a client's folder: what its name's key hashes, and the key of every synthetic set
PACKED_FILE = "packed.json"  # in a folder unpacked without its generator's weights (fl.synthesis.pack)


def client_key(dataset_name: str, index: np.ndarray, config: FedssynConfig, seed: int, i: int) -> dict:
    """What determines client i's trained generator, hashed into its folder's name (:func:`client_folder`): the
    dataset, D_i (a hash of its sample indices), the training settings, the run seed and i."""
    return {
        "dataset": dataset_name,
        "index": hashlib.sha256(np.asarray(index, dtype=np.int64).tobytes()).hexdigest(),
        "config": config.training_key(),
        "seed": seed,
        "client": i,
    }


def client_folder(cache_root: Path, key: dict) -> Path:
    """``cache_root/client{i}-{hash of key}``; a symbolic link there (to a folder or dangling) is refused in one line,
    so no generator's checkpoint or sample is ever written through it. ``cache_root`` itself (``method.cache_dir``,
    a run store's ``_synthetic``) may be a link its user made (to a bigger disk): the folders in it are the
    package's."""
    return refuse_link(cache_root / f"client{key['client']}-{cache_key(key)}", "a generator's cache folder")


def client_seed(seed: int, i: int) -> int:
    """The seed of client i's generator (its ρ-subset, initial weights and samples) in a run of seed ``seed``."""
    return seed * 1_000_003 + i


def set_files(folder: Path, config: FedssynConfig, seed: int) -> tuple[dict, Path, Path]:
    """(key, images file, info file) of the synthetic set that ``config`` samples in a generator folder (``seed``:
    the client's, :func:`client_seed`)."""
    set_key = {**config.sampling_key(), "seed": seed}
    name = f"synthetic-{cache_key(set_key)}"
    return set_key, folder / f"{name}.npz", folder / f"{name}.json"


def set_path(dataset_name: str, index: np.ndarray, config: FedssynConfig, seed: int, i: int, cache_root: Path) -> Path:
    """The images file of client i's synthetic set in ``cache_root`` (there or not): the set a run of seed ``seed``
    with ``config`` deals for client i, whose D_i is ``index``."""
    config = config.check()
    folder = client_folder(cache_root, client_key(dataset_name, index, config, seed, i))
    return set_files(folder, config, client_seed(seed, i))[1]


def set_cached(
    dataset_name: str, index: np.ndarray, config: FedssynConfig, seed: int, i: int, cache_root: Path
) -> bool:
    """Whether client i's synthetic set (and its generator's training info) is in ``cache_root``: then
    :func:`synthesize_client` trains and samples nothing, as with a set unpacked from a GPU lease."""
    images = set_path(dataset_name, index, config, seed, i, cache_root)
    info = images.with_suffix(".json")
    return (images.parent / "generator.json").exists() and images.exists() and info.exists()


def _record_keys(folder: Path, generator_key: dict | None = None, set_name: str = "", set_key: dict | None = None):
    """Add to ``folder/key.json``: the generator's key, or the key of one synthetic set (by its file name)."""
    path = folder / KEY_FILE
    keys = read_object(path, CACHED) if path.exists() else {"generator": None, "sets": {}}
    if generator_key is not None:
        keys["generator"] = json.loads(json.dumps(generator_key, default=str))
    if set_key is not None:
        keys["sets"][set_name] = json.loads(json.dumps(set_key, default=str))
    _write_json(path, keys)


def train_generator(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    config: FedssynConfig,
    seed: int,
    folder: Path,
    log: Callable[[str], None] = print,
    device: str = "cpu",
) -> dict:
    """Train one client's generator on a ρ-subset of (x, y), keeping a checkpoint ``generator_epoch{k}.pt`` after
    every epoch and ``generator.json`` (subset size and class counts, per-epoch losses, seconds, and under DP the
    ε after each epoch) when done; a finished folder is read back, not retrained. An interrupted DDPM's training
    (without DP) resumes from ``resume.pt`` (:class:`_Training`): bit for bit as if it had not stopped. Any other
    resumes from its last epoch checkpoint with fresh optimiser moments and draws. Either way the losses of the
    epochs before the interruption are not kept, and ε counts every epoch."""
    done = folder / "generator.json"
    if done.exists():
        return _with_epsilon({**read_object(done, CACHED), "cached": True}, config)
    job = _Training(x, y, n_classes, config, seed, folder, log, device)
    with torch.random.fork_rng(devices=[]):  # dropout: drawn on from the model's seeding, global state restored
        torch.set_rng_state(job.rng_state)
        losses = job.model.fit(
            job.xs, job.ys, job.epochs - job.resumed, job.generator, on_epoch=job.checkpoint, privacy=config.privacy()
        )
    return _with_epsilon({**job.finish(losses), "cached": False}, config)


class _Training:
    """One client's generator about to train (:func:`train_generator`): its ρ-subset, its model (built from its
    seed, or restored from its last epoch checkpoint), batch-order generator, epochs, and the per-epoch checkpoint.

    A DDPM trained without DP also keeps ``resume.pt`` after each epoch: its weights, EMA, counters and AdamW
    moments (:meth:`DDPM.state_dict(with_optimizer=True) <fl.synthesis.generators.ddpm.DDPM.state_dict>`), the
    state of its batch-order and noise generator and of torch's global generator (dropout), and the epochs and
    seconds so far. A training that finds it resumes exactly there. It is written after the epoch's checkpoint and
    before ``progress.json``, and removed when the training is done."""

    RESUME = "resume.pt"

    def __init__(self, x, y, n_classes: int, config: FedssynConfig, seed: int, folder: Path, log, device: str):
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        subset = np.sort(rng.choice(len(y), max(1, round(config.rho * len(y))), replace=False))
        self.xs, self.ys, self.folder, self.log, self.n_classes = x[subset], y[subset], folder, log, n_classes
        self.torch_seed = int(rng.integers(2**62))
        self.progress_path = folder / "progress.json"
        progress = (
            read_object(self.progress_path, CACHED) if self.progress_path.exists() else {"epochs": 0, "seconds": 0.0}
        )
        self.resumed = progress["epochs"]
        self.start = time.perf_counter() - progress["seconds"]
        with torch.random.fork_rng(devices=[]):  # initial weights: seeded here, global state restored
            torch.manual_seed(self.torch_seed + self.resumed)
            self.model = build_generator(config.generator, x.shape[1:], n_classes, config.generator_config, device)
            self.rng_state = torch.get_rng_state()  # where the fit's own global draws (dropout) go on from
        self.generator = torch.Generator().manual_seed(self.torch_seed + self.resumed)
        self.exact = getattr(self.model, "resumable", False) and not config.dp  # whose state resume.pt holds
        saved = self.saved_state(folder) if self.exact else None
        if saved is not None:
            self.model.load_state_dict(saved)
            self.generator.set_state(saved["generator_state"])
            self.rng_state = saved["rng_state"]
            self.resumed = saved["epochs"]
            self.start = time.perf_counter() - saved["seconds"]
            log(f"  generator {folder.name}: resuming after epoch {self.resumed} (its optimiser and draws as saved)")
        elif self.resumed:
            load_weights(self.model, folder / f"generator_epoch{self.resumed}.pt", config.generator, device)
            log(f"  generator {folder.name}: resuming after epoch {self.resumed} (fresh optimiser moments and draws)")
        self.epochs = config.client_epochs(len(subset), self.model.config.batch_size)
        self.last_only = bool(config.min_steps)  # it samples from its last epoch alone: the others are not kept

    def saved_state(self, folder: Path) -> dict | None:
        """``resume.pt``'s state where it is there, on the CPU (the RNG states must be there; the weights and moments
        are copied onto the model's device as they load); a file that does not load, or whose weights or moments
        are not finite (:func:`refuse_non_finite`), is one line naming it."""
        path = folder / self.RESUME
        if not path.exists():
            return None
        state = load_safely(path, "saved generator training", f"delete {path} to resume from the last epoch", "cpu")
        wanted = {"generator_state", "rng_state", "epochs", "seconds", "optimizer"}
        if not isinstance(state, dict) or not wanted <= set(state):
            raise InputError(f"{path}: not a saved generator training; delete it to resume from the last epoch")
        refuse_non_finite(state, path, f"delete {path} to resume from the last epoch")
        return state

    def checkpoint(self, epoch: int, fitted) -> None:
        """Epoch ``epoch``'s weights and the progress that points at them; with ``min_steps`` (only the last epoch
        is ever sampled; a small client trains hundreds of epochs) the epoch before's checkpoint is then removed."""
        replace_durably(self.folder / f"generator_epoch{epoch}.pt", lambda tmp: torch.save(fitted.state_dict(), tmp))
        seconds = time.perf_counter() - self.start
        if self.exact:
            state = fitted.state_dict(with_optimizer=True) | {"generator_state": self.generator.get_state(),
                     "rng_state": torch.get_rng_state(), "epochs": epoch, "seconds": seconds}  # fmt: skip
            replace_durably(self.folder / self.RESUME, lambda tmp: torch.save(state, tmp))
        _write_json(self.progress_path, {"epochs": epoch, "seconds": seconds})
        if self.last_only:  # the epochs before, written here (more than one where a stop came between two writes)
            for k in range(max(1, epoch - 2), epoch):
                (self.folder / f"generator_epoch{k}.pt").unlink(missing_ok=True)

    def finish(self, losses: list[dict], **more) -> dict:
        """``generator.json``: the training's record (``more`` added), written once it is done."""
        info = {
            "seconds_train": time.perf_counter() - self.start,
            "subset": len(self.ys),
            "losses": [{}] * self.resumed + [{k: v for k, v in r.items() if k != "epsilon"} for r in losses],
            "class_counts_subset": np.bincount(self.ys, minlength=self.n_classes).tolist(),
            "parameters": sum(v.numel() for v in _tensors(self.model.state_dict())),
            "batch_size": self.model.config.batch_size,
            "epochs": self.epochs,
        } | more
        _write_json(self.folder / "generator.json", info)
        (self.folder / self.RESUME).unlink(missing_ok=True)  # written here: the training is done
        self.log(f"  generator {self.folder.name}: {len(self.ys)} images, {info['seconds_train']:.1f} s training")
        return info


@contextlib.contextmanager
def client_cache(dataset_name: str, index: np.ndarray, config: FedssynConfig, seed: int, i: int, cache_root: Path):
    """Client i's cache folder (:func:`client_key`), locked while inside (runs in parallel, ``python -m figures
    --jobs``, may need the same generator), its generator key recorded in ``key.json``."""
    key = client_key(dataset_name, index, config, seed, i)
    folder = client_folder(cache_root, key)
    with locked(folder / ".lock"):
        if not (folder / KEY_FILE).exists():
            _record_keys(folder, generator_key=key)
        yield folder


def _train_together(
    data: RealData, originals, config: FedssynConfig, seed: int, cache_root: Path, log: Callable[[str], None],
    device: str,
) -> None:  # fmt: skip
    """Every client's DDPM that is neither trained nor started, in one computation
    (:func:`fl.synthesis.generators.ddpm_together.fit_together`; ``method.train_together``), each folder left as
    :func:`train_generator` leaves it (checkpoints, ``generator.json`` with ``trained_together``: how many). A
    started one resumes alone in :func:`synthesize_client`."""
    from fl.synthesis.generators.ddpm_together import fit_together

    with contextlib.ExitStack() as stack:
        jobs = []
        for i, index in enumerate(originals):
            folder = stack.enter_context(client_cache(data.name, index, config, seed, i, cache_root))
            if not (folder / "generator.json").exists() and not (folder / "progress.json").exists():
                x, y = data.x_train[index], data.y_train[index]
                jobs.append(_Training(x, y, data.n_classes, config, client_seed(seed, i), folder, log, device))
        if not jobs:
            return
        log(f"  {len(jobs)} generators trained together")
        histories = fit_together([j.model for j in jobs], [(j.xs, j.ys) for j in jobs], [j.epochs for j in jobs],
                                 [j.generator for j in jobs], [j.checkpoint for j in jobs])  # fmt: skip
        for job, losses in zip(jobs, histories):
            job.finish(losses, trained_together=len(jobs))


def _with_epsilon(info: dict, config: FedssynConfig) -> dict:
    """Under DP, add ε after each epoch for the configured δ and accountant (recomputed: neither is part of the
    cache key)."""
    privacy = config.privacy()
    if privacy is None:
        return info
    epochs = range(1, config.epochs + 1)
    epsilon = [epsilon_spent(privacy, info["subset"], info["batch_size"], e) for e in epochs]
    return {**info, "epsilon": epsilon, "dp_delta": privacy.delta, "dp_accountant": privacy.accountant}


def sample_generator(
    folder: Path,
    in_shape: tuple[int, ...],
    n_classes: int,
    config: FedssynConfig,
    class_counts_subset: list[int],
    seed: int,
    log: Callable[[str], None] = print,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray, dict]:
    """ñ images from the checkpoint of epoch ``config.last_epoch()`` in ``folder``, of the labels
    :func:`synthetic_labels` gives (class counts matching the subset's frequencies; uniform under DP); cached as
    ``synthetic-{key}.npz`` next to the checkpoints."""
    set_key, path, meta = set_files(folder, config, seed)
    if path.exists() and meta.exists():
        keys = folder / KEY_FILE
        if not keys.exists() or path.name not in read_object(keys, CACHED).get("sets", {}):  # sampled before key.json
            _record_keys(folder, set_name=path.name, set_key=set_key)
        x, y = read_set(path, in_shape, n_classes, config.n_tilde)
        try:
            info = read_object(meta, CACHED)
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise InputError(f"{meta}: damaged synthetic set info (not a JSON object); delete it and {path.name}")
        return x, y, {**info, "cached": True}
    epoch = config.last_epoch()
    if config.min_steps:  # this client's own last epoch (fl.synthesis.fedssyn.FedssynConfig.client_epochs)
        epoch = int(read_object(folder / "generator.json", CACHED).get("epochs", 0))
    weights = folder / f"generator_epoch{epoch}.pt"
    if not weights.exists() and (folder / PACKED_FILE).exists():
        held = read_object(folder / KEY_FILE, CACHED).get("sets", {}) if (folder / KEY_FILE).exists() else {}
        raise InputError(
            f"generator folder {folder} was unpacked (python -m fl.synthesis unpack) without its weights and holds "
            f"synthetic sets for {sorted(map(_describe_set, held.values())) or 'nothing'} only, not for "
            f"{_describe_set(set_key)}: run with one of those, or delete the folder to train the generator here"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_generator(config.generator, in_shape, n_classes, config.generator_config, device)
    load_weights(model, weights, config.generator, device)
    labels = synthetic_labels(config, class_counts_subset, n_classes)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    if config.generator == "ddpm" and config.sample_steps:
        images = model.sample(labels, generator, steps=config.sample_steps)
    else:
        images = model.sample(labels, generator)
    info = {
        "seconds_sample": time.perf_counter() - start,
        "sample_epoch": epoch,
        "class_counts_synthetic": np.bincount(labels, minlength=n_classes).tolist(),
    }
    replace_durably(path, lambda tmp: np.savez_compressed(tmp, x=images, y=labels), ".tmp.npz")
    _record_keys(folder, set_name=path.name, set_key=set_key)
    _write_json(meta, info)
    log(f"  sampled {len(labels)} images from {folder.name} epoch {epoch} in {info['seconds_sample']:.1f} s")
    return images, labels, {**info, "cached": False}


def non_finite(state: object, at: str = "") -> str | None:
    """Where (a key path, e.g. "model.conv.weight") the first floating-point tensor of a loaded state (nested dicts
    and lists: weights, EMA, optimiser moments) holding NaN or ±inf is; None where every one is finite."""
    if isinstance(state, torch.Tensor):
        floating = state.is_floating_point() or state.is_complex()
        return at or "a tensor" if floating and not bool(torch.isfinite(state).all()) else None
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, list | tuple):
        items = enumerate(state)
    else:
        return None
    for key, value in items:
        found = non_finite(value, f"{at}.{key}" if at else str(key))
        if found is not None:
            return found
    return None


def refuse_non_finite(state: object, path: Path, fix: str) -> None:
    """InputError (one line naming ``path``) when a loaded generator state holds a value that is not finite: a
    generator of NaN weights draws black images, which a quality report would take for 0% noise."""
    where = non_finite(state)
    if where is not None:
        raise InputError(f"{path}: its weights hold values that are not finite (NaN or inf, in {where}); {fix}")


def load_weights(model, path: Path, generator: str, device: str) -> None:
    """Load generator checkpoint ``path`` into ``model`` with ``torch.load(weights_only=True)``; a file that load
    refuses (a crafted pickle, a torn or foreign file), one whose weights are not finite (:func:`refuse_non_finite`)
    or whose tensors do not fit the model is one line naming it."""
    fix = f"delete {path.parent} to train the generator again"
    state = load_safely(path, "generator checkpoint", fix, device)
    refuse_non_finite(state, path, fix)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, KeyError, AttributeError) as error:
        raise InputError(
            f"{path}: its weights do not fit the {generator} of this config ({first_reason(error)}); {fix}"
        ) from None


def read_set(path: Path, in_shape: tuple[int, ...], n_classes: int, n_tilde: int) -> tuple[np.ndarray, np.ndarray]:
    """A cached synthetic set (x, y) as :func:`sample_generator` writes it: ñ uint8 images of ``in_shape`` and ñ
    integer labels in [0, n_classes). Each array's npy header is read and checked first
    (:func:`theory.output.npz_headers`, the bound :func:`fl.data.formats.npz_arrays` puts on a run's data): a plain
    dtype, the bytes the member holds, and the dtype and shape expected here, so a header claiming 73 GiB is refused
    before anything is allocated. Anything else (a torn file, an object array, another shape, a label out of range)
    is one line naming the file, not a failure deep inside training."""
    expected = (n_tilde, *in_shape)
    try:
        headers = npz_headers(path)  # every array's header, bounded, before a byte of data is read
    except InputError as error:
        why = str(error).removeprefix(f"{path}: ")
    else:
        missing = [name for name in ("x", "y") if name not in headers]
        (x_shape, x_dtype), (y_shape, y_dtype) = (headers.get(n, ((), np.dtype("V1"))) for n in ("x", "y"))
        if missing:
            why = f"KeyError: no array {missing[0]!r} (holds {', '.join(sorted(headers)) or 'none'})"
        elif x_dtype != np.uint8 or x_shape != expected:
            why = f"images of {x_dtype} {x_shape}, expected uint8 {expected}"
        elif y_dtype.kind not in "iu" or y_shape != (n_tilde,):
            why = f"labels of {y_dtype} {y_shape}, expected {n_tilde} whole numbers"
        else:
            try:
                with np.load(path) as saved:  # allow_pickle=False: an object array is refused, never unpickled
                    x, y = saved["x"], saved["y"]
            except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
                why = f"{type(error).__name__}: {first_reason(error)}"
            else:
                if y.size and (y.min() < 0 or y.max() >= n_classes):
                    why = f"labels from {y.min()} to {y.max()}, expected 0 to {n_classes - 1}"
                else:
                    return x, y.astype(np.int64, copy=False)
    raise InputError(
        f"{path}: damaged synthetic set ({why}); delete it and {path.with_suffix('.json').name} to sample it again"
    )


def _describe_set(key: dict) -> str:
    return ", ".join(f"{k}={key[k]}" for k in sorted(key))


def epsilon_spent(privacy: DPConfig, n: int, batch_size: int, epochs: int) -> float:
    """ε of DP-SGD after ``epochs`` epochs of ⌈n/B⌉ Poisson steps at rate q = min(B, n)/n (the accountant and δ of
    ``privacy``): what :class:`~fl.synthesis.generators.dp.PrivateTraining` reports, recomputed from the counts."""
    b = min(batch_size, n)
    steps = epochs * math.ceil(n / b)
    return compute_epsilon(privacy.accountant, privacy.noise_multiplier, b / n, steps, privacy.delta)


def _tensors(state: dict) -> list[torch.Tensor]:
    out = []
    for value in state.values():
        if isinstance(value, torch.Tensor) and value.ndim:
            out.append(value)
        elif isinstance(value, dict):
            out.extend(_tensors(value))
    return out


def _write_json(path: Path, payload: dict) -> None:
    replace_durably(path, lambda tmp: tmp.write_text(json.dumps(payload)))


def synthesize_client(
    data: RealData,
    index: np.ndarray,
    i: int,
    config: FedssynConfig,
    seed: int,
    cache_root: Path,
    log: Callable[[str], None] = print,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Client i's synthetic set (cached), from its own D_i alone (``index``: its indices into ``data.x_train``), and
    its training and sampling info: what client i computes and sends once.

    Client i's generator lives in ``cache_root/client{i}-{key}`` with key = hash of the dataset, D_i, the
    training settings (:meth:`FedssynConfig.training_key`), seed and i (:func:`client_key`, written out in the
    folder's ``key.json`` with the key of each synthetic set); its samples for each (ñ, sample_epoch,
    sample_steps) sit beside its checkpoints. A folder unpacked from a pack (:mod:`fl.synthesis.pack`) holds the
    sets and the training info without the weights: found by the same key, it trains nothing."""
    config = config.check()
    seed_i = client_seed(seed, i)
    with client_cache(data.name, index, config, seed, i, cache_root) as folder:
        x_i, y_i = data.x_train[index], data.y_train[index]
        trained = train_generator(x_i, y_i, data.n_classes, config, seed_i, folder, log, device)
        x, y, sampled = sample_generator(
            folder, data.x_train.shape[1:], data.n_classes, config, trained["class_counts_subset"], seed_i, log, device
        )
    return x, y, {**trained, **sampled, "cached": trained["cached"] and sampled["cached"]}


def synthesize(
    data: RealData,
    originals: list[np.ndarray],
    config: FedssynConfig,
    seed: int,
    cache_root: Path,
    log: Callable[[str], None] = print,
    device: str = "cpu",
    sample: bool = True,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[dict]]:
    """Every client's synthetic set (:func:`synthesize_client`; ``originals[i]`` are client i's D_i indices into
    ``data.x_train``): the sets and per client the training and sampling info. With ``config.train_together`` the
    clients' DDPMs first train in one computation (:func:`_train_together`). ``sample`` False: only that training
    (no sets: ([], []))."""
    sets, infos = [], []
    if config.check().train_together:
        _train_together(data, originals, config, seed, cache_root, log, device)
    if not sample:
        return sets, infos
    for i, index in enumerate(tqdm(originals, desc="generators", unit="client", leave=False, disable=None)):
        x, y, info = synthesize_client(data, index, i, config, seed, cache_root, log, device)
        sets.append((x, y))
        infos.append(info)
    return sets, infos
