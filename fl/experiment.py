"""One FL experiment built from its config (:class:`Experiment`): the data and the clients' split, the model as flat
parameters, the algorithm, the method, the device it runs on; and what a run records of where it ran.

Everything a run builds before its first round, shared by ``python -m fl.run``, the notebook call :func:`fl.train`,
a fleet (:mod:`fl.fleet`), the Flower server (:mod:`fl.flower`) and the estimates after the fact
(:mod:`fl.remeasure`); the loop that runs it is :func:`fl.loop.execute`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fl.provenance as provenance
from fl.clients import LocalConfig, carried_rows
from fl.config import RunConfig, build_algorithm, build_method
from fl.data import Dataset, load
from fl.engine import EngineState, compute_round, evaluate, init_state, n_participants, per_sample, run_round
from fl.estimators import measure
from fl.federation import assemble, split_clients
from fl.flat import FlatModel
from fl.graphs import graphs_setting
from fl.methods import Setup, Split
from fl.workers import ModelSpec, RunSpec, Workers, get_workers, resolve_workers
from theory.cli import check_memory
from theory.errors import InputError

FEW_HELD_OUT = 5  # held-out samples below which a client's accuracy is said to be coarse (a note, never an error)


def resolve_device(name: str, what: str = "config train.device") -> torch.device:
    """The device ``name`` says (``what``: where it was given, for the message): auto (CUDA when present), cpu,
    cuda or cuda:K; anything else, or CUDA where there is none, is an InputError in one line. A config's
    ``train.device`` and the benchmarks' ``--device`` flags both go through it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InputError(f"{what}: expected auto, cpu, cuda or cuda:K, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"{what}: {name} requested but no CUDA device is available")
    return device


def cap_gpu_memory(device: torch.device) -> None:
    """On CUDA, at most ``$SHUFFLEFL_GPU_GIB`` GiB for this process (``torch.cuda.set_per_process_memory_fraction``):
    what a lease's scheduler admitted it with (lab/campaign), so one task cannot starve the others."""
    gib = os.environ.get("SHUFFLEFL_GPU_GIB")
    if device.type != "cuda" or not gib:
        return
    index = torch.cuda.current_device() if device.index is None else device.index  # the call wants an index
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, float(gib) * 2**30 / total), index)


def federation(config: RunConfig) -> tuple[Dataset, Split, np.random.Generator]:
    """A run's data before its method: the dataset (subsampled as configured), the clients' split (D_i after any
    real-data shuffle, validation indices, the original D_i) and the generator whose draws made the split (the
    run goes on drawing from it when it assembles the clients)."""
    seed = config.train.seed
    dataset = load(config.data.dataset, config.data.data_root or None).subsample(
        config.data.subsample, config.data.test_subsample, np.random.default_rng([seed, 2])
    )
    rng = np.random.default_rng([seed, 1])
    split = Split(*split_clients(
        dataset, config.data.partition, config.data.clients, rng, config.data.p, config.data.val_fraction,
        config.data.partition_params(),
    ))  # fmt: skip
    return dataset, split, rng


def missing_prepared(config: RunConfig) -> list[int]:
    """The clients whose method would make data on this machine before round 1 that a cache could have held
    (:meth:`fl.methods.Method.missing`: a Fedssyn generator not trained, a synthetic set not sampled)."""
    dataset, split, _ = federation(config)
    return build_method(config.method).missing(Setup(dataset, config.train.seed, config.data.p), split)


class Experiment:
    """The pieces of one run, built from its config: data, model (flat parameters), algorithm, method. The data are
    refused in one line where they cannot give a result (:meth:`fl.data.Dataset.check_usable`), after, for a run
    ``resuming`` (its folder), the check that they are those it started on (:func:`fl.provenance.check_data`)."""

    def __init__(self, config: RunConfig, resuming: Path | None = None) -> None:
        self.config = config
        self.device = resolve_device(config.train.device)
        cap_gpu_memory(self.device)
        seed = config.train.seed
        dataset, split, rng = federation(config)
        self.data_used = dataset.record()  # name, folder, sample counts, files and digests: what a resume compares
        if resuming is not None:  # a resumed run's data are its own (fl.provenance) before anything is made of them
            provenance.check_data(resuming, self.data_used)
        dataset.check_usable()  # no result from one class, a handful of test images or a constant channel
        self.method = build_method(config.method)
        n_tilde = int(config.method.get("n_tilde", 0) or 0)
        if n_tilde:  # the synthetic sets a method makes: refused before any generator trains when they cannot fit
            check_memory(
                3 * 4 * n_tilde * config.data.clients * int(np.prod(dataset.shape)),
                f"method.n_tilde = {n_tilde} synthetic images for each of {config.data.clients} clients",
            )
        split, self.method_info = self.prepare(Setup(dataset, seed, config.data.p, str(self.device)), split)
        self.synthetic = split.synthetic or []
        self.data = assemble(
            dataset, split.train, split.val, split.original, rng, config.data.p, split.synthetic,
            split.synthetic_mode, self.device,
        )  # fmt: skip
        self.synthetic_numbers = sum(len(s[1]) for s in self.synthetic) * int(np.prod(dataset.shape))
        empty = [i for i, t in enumerate(self.data.train) if len(t) == 0]
        if empty:
            raise InputError(f"clients {empty} have no training data; raise data.min_size or data.alpha")
        self.model_spec = ModelSpec(
            config.model.name,
            tuple(dataset.shape),
            dataset.n_classes,
            config.train.dtype,
            width=config.model.width,
            conv=config.model.conv,
        )
        with torch.random.fork_rng(devices=[]):  # the initial model depends on the seed only
            torch.manual_seed(seed)
            model = self.model_spec()
        dtype = getattr(torch, config.train.dtype)
        self.flat = FlatModel(model.to(self.device))
        if dtype != self.data.x.dtype:
            self.data.x, self.data.test_x = self.data.x.to(dtype), self.data.test_x.to(dtype)
        self.algorithm = build_algorithm(config.algorithm)
        train = config.train
        self.local = LocalConfig.of(train)
        self.x0 = self.flat.params.detach().clone()
        self.n_head = int(self.flat.head_mask.sum())
        participants = n_participants(self.data.n_clients, train.participation)
        self.n_workers = resolve_workers(train.workers, participants, self.device.type)
        self.pool: Workers | None = None

    def start_workers(self) -> None:
        """The run's worker processes (:mod:`fl.workers`), set up once; none with ``n_workers`` = 1."""
        if self.n_workers > 1 and self.pool is None:
            self.pool = get_workers(self.n_workers)
            spec = RunSpec(self.model_spec, self.algorithm, self.method, self.data, self.local, self.config.train.seed)
            self.pool.setup(spec)

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        """The method's preparation (:meth:`fl.methods.Method.prepare`); the Flower server and clients split it."""
        return self.method.prepare(setup, split)

    def run_round(self, state: EngineState) -> tuple[EngineState, dict]:
        seed = self.config.train.seed
        return run_round(state, self.flat, self.algorithm, self.data, self.local, seed, self.method, self.pool)

    def compute_round(self, state: EngineState):
        """:func:`fl.engine.compute_round`: the round without touching ``state`` (in the workers, where started)."""
        seed = self.config.train.seed
        return compute_round(state, self.flat, self.algorithm, self.data, self.local, seed, self.method, self.pool)

    def measure(self, x: torch.Tensor, t: int, method_state: dict) -> dict:
        """ζ², σ² on D_i and ζ̂², σ̂² (and δ²) on what each client minimises, at the server model x."""
        generator = torch.Generator().manual_seed(self.config.train.seed * 1_000_003 + t)
        weights = [self.method.real_weight(i, self.data, method_state) for i in range(self.data.n_clients)]
        synthetic = self.method.synthetic_set(method_state)
        return measure(
            self.flat, x, self.data, self.config.train.estimate_samples, generator, weights, synthetic,
            self.method.synthetic_weight(method_state),
        )  # fmt: skip

    def fresh_state(self, lr: float) -> EngineState:
        self.flat.load(self.x0)
        carried = carried_rows(self.local)
        return init_state(self.flat, self.algorithm, self.data.n_clients, lr, self.local.client_state, carried)

    def evaluate(self, x: torch.Tensor) -> tuple[float, float]:
        """Test loss and accuracy of the server model x (its batches spread over the workers, where started)."""
        if self.pool is not None:
            return self.pool.evaluate(x)
        self.flat.load(x)
        return evaluate(self.flat, self.data.test_x, self.data.test_y)

    def validation_accuracy(self, x: torch.Tensor) -> float:
        val = torch.cat(self.data.val)
        if not len(val):
            return float("nan")
        self.flat.load(x)
        return evaluate(self.flat, self.data.x[val], self.data.y[val])[1]

    def client_accuracy(self, x: torch.Tensor) -> dict:
        """The server model x on each client's own held-out split (``train.client_eval_every``; see
        :class:`fl.config.TrainConfig`): the mean accuracy over the clients, the mean of the worst tenth of them
        (⌈N/10⌉ clients) and the standard deviation across them, and ``per_client``: each client's id, held-out
        samples, accuracy and mean cross-entropy; clients without a held-out split are named in ``unevaluated``
        (never measured, so never the worst; :meth:`held_out_note` says so when the run starts)."""
        ids = [k for k, v in enumerate(self.data.val) if len(v)]
        unevaluated = {"unevaluated": [k for k, v in enumerate(self.data.val) if not len(v)]}
        if not ids:
            return unevaluated
        self.flat.load(x)
        every = np.concatenate([self.data.val[k] for k in ids])  # one pass over every client, then per client
        hits, losses = (t.double().cpu().numpy() for t in per_sample(self.flat, self.data.x[every], self.data.y[every]))
        sizes = np.array([len(self.data.val[k]) for k in ids])
        starts = np.cumsum(sizes) - sizes
        scores = np.add.reduceat(hits, starts) / sizes
        loss = np.add.reduceat(losses, starts) / sizes
        worst = np.sort(scores)[: -(-len(scores) // 10)]
        per_client = {"client": ids, "samples": sizes.tolist(), "accuracy": scores.tolist(), "loss": loss.tolist()}
        return {"mean": scores.mean(), "worst_decile": worst.mean(), "std": scores.std(), "clients": len(scores),
                "per_client": per_client} | (unevaluated if unevaluated["unevaluated"] else {})  # fmt: skip

    def held_out_note(self) -> str | None:
        """With per-client evaluation (``train.client_eval_every``): a one-line InputError where no client has a
        held-out sample (nothing would be measured), else a note naming the clients without one (their accuracy is
        never measured: clients.csv lists them with 0 samples, the worst client is among the others); None
        without the evaluation or when every client has one."""
        if not self.config.train.client_eval_every:
            return None
        missing = [k for k, v in enumerate(self.data.val) if not len(v)]
        fraction = self.config.data.val_fraction
        if len(missing) == self.data.n_clients:
            raise InputError(
                f"train.client_eval_every: none of the {self.data.n_clients} clients has a held-out sample "
                f"(data.val_fraction = {fraction:g} of each client's samples rounds to none); raise "
                "data.val_fraction, give the clients more samples, or set train.client_eval_every = 0"
            )
        if not missing:
            return None
        shown = ", ".join(map(str, missing[:10])) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return (f"note: {len(missing)} of {self.data.n_clients} clients have no held-out sample (data.val_fraction = "
                f"{fraction:g} rounds to none; clients {shown}): their accuracy is not measured, clients.csv lists "
                "them with 0 samples")  # fmt: skip

    def few_held_out_note(self) -> str | None:
        """With per-client evaluation (``train.client_eval_every``): a one-line note naming the clients whose
        held-out split has fewer than :data:`FEW_HELD_OUT` samples but some (their accuracy moves in steps of 1/n,
        a handful of samples says little); None without the evaluation or where every client has enough (or none:
        :meth:`held_out_note` says so)."""
        if not self.config.train.client_eval_every:
            return None
        few = {k: len(v) for k, v in enumerate(self.data.val) if 0 < len(v) < FEW_HELD_OUT}
        if not few:
            return None
        shown = ", ".join(f"{k} ({n})" for k, n in list(few.items())[:10])
        shown += f" and {len(few) - 10} more" if len(few) > 10 else ""
        return (f"note: {len(few)} of {self.data.n_clients} clients hold fewer than {FEW_HELD_OUT} held-out samples "
                f"(data.val_fraction = {self.config.data.val_fraction:g}; client (samples): {shown}): their accuracy "
                "moves in steps of 1/samples")  # fmt: skip

    def tune_lr(self) -> tuple[float, list[dict]]:
        """Pick the client step size from the grid by validation accuracy after ``tune_rounds`` rounds."""
        grid = self.config.train.lr
        if len(grid) == 1:
            return grid[0], []
        table = []
        for lr in tqdm(grid, desc="lr grid", leave=False, disable=None):
            state = self.fresh_state(lr)
            for _ in range(self.config.train.tune_rounds):
                state, _ = self.run_round(state)
            accuracy = self.validation_accuracy(state.x)
            table.append({"lr": lr, "val_accuracy": accuracy if np.isfinite(accuracy) else None})
        best = max(table, key=lambda row: -1 if row["val_accuracy"] is None else row["val_accuracy"])
        return best["lr"], table

    def communication(self, participants: int) -> int:
        per_client = self.algorithm.communication(self.flat.n_params, self.n_head)
        return participants * (per_client + self.method.communication(self.flat.n_params))


def where_it_ran(exp: Experiment) -> dict:
    """What provenance.json keeps of the machine and the data a run started on: the device (its name on CUDA),
    torch, the core count and the one trainer thread, ``train.graphs`` (:mod:`fl.graphs`: how the batched steps
    are launched, no number changes) and the data actually read (dataset, folder, sizes)."""
    device = str(exp.device)
    if exp.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(exp.device)})"
    return {
        "device": device,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "trainer_threads": 1 if exp.device.type == "cpu" else torch.get_num_threads(),
        "graphs": graphs_setting(exp.config.train.graphs),
        "data": exp.data_used,
    }


@contextlib.contextmanager
def trainer_threads(config: RunConfig) -> Iterator[None]:
    """One intra-op torch thread while a CPU run trains, evaluates and measures in this process, as in every worker
    process (:mod:`fl.workers`): a run's numbers never depend on the core count or on ``train.workers``."""
    if resolve_device(config.train.device).type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
