"""Fedssyn (fedssyn_neurips.txt Algorithm I) and its baselines as methods: one hook, :meth:`prepare`.

Before training, every client trains a class-conditional generator on ρ·n_i of its samples and sends ñ synthetic
images once (:func:`fl.synthesis.fedssyn.synthesize`: generators, DP-SGD, on-disk cache). Then:

- ``fedssyn``: the server pools the N sets, permutes them and deals N equal parts D̃_si; client i trains on
  D_i ∪ D̃_si, so each client's distribution becomes (1-p)D_i + p·D̃ with p = ñ/(n_i + ñ) (Sec. 2.3, eq. D.2);
- ``own``: client i trains on D_i ∪ D̃_i, its own synthetic set (Fig. 3's "D_i ∪ D̃_i");
- ``central-synthetic``: one model trained on the union of the synthetic sets only (Fig. 3);
- ``central-real``: one model trained on the union of the D_i (Fig. 3; no generators).

A centralised run has one client holding the union; a round is then ``local_epochs`` epochs of SGD over it. The
real-data shuffle (the theory's oracle) is no method: ``data.p`` with ``method.name = "none"``.
After :meth:`prepare` these methods use no hook: local steps are plain cross-entropy on the dealt training sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from fl.methods.base import Method, Setup, Split
from fl.synthesis.fedssyn import FedssynConfig, set_cached, set_path, synthesize, synthesize_client
from theory.errors import InputError


def _no_real_shuffle(setup: Setup) -> None:
    if setup.p > 0:
        raise InputError("config data.p: real-data shuffling and synthetic data are separate runs; set p = 0")


def centralise(split: Split, keep_real: bool) -> Split:
    """One client holding the union of the clients' D_i (or none of them) and of their synthetic sets."""
    everything = np.concatenate(split.original)
    real = everything if keep_real else np.zeros(0, np.int64)
    synthetic = split.synthetic
    if synthetic:
        synthetic = [(np.concatenate([s[0] for s in synthetic]), np.concatenate([s[1] for s in synthetic]))]
    return Split([real], [np.concatenate(split.val)], [everything], synthetic, "own")


@dataclass(frozen=True)
class Fedssyn(FedssynConfig, Method):
    """The keys of :class:`fl.synthesis.fedssyn.FedssynConfig` (generator, rho ρ, n_tilde ñ, epochs, min_steps,
    train_together, sample_epoch, sample_steps, generator_config, dp, dp_noise_multiplier, dp_max_grad_norm, dp_delta,
    dp_accountant), plus cache_dir: where generator checkpoints and synthetic sets are kept (shared by every run)."""

    name: ClassVar[str] = "fedssyn"
    mode: ClassVar[str] = "shuffle"
    cache_dir: str = "results/synthetic"

    def protocol(self) -> FedssynConfig:
        """The protocol's settings alone (what keys the generator cache)."""
        return FedssynConfig(**{k: getattr(self, k) for k in FedssynConfig.__dataclass_fields__})

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        _no_real_shuffle(setup)
        print(f"synthetic data: {self.generator} per client (cache {self.cache_dir})")
        self.train_all(setup, split)
        return super().prepare(setup, split)

    def train_all(self, setup: Setup, split: Split) -> None:
        """With ``train_together``: every client's DDPM not yet trained, in one computation
        (:func:`~fl.synthesis.fedssyn.synthesize` without sampling), before each client samples its set."""
        if self.train_together:
            data = setup.dataset
            synthesize(data, split.original, self.protocol(), setup.seed, Path(self.cache_dir), device=setup.device,
                       sample=False)  # fmt: skip

    def prepare_client(self, setup: Setup, split: Split, i: int) -> dict:
        """Client i trains its generator on ρ·n_i of its D_i and samples the ñ images it sends once."""
        data = setup.dataset
        x, y, info = synthesize_client(
            data, split.original[i], i, self.protocol(), setup.seed, Path(self.cache_dir), device=setup.device
        )
        return {"x": x, "y": y, "info": info}

    def set_paths(self, setup: Setup, split: Split) -> list[Path]:
        """Client by client, the file in ``cache_dir`` of the synthetic set this method makes for it (there or
        not; :func:`~fl.synthesis.fedssyn.set_path`): what ``python -m fl.quality --run`` measures."""
        data, protocol, cache = setup.dataset, self.protocol(), Path(self.cache_dir)
        return [set_path(data.name, index, protocol, setup.seed, i, cache) for i, index in enumerate(split.original)]

    def missing(self, setup: Setup, split: Split) -> list[int]:
        """The clients whose synthetic set is not in ``cache_dir`` (:func:`~fl.synthesis.fedssyn.set_cached`)."""
        data, protocol, cache = setup.dataset, self.protocol(), Path(self.cache_dir)
        return [i for i, index in enumerate(split.original)
                if not set_cached(data.name, index, protocol, setup.seed, i, cache)]  # fmt: skip

    def prepare_server(self, setup: Setup, split: Split, sent: list, seconds: float) -> tuple[Split, dict]:
        """The server pools the N sets and deals them (:meth:`deal`; the dealing itself is
        :func:`fl.federation.assemble`'s, mode ``self.mode``)."""
        _no_real_shuffle(setup)
        sets = [(s["x"], s["y"]) for s in sent]
        numbers = float(np.mean([s[0].size for s in sets])) if sets else 0.0
        info = {"generators": [s["info"] for s in sent], "seconds_synthetic": seconds, "numbers_per_client": numbers}
        return self.deal(Split(split.train, split.val, split.original, sets, self.mode)), info

    def deal(self, split: Split) -> Split:
        return split

    def report(self, info: dict, state: dict) -> dict:
        """Generator training/sampling time, the generators' size against the data they send (the revised paper's
        comparison), and under DP the largest ε over the clients at the sampled epoch, its δ and the accountant
        that computed it."""
        infos = info.get("generators")
        if not infos:
            return {}
        epoch = self.last_epoch()
        out = {
            "seconds_synthetic": info["seconds_synthetic"],
            "seconds_generator_training": sum(i["seconds_train"] for i in infos),
            "seconds_generator_sampling": sum(i["seconds_sample"] for i in infos),
            "generator_parameters_per_client": float(np.mean([i.get("parameters", 0) for i in infos])),
            "synthetic_numbers_per_client": info["numbers_per_client"],
            "synthetic": [
                {k: v for k, v in i.items() if k not in ("losses", "epsilon")}
                | {
                    "loss_at_sample_epoch": (i.get("losses") or [{}] * i.get("epochs", epoch))[
                        i.get("epochs", epoch) - 1
                    ]
                    if self.min_steps
                    else (i.get("losses") or [{}] * epoch)[epoch - 1]
                }
                for i in infos
            ],
        }
        if self.dp:
            out["dp_epsilon"] = max(i["epsilon"][epoch - 1] for i in infos)
            out["dp_delta"] = self.dp_delta
            out["dp_accountant"] = self.dp_accountant
        return out


@dataclass(frozen=True)
class OwnSynthetic(Fedssyn):
    """Baseline D_i ∪ D̃_i: each client keeps its own synthetic set (same keys as ``fedssyn``)."""

    name: ClassVar[str] = "own"
    mode: ClassVar[str] = "own"
    not_distributed: ClassVar[str] = "a baseline of Fig. 3 (each client keeps its own set): run it with fl.run"


@dataclass(frozen=True)
class CentralSynthetic(Fedssyn):
    """Baseline: one model on the union of the clients' synthetic sets only (same keys as ``fedssyn``)."""

    name: ClassVar[str] = "central-synthetic"
    mode: ClassVar[str] = "own"
    not_distributed: ClassVar[str] = "a centralised baseline (one model on the pooled data) has no clients"

    def deal(self, split: Split) -> Split:
        return centralise(split, keep_real=False)


@dataclass(frozen=True)
class CentralReal(Method):
    """Baseline: one model on the union of the clients' real data D_i (no generators, no keys)."""

    name: ClassVar[str] = "central-real"
    not_distributed: ClassVar[str] = "a centralised baseline (one model on the pooled data) has no clients"

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        _no_real_shuffle(setup)
        return centralise(split, keep_real=True), {}
