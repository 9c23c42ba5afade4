"""Fedssyn's protocol (Algorithm I): per-client generators, synthetic data sent once, shuffled by the server.

Client i draws ρ·n_i of its samples (uniformly, without replacement), trains a class-conditional generator on
them for ``epochs`` epochs, generates ñ images whose class counts follow the subset's class frequencies
(largest-remainder rounding, so the counts sum to ñ exactly) and sends them once. The server pools the N sets,
permutes them and deals N equal parts D̃_si (:func:`fl.federation.assemble`, mode "shuffle"); client i trains on
D_i ∪ D̃_si, so p = ñ/(n_i + ñ). The "own" baseline keeps each client's own set (D_i ∪ D̃_i).

Synthetic sets are cached on disk under a key made of everything that determines them (dataset, the client's
sample indices, ρ, ñ, generator name and config, epochs, seed), with the generator's checkpoint of every epoch,
so re-running FL never retrains and "generator epochs" can be swept from the saved checkpoints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from theory.errors import InputError

GENERATORS = ("ddpm", "gan", "vae")


@dataclass(frozen=True)
class FedssynConfig:
    """generator: ddpm, gan, vae. rho: ρ, the fraction of a client's data its generator trains on (paper: 0.75).
    n_tilde: ñ, images each client generates (paper: 50000/N). epochs: generator training epochs.
    sample_steps: DDPM sampling steps (0: the full chain of T steps; fewer: strided DDIM).
    generator_config: overrides of the generator's own config dataclass (e.g. {"timesteps": 200})."""

    generator: str = "ddpm"
    rho: float = 0.75
    n_tilde: int = 500
    epochs: int = 5
    sample_steps: int = 50
    generator_config: dict = dataclasses.field(default_factory=dict)

    def check(self) -> FedssynConfig:
        if self.generator not in GENERATORS:
            raise InputError(f"config synthetic.generator: must be one of {', '.join(GENERATORS)}")
        if not 0 < self.rho <= 1:
            raise InputError("config synthetic.rho: must lie in (0, 1]")
        if self.n_tilde < 0:
            raise InputError("config synthetic.n_tilde: must be >= 0")
        if self.epochs < 1:
            raise InputError("config synthetic.epochs: must be >= 1")
        if self.sample_steps < 0:
            raise InputError("config synthetic.sample_steps: must be >= 0")
        return self


def build_generator(name: str, in_shape: tuple[int, ...], n_classes: int, overrides: dict):
    """The generator object for ``name`` with its config dataclass updated by ``overrides``."""
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
        raise InputError(f"config synthetic.generator_config: unknown {sorted(unknown)} for {name} ({sorted(known)})")
    config = config_cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()})
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


def cache_key(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def client_synthetic(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    config: FedssynConfig,
    seed: int,
    folder: Path,
    log: Callable[[str], None] = print,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Train one client's generator on a ρ-subset of (x, y) and generate ñ images, or read them from ``folder``.

    Returns (images uint8, labels, info) with info = {"seconds_train", "seconds_sample", "subset", "losses"}.
    """
    done = folder / "synthetic.npz"
    if done.exists():
        with np.load(done) as saved:
            info = json.loads((folder / "info.json").read_text())
            return saved["x"], saved["y"], {**info, "cached": True}
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    subset = np.sort(rng.choice(len(y), max(1, round(config.rho * len(y))), replace=False))
    xs, ys = x[subset], y[subset]
    torch_seed = int(rng.integers(2**62))
    generator = torch.Generator().manual_seed(torch_seed)

    def checkpoint(epoch: int, fitted) -> None:
        tmp = folder / f"generator_epoch{epoch}.pt.tmp"
        torch.save(fitted.state_dict(), tmp)
        os.replace(tmp, folder / f"generator_epoch{epoch}.pt")

    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):  # initial weights and dropout: seeded here, global state restored
        torch.manual_seed(torch_seed)
        model = build_generator(config.generator, x.shape[1:], n_classes, config.generator_config)
        losses = model.fit(xs, ys, config.epochs, generator, on_epoch=checkpoint)
    seconds_train = time.perf_counter() - start
    labels = np.repeat(np.arange(n_classes), class_counts(ys, config.n_tilde, n_classes))
    start = time.perf_counter()
    if config.generator == "ddpm" and config.sample_steps:
        images = model.sample(labels, generator, steps=config.sample_steps)
    else:
        images = model.sample(labels, generator)
    seconds_sample = time.perf_counter() - start
    info = {
        "seconds_train": seconds_train,
        "seconds_sample": seconds_sample,
        "subset": len(subset),
        "losses": losses,
        "class_counts_subset": np.bincount(ys, minlength=n_classes).tolist(),
        "class_counts_synthetic": np.bincount(labels, minlength=n_classes).tolist(),
    }
    (folder / "info.json").write_text(json.dumps(info))
    _save_npz(done, x=images, y=labels)
    log(
        f"  generator {folder.name}: {len(subset)} images, {seconds_train:.1f} s training, "
        f"{seconds_sample:.1f} s sampling"
    )
    return images, labels, {**info, "cached": False}


def synthesize(
    dataset_name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    originals: list[np.ndarray],
    n_classes: int,
    config: FedssynConfig,
    seed: int,
    cache_root: Path,
    log: Callable[[str], None] = print,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[dict]]:
    """Every client's synthetic set (cached): ``originals[i]`` are client i's D_i indices into ``x_train``."""
    config = config.check()
    sets, infos = [], []
    for i, index in enumerate(originals):
        key = cache_key(
            {
                "dataset": dataset_name,
                "index": hashlib.sha256(np.asarray(index, dtype=np.int64).tobytes()).hexdigest(),
                "config": dataclasses.asdict(config),
                "seed": seed,
                "client": i,
            }
        )
        x, y, info = client_synthetic(
            x_train[index],
            y_train[index],
            n_classes,
            config,
            seed * 1_000_003 + i,
            cache_root / f"client{i}-{key}",
            log,
        )
        sets.append((x, y))
        infos.append(info)
    return sets, infos
