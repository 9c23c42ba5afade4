"""``python -m fl.run``: one FL experiment from a TOML config, into a run directory that survives interruption.

    python -m fl.run --config configs/fmnist_quick.toml --set train.rounds=5 --out results/runs/quick
    python -m fl.run --resume results/runs/quick          # continue an interrupted run (bit-identical on CPU)
    python -m fl.run --resume results/runs/quick --set train.rounds=10   # extend it: equal to a 10-round run
    python -m fl.run --print-config --config configs/fmnist_quick.toml   # the resolved config, every key
    python -m fl.run --compare results/runs/a results/runs/b   # rounds to target accuracy and the speed-up

The run directory holds ``config.json`` (the resolved config), ``metrics.jsonl`` (one line per round: test
loss/accuracy, cumulative communication, estimator values), ``checkpoint.pt`` (written atomically every
``train.checkpoint_every`` rounds and on Ctrl-C) and, when finished, ``summary.json`` and ``curve.png`` (test
accuracy and loss per round). Where the output is not a terminal (a file, a pipe), a line per round says the
round's test accuracy, loss and seconds; on a terminal the progress bar does (``--quiet``: neither).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from fl import plugins, provenance
from fl.algorithms import Context
from fl.atomic import locked
from fl.clients import LocalConfig, carried_rows
from fl.config import RunConfig, TrainConfig, build_algorithm, build_method, from_dict, load_config, parse_override
from fl.data import Dataset, load
from fl.engine import (
    EngineState,
    apply_round,
    client_zeros,
    compute_round,
    evaluate,
    init_state,
    n_participants,
    per_sample,
    place_clients,
    run_round,
)
from fl.estimators import measure
from fl.federation import assemble, split_clients
from fl.flat import FlatModel
from fl.graphs import graphs_setting
from fl.methods import Picture, Setup, Split, new_state
from fl.methods.base import WORK_FOLDER
from fl.sinks import MLflow, TensorBoard, curves_folder, require_mlflow, require_tensorboard
from fl.torchfiles import load_safely
from fl.workers import ModelSpec, RunSpec, WorkerLost, Workers, get_workers, resolve_workers
from theory.cli import ArgumentParser, check_memory, guarded, held, make_dir, stop_requested
from theory.errors import InputError
from theory.output import (
    fsync_path,
    open_unlinked,
    read_object,
    refuse_link,
    replace_durably,
    to_json,
    write_csv,
    write_text_atomically,
)

CPU = torch.device("cpu")
FEW_HELD_OUT = 5  # held-out samples below which a client's accuracy is said to be coarse (a note, never an error)


class Interrupted(InputError):
    """A run stopped by Ctrl-C or SIGTERM with its checkpoint saved (one line, as any InputError; a fleet tells it
    from a failure: :mod:`fl.fleet`)."""


def device_argument(text: str) -> torch.device:
    """argparse type of a device flag (the benchmarks'): auto (CUDA when present), cpu, cuda or cuda:K."""
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:K, got {text!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}: no CUDA device here (auto uses CUDA only where present)")
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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("config train.device: cuda requested but no CUDA device is available")
    return torch.device(name)


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
        self.local = LocalConfig(
            train.local_epochs, train.batch_size, train.participation, train.weighting, train.local_steps,
            train.momentum, train.optimizer, train.weight_decay, train.backend, train.client_chunk, train.client_state,
            train.augment, train.optimizer_state, train.local_budget, train.graphs,
        )  # fmt: skip
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


def config_key(config: RunConfig) -> str:
    """12 hex digits over what a run's numbers depend on in its config (its identity, without the device a resumed
    run may move to): kept in the state (``extra["config_key"]``, beside ``extra["config_rounds"]``, the
    ``train.rounds`` it was made with), so a resume refuses an edited config.json; a run extended to more rounds
    (:func:`extend`) continues a checkpoint keyed with its earlier rounds."""
    tree = config.identity()
    tree["train"].pop("device", None)
    tree.pop("plugins", None)  # a plug-in's code is provenance's to check (fl.provenance.check_plugins)
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:12]


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


def save_checkpoint(path: Path, state: EngineState) -> None:
    """torch.save to a temporary file, then an atomic rename: a crash never leaves half a checkpoint."""
    payload = {
        "round": state.round,
        "x": state.x.cpu(),
        "server": {k: v.cpu() for k, v in state.server.items()},
        "clients": {k: v.cpu() for k, v in state.clients.items()},
        "lr": state.lr,
        "extra": state.extra,
        "method": _to(state.method, "cpu"),
    }
    replace_durably(path, lambda tmp: torch.save(payload, tmp))


CHECKPOINT_KEYS = {"round", "x", "server", "clients", "lr", "extra"}  # what save_checkpoint writes (and "method")


def load_checkpoint(
    path: Path, device: torch.device, client_state: str = "device", like: torch.Tensor | None = None,
    rounds: int | None = None,
) -> EngineState:  # fmt: skip
    """The state a checkpoint holds, its fields checked (an InputError in one line naming the file and the field):
    ``round`` a whole number >= 1 (with ``rounds``, the run's ``train.rounds``: at most ``rounds`` + 1, the round
    after the last, checked before anything is sized by it), ``x`` a 1-d floating tensor of finite values (with
    ``like``, the run's own parameter vector: of its size and dtype), ``lr`` a positive finite number, the rest of
    their kinds."""
    payload = load_safely(path, "checkpoint", "start the run over (--overwrite), or point at another", device)
    missing = CHECKPOINT_KEYS - set(payload) if isinstance(payload, dict) else CHECKPOINT_KEYS
    if missing:
        raise InputError(f"{path}: not a checkpoint of fl.run (no {', '.join(sorted(missing))})")
    x, at, lr = payload["x"], payload["round"], payload["lr"]
    why = None
    if not isinstance(at, int) or isinstance(at, bool) or at < 1:
        why = f"its round is {at!r}, not a whole number >= 1"
    elif rounds is not None and at > rounds + 1:
        why = f"its round is {at}, past the {rounds} rounds of the run's config (train.rounds)"
    elif not isinstance(x, torch.Tensor) or x.ndim != 1 or not x.is_floating_point():
        why = "its x is not a 1-d floating-point parameter vector"
    elif like is not None and (x.numel() != like.numel() or x.dtype != like.dtype):
        why = f"its x holds {x.numel()} {x.dtype} values, the run's model {like.numel()} {like.dtype}"
    elif x.device.type != "meta" and not bool(torch.isfinite(x).all()):
        why = "its x holds values that are not finite"
    elif not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
        why = f"its lr is {lr!r}, not a positive number"
    elif not isinstance(payload["extra"], dict) or not isinstance(payload["server"], dict):
        why = "its extra or server state is not a table"
    if why:
        raise InputError(f"{path}: not a checkpoint this run can continue ({why}); start the run over (--overwrite)")
    clients = place_clients(payload["clients"], client_state)
    return EngineState(
        payload["round"], payload["x"], payload["server"], clients, payload["lr"], payload["extra"],
        payload.get("method", new_state()),
    )  # fmt: skip


def _to(tree, device: str):
    """A copy of a nested dict of tensors (and numbers) with every tensor on ``device``."""
    if isinstance(tree, dict):
        return {k: _to(v, device) for k, v in tree.items()}
    return tree.to(device) if isinstance(tree, torch.Tensor) else tree


def resumable_rows(path: Path, next_round: int) -> list[dict]:
    """The metrics rows of rounds 1 .. ``next_round`` - 1, which a checkpoint before ``next_round`` continues: rows
    written after that checkpoint are dropped (those rounds run again), a torn last line (a crash mid-write) is
    dropped with a warning, and anything else that does not match the checkpoint is refused in one line."""
    lines = path.read_text().splitlines() if path.exists() else []
    rows = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if k == len(lines) - 1:
                print(f"{path}: dropped its torn last line (a write cut short)", file=sys.stderr)
                break
            raise InputError(f"{path}: line {k + 1} is not JSON; the metrics are damaged, start the run anew") from None
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            raise InputError(f"{path}: line {k + 1} is not a metrics row; start the run anew")
        rows.append(row)
    kept = [r for r in rows if r["round"] < next_round]
    if len(kept) != next_round - 1 or any(r["round"] != k for k, r in enumerate(kept, 1)):  # never sized by the round
        held = f"rounds {kept[0]['round']}-{kept[-1]['round']} ({len(kept)} rows)" if kept else "no rows"
        raise InputError(
            f"{path} holds {held} where its checkpoint needs rounds 1-{next_round - 1}: the metrics do not match "
            "the checkpoint; start the run anew"
        )
    return kept


def read_metrics(path: Path, before_round: int | None = None) -> list[dict]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if before_round is None or r["round"] < before_round]


def finite_accuracies(rows: list[dict]) -> list[tuple[int, float]]:
    """(round, test accuracy) of every row that has one and whose server model was finite: a diverged round's model
    (NaN or inf) predicts whatever its argmax lands on, which is no accuracy of a model (its row keeps what was
    measured, with ``diverged``; a summary never reports it)."""
    return [(r["round"], r["test_accuracy"]) for r in rows
            if r.get("test_accuracy") is not None and not r.get("diverged")]  # fmt: skip


def rounds_to_target(rows: list[dict], target: float) -> int | None:
    """First round whose test accuracy is at least ``target`` (None when never; a diverged round never counts)."""
    return next((t for t, accuracy in finite_accuracies(rows) if accuracy >= target), None)


def draw(picture: Picture, out: Path) -> None:
    """The run's writer draws what the run or its method asks for (:class:`fl.methods.Picture`) into ``out``."""
    from plots.samples import plot_grid, plot_soft_grid  # matplotlib only when a run draws

    plot = plot_soft_grid if picture.soft else plot_grid
    plot(picture.images, picture.labels, out / picture.file, title=picture.title)


def summarise(config: RunConfig, rows: list[dict], state: EngineState, exp: Experiment, seconds: float) -> dict:
    target = config.train.target_accuracy
    reached = rounds_to_target(rows, target)
    estimates = [r["estimates"] for r in rows if "estimates" in r]
    return {
        "rounds": state.round - 1,
        **accuracy_summary(rows),
        "target_accuracy": target,
        "rounds_to_target": reached,
        "communication_to_target": next((r["communication"] for r in rows if r["round"] == reached), None),
        "communication_total": rows[-1]["communication"] if rows else 0,
        "lr": state.lr,
        "lr_tuning": state.extra.get("lr_tuning", []),
        **({"init_from_changes": state.extra["init_from_changes"]} if "init_from_changes" in state.extra else {}),
        "n_params": exp.flat.n_params,
        "n_head_params": exp.n_head,
        "client_sizes": exp.data.sizes.tolist(),
        "p_realised": [len(r) / len(t) if len(t) else 0.0 for r, t in zip(exp.data.received, exp.data.train)],
        "estimates_mean": {
            key: float(np.mean([e[key] for e in estimates if key in e]))
            for key in ("zeta2", "sigma2", "zeta2_hat", "sigma2_hat", "delta2", "zeta2_ratio")
            if any(key in e for e in estimates)
        },
        "one_minus_p_squared": (1 - config.data.p) ** 2,
        "synthetic_numbers_sent_once": exp.synthetic_numbers,
        "method": config.method["name"],
        **{key: float(sum(r.get(key, 0.0) for r in rows)) for key in ("seconds_local", "seconds_method")},
        **exp.method.report(exp.method_info, state.method),
        **client_summary(rows),
        **cuda_peak(exp.device),
        "seconds": seconds,
    }


def accuracy_summary(rows: list[dict]) -> dict:
    """The round a run diverged at (None: it did not), its final test accuracy (None for a run that diverged: its
    last model is not a number, whatever the rows measured of it) and its best (over the rounds whose model was
    finite): what :func:`summarise` and the ledger's check (:mod:`lab.records.check`) draw from the rows."""
    diverged = next((r["round"] for r in rows if r.get("diverged")), None)
    accuracies = [accuracy for _, accuracy in finite_accuracies(rows)]
    return {
        "diverged_at_round": diverged,
        "final_test_accuracy": accuracies[-1] if accuracies and diverged is None else None,
        "best_test_accuracy": max(accuracies) if accuracies else None,
    }


def cuda_peak(device: torch.device) -> dict:
    """On CUDA, the most GPU memory this process's tensors held (GiB, ``torch.cuda.max_memory_allocated``; CUDA
    graph pools and the allocator's cache come on top): what a lease's scheduler admits a task of this kind with
    next time (lab.campaign.tasks.KIND_GIB). Nothing on the CPU."""
    if device.type != "cuda":
        return {}
    return {"cuda_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "cuda_reserved_peak_gib": torch.cuda.max_memory_reserved(device) / 2**30}  # fmt: skip


CLIENTS_CSV = "clients.csv"  # every per-client evaluation: round, client, held-out samples, accuracy, loss
CURVE = "curve.png"  # a run's learning curve: test accuracy and loss per round


def client_rows(rows: list[dict]) -> list[list]:
    """The per-client evaluations of a run's metrics rows, one CSV row per (round, client), by client; a client
    without a held-out sample with 0 samples and no accuracy or loss (never left out)."""
    out = []
    for row in rows:
        evaluated = row.get("client_accuracy") or {}
        every = evaluated.get("per_client")
        if every or evaluated.get("unevaluated"):
            every = every or {"client": [], "samples": [], "accuracy": [], "loss": []}
            table = [[row["round"], *values] for values in zip(every["client"], every["samples"], every["accuracy"],
                                                               every["loss"])]  # fmt: skip
            table += [[row["round"], k, 0, None, None] for k in evaluated.get("unevaluated", [])]
            out += sorted(table, key=lambda line: line[1])
    return out


def client_summary(rows: list[dict]) -> dict:
    """The last per-client evaluation's worst client (id, accuracy, samples) and the spread across clients."""
    last = next((r["client_accuracy"] for r in reversed(rows) if (r.get("client_accuracy") or {}).get("per_client")),
                None)  # fmt: skip
    if last is None:
        return {}
    every = last["per_client"]
    k = int(np.argmin(every["accuracy"]))
    worst = {"client": every["client"][k], "accuracy": every["accuracy"][k], "samples": every["samples"][k]}
    unevaluated = {"clients_unevaluated": last["unevaluated"]} if last.get("unevaluated") else {}
    return {"worst_client": worst, "client_accuracy_std": last["std"]} | unevaluated


def write_clients(out: Path, rows: list[dict]) -> None:
    """``clients.csv`` from the metrics rows (rewritten whole: a resumed run's file matches its rows) and, at the
    end, ``clients.png``: the per-client accuracy at each evaluated round."""
    table = client_rows(rows)
    if table:
        write_csv(out / CLIENTS_CSV, ["round", "client", "samples", "accuracy", "loss"], table)


def draw_clients(out: Path, rows: list[dict]) -> None:
    table = client_rows(rows)
    if not table:
        return
    from plots.clients import plot_clients  # matplotlib only when a run draws

    rounds = sorted({r[0] for r in table})
    measured = [[r[3] for r in table if r[0] == t and r[3] is not None] for t in rounds]
    plot_clients(rounds, measured, out / "clients.png")


# What a run started from another run's checkpoint must share with it: everything that shaped that state but the
# local step (step size and weight decay), which may change at the branching round like a schedule; the change is
# said on stderr and kept in the summary (``init_from_changes``).
SHARED_TRAIN_KEYS = (
    "participation", "local_epochs", "local_steps", "momentum", "optimizer", "batch_size", "weighting", "seed",
    "optimizer_state", "augment", "local_budget",
)  # fmt: skip


def step_from_here(config: RunConfig, theirs: dict, state: EngineState, checkpoint: Path) -> dict:
    """Set the step size of a run that continues ``state`` (its source's, ``theirs`` its config): one
    ``train.lr`` is used from the branching round on; a grid keeps the source's tuned value, which it must hold.
    Returns what changed, {key: [source's, this run's]}."""
    grid = config.train.lr
    if len(grid) > 1 and state.lr not in grid:
        raise InputError(
            f"--init-from {checkpoint}: the source trained with lr {state.lr:g}, which train.lr {list(grid)} does "
            "not hold; give one train.lr to change the step size from here on"
        )
    changes = {}
    if len(grid) == 1 and grid[0] != state.lr:
        changes["lr"], state.lr = [state.lr, grid[0]], grid[0]
    if config.train.weight_decay != theirs["train"]["weight_decay"]:
        changes["weight_decay"] = [theirs["train"]["weight_decay"], config.train.weight_decay]
    return changes


def check_init_from(
    config: RunConfig, checkpoint: Path, device: torch.device = CPU, client_state: str = "device"
) -> tuple[dict, EngineState]:
    """What ``--init-from checkpoint`` refuses, in one line, before a run folder is made: a source run whose data,
    model, algorithm or local training differ, a checkpoint that does not load safely, one at or after the last
    round. (the source's config, the state in the checkpoint)."""
    source = checkpoint.parent
    other = from_dict(read_object(source / "config.json", "config.json of the run --init-from starts from"))
    mine, theirs = config.to_dict(), other.to_dict()
    for section in ("data", "model", "algorithm"):
        if mine[section] != theirs[section]:
            raise InputError(f"--init-from {checkpoint}: [{section}] differs from the source run's")
    for key in SHARED_TRAIN_KEYS:
        if mine["train"][key] != theirs["train"][key]:
            raise InputError(f"--init-from {checkpoint}: train.{key} differs from the source run's")
    state = load_checkpoint(checkpoint, device, client_state)
    if state.round > config.train.rounds:
        raise InputError(f"--init-from {checkpoint}: it is after round {state.round - 1} >= train.rounds")
    return theirs, state


def init_from(config: RunConfig, checkpoint: Path, exp: Experiment) -> tuple[EngineState, list[dict]]:
    """The state in ``checkpoint`` (of another run, e.g. ``checkpoint_round49.pt``) and that run's metrics rows
    before it, for a run of ``config`` that continues from there; the method state starts empty when the method
    differs (unless it declares the other's state its own: DynaFed before its synthesis). Refuses a run whose data,
    model, algorithm or local training differ from the source's."""
    source = checkpoint.parent
    mine = config.to_dict()
    theirs, state = check_init_from(config, checkpoint, exp.device, exp.local.client_state)
    changes = step_from_here(config, theirs, state, checkpoint)
    if changes:
        said = ", ".join(f"{k} {a:g} -> {b:g}" for k, (a, b) in changes.items())
        print(
            f"--init-from {checkpoint}: from round {state.round} on {said} (rounds before: the source's)",
            file=sys.stderr,
        )
        state.extra["init_from_changes"] = changes
    if mine["method"] != theirs["method"] and not exp.method.shares_state_with(
        build_method(theirs["method"]), state.round
    ):
        needs = exp.method.first_stateful_round()
        if needs is not None and state.round > needs:
            raise InputError(
                f"--init-from {checkpoint}: {exp.method.name} keeps state from round {needs} on, which the source "
                f"run did not; start from a state before round {needs} (after round {needs - 1} at the latest)"
            )
        state.method = new_state()
    state.extra["init_from"] = str(checkpoint)
    return state, read_metrics(source / "metrics.jsonl", before_round=state.round)


def divergence_cause(config: RunConfig) -> str:
    """The setting a diverged or overflowing run most likely owes it to: the largest of the numeric settings of its
    algorithm and method, train.weight_decay and train.momentum where one is far out of the usual range (above
    1e3), else train.lr; the plug-ins the config names (:mod:`fl.plugins`) are named beside it, their numbers
    being theirs to say."""
    tree = config.to_dict()
    found = [(f"train.{k}", tree["train"].get(k)) for k in ("weight_decay", "momentum")]
    found += [(f"{section}.{k}", v) for section in ("algorithm", "method") for k, v in tree.get(section, {}).items()]
    numbers = [(abs(float(v)), key, v) for key, v in found
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]  # fmt: skip
    big = max(numbers, default=None)
    plugged = "".join(f", or the plug-in {entry['spec']} ({key})" for key, entry in config.plugins().items())
    if big is not None and big[0] > 1e3:
        return f"{big[1]} = {big[2]:g}, far out of the usual range (or lower train.lr{plugged})"
    return f"lower train.lr{plugged}"


def not_the_step(exp: Experiment) -> str | None:
    """Why a run's server model turns non-finite whatever its step size, or None where nothing shows it: at the
    run's initial model (ordinary numbers, before any step) the first training batch of the first client with data
    normalises to non-finite images, or the model's parameters, outputs or gradients there are not finite, or the
    algorithm's correction (from its fresh state) is not. No step size makes a round from there finite; the
    plug-in behind the model or the algorithm is named."""
    config, flat = exp.config, exp.flat
    named = config.plugins()

    def who(key: str, value: str) -> str:
        return f"the plug-in {named[key]['spec']} ({key})" if key in named else f"{key} = {value!r}"

    model = who("model.name", config.model.name)
    if not bool(torch.isfinite(exp.x0).all()):
        return f"{model} starts from parameters that are not finite"
    client = next((i for i, t in enumerate(exp.data.train) if len(t)), None)
    if client is None:
        return None
    batch = exp.data.train[client][: config.train.batch_size]
    images, labels = exp.data.x[batch], exp.data.y[batch]
    if not bool(torch.isfinite(images).all()):
        return f"the training images of {config.data.dataset} are not finite once normalised"
    flat.load(exp.x0)
    flat.model.eval()  # no dropout draws: nothing of the run's random streams is used
    flat.grads.zero_()
    logits = flat.model(images)
    if not bool(torch.isfinite(logits).all()):
        return f"{model} gives non-finite outputs at its initial parameters"
    torch.nn.functional.cross_entropy(logits, labels).backward()
    if not bool(torch.isfinite(flat.grads).all()):
        return f"{model} gives non-finite gradients at its initial parameters"
    zeros = client_zeros(exp.algorithm.client_keys + carried_rows(exp.local), 1, exp.x0)
    fresh = Context(exp.x0, {k: torch.zeros_like(exp.x0) for k in exp.algorithm.server_keys},
                    {k: v[0] for k, v in zeros.items()}, flat.head_mask)  # fmt: skip
    with torch.no_grad():
        extra = exp.algorithm.correction(flat.params, fresh)
    if extra is not None and not bool(torch.isfinite(extra).all()):
        algorithm = who("algorithm.name", exp.algorithm.name)
        return f"{algorithm} gives a non-finite correction at the initial model, from its fresh state"
    return None


def round_row(exp: Experiment, state: EngineState, record: dict, communication: int, seconds: float) -> dict:
    """The metrics row of the round that ended in ``state``: communication so far, timings, test accuracy every
    ``eval_every`` rounds, estimates every ``estimate_every`` rounds, or ``diverged`` for a non-finite model."""
    train, t = exp.config.train, record["round"]
    sent = exp.communication(len(record["clients"])) + record.get("method", {}).get("numbers_sent", 0)
    row = {"round": t, "communication": communication + sent}
    row |= {"clients": len(record["clients"])}
    row |= {
        k: record[k]
        for k in ("seconds_local", "seconds_method", "backend", "backend_note", "fleet", "method")
        if k in record
    }
    if t % train.eval_every == 0 or t == train.rounds:
        row["test_loss"], row["test_accuracy"] = exp.evaluate(state.x)
    if not bool(torch.isfinite(state.x).all()):  # a NaN/inf server model: record it and stop
        row["diverged"] = True
    elif train.estimate_every and (t % train.estimate_every == 0 or t == 1):
        row["estimates"] = exp.measure(state.x, t, state.method)
    if train.client_eval_every and not row.get("diverged") and (t % train.client_eval_every == 0 or t == train.rounds):
        row["client_accuracy"] = exp.client_accuracy(state.x)
    row["seconds"] = seconds
    return to_json(row)  # a diverged model's NaN loss is written as null: the file stays strict JSON


# Every file fl.run writes in a run folder (and fl.remeasure, its estimates_posthoc.jsonl; a method its pictures
# and its work in progress: HFMDs' pool, DynaFed's D_syn and synthesis), by name, and their temporaries (a write cut
# short leaves NAME.tmp): what --overwrite removes, and nothing else. Its .shufflefl-output mark and .running lock
# stay (the start rewrites the one and holds the other). tests/fl/test_run_overwrite.py holds this list to what a
# run writes.
RUN_FILES = (
    "config.json", "provenance.json", "init_from.txt", "metrics.jsonl", "checkpoint.pt", "summary.json", CLIENTS_CSV,
    "clients.png", CURVE, "synthetic_samples.png", "hfmds_pool.png", "dynafed_dsyn.png", "dynafed_synthesis.pt",
    "estimates_posthoc.jsonl",
)  # fmt: skip
RUN_FILE = re.compile(r"(" + "|".join(map(re.escape, RUN_FILES)) + r"|checkpoint_round[0-9]+\.pt)(\.tmp)?")


def run_files(out: Path) -> list[Path]:
    """The files of ``out`` that fl.run (or fl.remeasure) writes there: those of :data:`RUN_FILES`' names or
    ``checkpoint_roundK.pt``, or a temporary of one (a link planted at such a name too: removing it leaves what it
    points to as it is, and a new run would replace it anyway); never a folder or a file of another name."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if RUN_FILE.fullmatch(p.name) and (p.is_symlink() or p.is_file()))


def new_run_folder(out: Path, overwrite: bool, instead: str) -> Path:
    """``out`` made ready for a new run (fl.run's folder, :func:`theory.cli.make_dir`): refused in one line when it
    holds a run already and not ``overwrite`` (``instead``: what to do, in the caller's terms). With ``overwrite``
    the earlier run's files go, every one fl.run or fl.remeasure wrote (:func:`run_files`: its checkpoints,
    post-hoc estimates, per-client table and pictures too, so none is read as the new run's) and nothing else (a
    user's notes stay), under the folder's lock: never while a run is going on in it."""
    if (out / "metrics.jsonl").exists() and not overwrite:
        raise InputError(f"{out} already holds a run; {instead}")
    folder = make_dir(out, "run directory", tool="fl.run", overwrite=overwrite)
    if overwrite:
        with locked(out / RUN_LOCK, busy=f"run directory {out}"):
            for path in run_files(out):
                path.unlink()
    return folder


def read_run_config(out: Path) -> RunConfig:
    """The config a run folder was started with (its ``config.json``), refused in one line if it is none."""
    if not (out / "config.json").is_file():
        raise InputError(f"{out}: not a run directory (no config.json)")
    return from_dict(read_object(out / "config.json", "config.json of the run"))


def execute(
    config: RunConfig,
    out: Path,
    resume: bool = False,
    quiet: bool = False,
    start_from: Path | None = None,
    exp: Experiment | None = None,
    accept_code_change: bool = False,
) -> dict:
    """Run (or continue) the experiment in ``out`` (from round 1, or from another run's checkpoint
    ``start_from``); returns the summary. Ctrl-C saves a checkpoint first. ``exp``: the experiment to run (default
    ``Experiment(config)``; the Flower server passes one whose rounds go through Flower). A resume checks the
    folder's ``provenance.json`` (:mod:`fl.provenance`): other code stops it in one line unless
    ``accept_code_change``."""
    with trainer_threads(config):
        exp = exp or Experiment(config, out if resume else None)
        token = WORK_FOLDER.set(out)  # long method work (DynaFed's synthesis) keeps its progress in the run folder
        try:
            return _execute(config, out, resume, quiet, start_from, exp, accept_code_change)
        finally:
            WORK_FOLDER.reset(token)


def relative_origin(checkpoint: Path, out: Path) -> str:
    """What ``init_from.txt`` keeps of the checkpoint a run started from: its path relative to the run folder
    (``../OTHER/checkpoint_round19.pt``), so that a store moved or brought home from a lease still points right."""
    return Path(os.path.relpath(Path(checkpoint).resolve(), Path(out).resolve())).as_posix()


def read_origin(out: Path) -> Path | None:
    """The checkpoint ``out/init_from.txt`` names (relative to ``out``, or absolute as older runs wrote it); None
    without one. A file that is not a path is one line."""
    origin = out / "init_from.txt"
    if not origin.is_file():
        return None
    try:
        text = origin.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if not text or "\0" in text or "\n" in text:
        raise InputError(f"{origin}: not the path of a checkpoint; remove it to start the run from round 1")
    return out / text


def keyed_rounds(out: Path, extra: dict) -> int:
    """The ``train.rounds`` of the config a checkpoint (its ``extra``) was keyed with (:func:`config_key`): its
    ``extra["config_rounds"]``, or, in a checkpoint from before that was kept (or none), the run's config.json's."""
    rounds = extra.get("config_rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool):
        return rounds
    train = read_object(out / "config.json", "config.json of the run").get("train")
    rounds = train.get("rounds", TrainConfig.rounds) if isinstance(train, dict) else TrainConfig.rounds
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else -1


def extended_key(config: RunConfig, rounds: int) -> str | None:
    """:func:`config_key` of ``config`` with ``train.rounds = rounds`` (what a run extended from ``rounds`` rounds
    kept in its checkpoint); None where no config has those rounds."""
    try:
        return config_key(config.extended(rounds))
    except InputError:
        return None


def extension_refusal(config: RunConfig, before: int, rows: list[dict]) -> str | None:
    """Why a run of ``before`` rounds, its metrics ``rows`` so far, cannot go on to ``config.train.rounds`` and
    equal a run of that many rounds from the start, or None. No round's numbers depend on the rounds to come (no
    schedule reads them: the step size is one number or a tuned one, methods see the round alone); what does is
    what a run does at its last round: a test (and per-client) evaluation out of turn, kept in that round's row.
    (A run that diverged stopped there, as a longer run would: its checkpoint of a non-finite model is refused
    before this, :func:`load_checkpoint`, and one from before the divergence computes it again.)"""
    rounds, train = config.train.rounds, config.train
    if not rows or rows[-1]["round"] != before:  # its last round not yet run: nothing done out of turn
        return None
    for key, every in (("eval_every", train.eval_every), ("client_eval_every", train.client_eval_every)):
        if every and before % every:
            return (
                f"its last round {before} was evaluated out of turn (train.{key} = {every} does not divide {before}), "
                f"which a {rounds}-round run would not do; start a {rounds}-round run instead"
            )
    return None


def extend(out: Path, config: RunConfig, before: int, state: EngineState) -> None:
    """Take the run in ``out`` (``before`` rounds, its checkpoint ``state``) on to ``config.train.rounds`` (what
    :func:`extension_refusal` refuses, refused before). Each step survives a stop before the next: the checkpoint
    first records the rounds it was keyed with, the summary of the shorter run goes, config.json says the new
    rounds, and provenance.json records the change (``changes``: the round and ``train.rounds`` [before, after])
    with the new config.json's digest, which ``figures ledger add`` checks. A resume stopped midway repeats what
    is left."""
    rounds = config.train.rounds
    if "config_rounds" not in state.extra:
        state.extra["config_rounds"] = before
        save_checkpoint(out / "checkpoint.pt", state)
    write_rounds(out, rounds)
    path = out / "provenance.json"
    if path.is_file():
        entry = read_object(path, "provenance.json")
        change = {"round": state.round, "train.rounds": [before, rounds]}
        changes = [c for c in entry.get("changes") or [] if isinstance(c, dict)]
        digest = hashlib.sha256((out / "config.json").read_bytes()).hexdigest()
        updated = entry | {"changes": changes + ([] if change in changes else [change])}
        updated |= {"config_sha256": digest} if "config_sha256" in entry else {}
        if updated != entry:
            provenance.write(path, updated)
    print(f"{out}: extended from {before} to {rounds} rounds (train.rounds), from round {state.round} on",
          file=sys.stderr)  # fmt: skip


def write_rounds(out: Path, rounds: int) -> None:
    """``train.rounds = rounds`` into the run folder's config.json (nothing else of it changes) and its summary, of
    the shorter run, removed first."""
    (out / "summary.json").unlink(missing_ok=True)  # no longer this run's result
    tree = read_object(out / "config.json", "config.json of the run")
    if tree.get("train", {}).get("rounds") != rounds:
        tree.setdefault("train", {})["rounds"] = rounds
        write_text_atomically(out / "config.json", json.dumps(tree, indent=2))


def extension_rounds(sets: Sequence[str]) -> int | None:
    """The N of ``--set train.rounds=N`` given with ``--resume`` (the one key a resume may set: it extends the
    run to N rounds); None without ``--set``. Any other key is refused in one line."""
    rounds = None
    for text in sets:
        path, value = parse_override(text)
        if path != ["train", "rounds"]:
            raise InputError(
                "--resume takes the run's own config; drop --config/--set (--set train.rounds=N alone, more rounds "
                "than the run has, extends it)"
            )
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(f"config train.rounds: expected int, got {value!r}")
        rounds = value
    return rounds


def is_terminal(stream) -> bool:
    """Whether ``stream`` (sys.stdout, sys.stderr) is a terminal; a stream that cannot say is not."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def round_line(out: Path, row: dict, seconds_before: float, rounds: int) -> str:
    """The line a run prints for a round where its output is not a terminal: round, test accuracy and loss (where
    evaluated), seconds the round took."""
    said = f"{out}: round {row['round']}/{rounds}"
    if row.get("diverged"):
        said += ": the server model diverged"
    elif row.get("test_accuracy") is not None:
        said += f": test accuracy {row['test_accuracy']:.4f}, test loss {row['test_loss']:.4f}"
    else:
        said += ": not evaluated (train.eval_every)"
    return f"{said}, {row['seconds'] - seconds_before:.2f} s"


def open_sinks(config: RunConfig, rows: list[dict], out: Path, stack: contextlib.ExitStack) -> list:
    """The live-curve sinks ``config.log`` names (:mod:`fl.sinks`: TensorBoard, MLflow), opened in ``stack`` with
    the run's ``rows`` so far; each is handed every row to come."""
    owner, sinks = str(out.resolve()), []
    if config.log.tensorboard:
        sinks.append(stack.enter_context(TensorBoard(Path(config.log.tensorboard), rows, owner)))
    if config.log.mlflow:
        params = config.identity()
        params["train"].pop("rounds")  # a tag: an extended run's grows, an MLflow parameter never changes
        mlflow = MLflow(Path(config.log.mlflow), rows, owner, str(out), params, config.train.rounds)
        sinks.append(stack.enter_context(mlflow))
    return sinks


def draw_curve(out: Path, rows: list[dict], config: RunConfig) -> None:
    """``curve.png``: the test accuracy and loss of every evaluated round (a diverged round's left out)."""
    measured = [(r["round"], r["test_accuracy"], r.get("test_loss")) for r in rows
                if r.get("test_accuracy") is not None and not r.get("diverged")]  # fmt: skip
    if not measured:
        return
    from plots.curve import plot_curve  # matplotlib only when a run draws

    rounds, accuracy, loss = zip(*measured)
    title = f"{out.name}: {config.algorithm['name']}, method {config.method['name']}, {config.data.dataset}"
    plot_curve(list(rounds), list(accuracy), [math.nan if v is None else v for v in loss], out / CURVE, title)


def _execute(
    config: RunConfig, out: Path, resume: bool, quiet: bool, start_from: Path | None, exp: Experiment,
    accept_code_change: bool,
) -> dict:  # fmt: skip
    note = exp.held_out_note()  # before any work: no client to evaluate is refused, some without one said
    if note:
        print(note, file=sys.stderr)
    note = exp.few_held_out_note()
    if note:
        print(note, file=sys.stderr)
    if exp.synthetic:
        x_syn = np.concatenate([s[0] for s in exp.synthetic])
        y_syn = np.concatenate([s[1] for s in exp.synthetic])
        title = f"{exp.method.name}: synthetic samples per class"
        draw(Picture("synthetic_samples.png", x_syn, y_syn, title), out)
    exp.start_workers()
    checkpoint, metrics_path = out / "checkpoint.pt", out / "metrics.jsonl"
    origin = out / "init_from.txt"  # the checkpoint a run started from (--init-from), for a restart
    if resume and not checkpoint.exists():  # stopped before its first checkpoint (e.g. killed): start it over
        start_from = read_origin(out)
        if keyed_rounds(out, {}) != config.train.rounds:  # and extended: started as the longer run
            write_rounds(out, config.train.rounds)
        print(f"{out}: no checkpoint yet; starting again from {start_from or 'round 1'} with its config")
        resume = False
    elif start_from is not None:
        write_text_atomically(origin, relative_origin(start_from, out))
    elif not resume and (origin.is_symlink() or origin.exists()):  # an earlier start's, in fl.run's own folder:
        origin.unlink()  # this run starts from round 1, and a restart must not read another origin
    synthetic = provenance.synthetic_hash(exp.synthetic)
    if not resume:
        provenance.record(out, synthetic, where_it_ran(exp) | {"plugins": config.plugins()})
    key = config_key(config)
    if resume:
        state = load_checkpoint(checkpoint, exp.device, exp.local.client_state, exp.x0, config.train.rounds)
        data_note = provenance.check_data(out, exp.data_used)  # first: never train the rest on other data
        if data_note:
            print(data_note, file=sys.stderr)
        note = provenance.check_plugins(out, config.plugins(), state.round, accept_code_change)
        if note:
            print(note, file=sys.stderr)
        before = keyed_rounds(out, state.extra)
        if before > config.train.rounds:
            raise InputError(
                f"{out}: its checkpoint was made by a run of {before} rounds, its config.json says "
                f"{config.train.rounds}; a run is extended, never shortened: restore config.json"
            )
        expected = key if before == config.train.rounds else extended_key(config, before)
        if state.extra.get("config_key", expected) != expected:
            raise InputError(
                f"{out / 'config.json'} differs from the config its checkpoint was trained with (edited?); restore "
                "it, or start a new run with the new config"
            )
        rows = resumable_rows(metrics_path, state.round)
        why = extension_refusal(config, before, rows) if before < config.train.rounds else None
        if why:  # refused before anything is recorded
            raise InputError(f"--set train.rounds={config.train.rounds}: {why}")
        note = provenance.check_resume(out, synthetic, state.round, accept_code_change, where_it_ran(exp))
        if note:
            print(note, file=sys.stderr)
        if before < config.train.rounds:  # --set train.rounds=N: on to N rounds
            extend(out, config, before, state)
        write_text_atomically(metrics_path, "".join(json.dumps(r) + "\n" for r in rows))
    elif start_from is not None:
        state, rows = init_from(config, start_from, exp)
        write_text_atomically(metrics_path, "".join(json.dumps(r) + "\n" for r in rows))
    else:
        lr, table = exp.tune_lr()
        state = exp.fresh_state(lr)
        state.extra["lr_tuning"] = table
        rows = []
        write_text_atomically(metrics_path, "")
    state.extra["config_key"], state.extra["config_rounds"] = key, config.train.rounds
    train = config.train
    start = time.perf_counter() - (rows[-1]["seconds"] if rows else 0.0)
    communication = rows[-1]["communication"] if rows else 0
    bar = tqdm(total=train.rounds, initial=state.round - 1, desc="rounds", unit="round", disable=quiet or None)
    lines = not quiet and not (is_terminal(sys.stdout) and is_terminal(sys.stderr))  # a line per round, off a terminal
    noted = False
    try:
        # live curves (fl.sinks), fed each row once it is written and closed with the log; never changes a number
        with open_unlinked(metrics_path, "a") as log, contextlib.ExitStack() as stack:
            sinks = open_sinks(config, rows, out, stack)
            while state.round <= train.rounds:
                # Ctrl-C / SIGTERM, or a worker lost, while the round computes or is evaluated: `state` is
                # untouched, its rows are all written, and it is what the checkpoint keeps. The row is made before
                # anything is committed (its test batches go to the workers); from there to the checkpoint, a signal
                # waits (held).
                try:
                    new, record, updates = exp.compute_round(state)
                except RuntimeError as error:  # torch: "value cannot be converted to type float without overflow"
                    if "overflow" not in str(error):
                        raise
                    raise InputError(
                        f"{out}: round {state.round} overflowed (a value past float range): the run diverged; the "
                        f"likely cause: {divergence_cause(config)}"
                    ) from None
                row = round_row(exp, new, record, communication, time.perf_counter() - start)
                cause = not_the_step(exp) if row.get("diverged") else None
                if cause:  # no step size makes this round finite: a refusal, not a result
                    raise InputError(
                        f"{out}: round {state.round} made the server model non-finite whatever train.lr: {cause}"
                    )
                with held():
                    apply_round(new, updates)
                    state = new
                    communication = row["communication"]
                    rows.append(row)
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    for sink in sinks:
                        sink.write(row)
                    if "client_accuracy" in row:
                        write_clients(out, rows)
                    t = row["round"]
                    if t % train.checkpoint_every == 0 or t == train.rounds:
                        os.fsync(log.fileno())  # the rows a checkpoint continues are on disk before it is
                        save_checkpoint(checkpoint, state)
                    if t == train.keep_round:
                        save_checkpoint(out / f"checkpoint_round{t}.pt", state)
                bar.update(1)
                if lines:
                    print(round_line(out, row, rows[-2]["seconds"] if len(rows) > 1 else 0.0, train.rounds), flush=True)
                if "backend_note" in row and not noted:
                    noted = tqdm.write(f"{out}: clients train sequentially: {row['backend_note']}") or True
                if "test_accuracy" in row:
                    bar.set_postfix(acc=f"{row['test_accuracy']:.3f}")
                if row.get("diverged"):
                    cause = divergence_cause(config)
                    said = f"the server model diverged (non-finite) at round {t}; stopping (the likely cause: {cause})"
                    tqdm.write(f"{out}: {said}")
                    break
                if stop_requested():
                    raise KeyboardInterrupt
    except (KeyboardInterrupt, WorkerLost) as stop:  # the round in flight is lost, the state before it is whole
        with held():
            fsync_path(metrics_path)
            save_checkpoint(checkpoint, state)
        bar.close()
        lost = isinstance(stop, WorkerLost)
        why, kind = (f"{stop}; saved", InputError) if lost else ("interrupted", Interrupted)
        raise kind(f"{why} after round {state.round - 1}; continue with --resume {out}") from None
    bar.close()
    summary = summarise(config, rows, state, exp, time.perf_counter() - start)
    for picture in exp.method.pictures(state.method):
        draw(picture, out)
    draw_clients(out, rows)
    draw_curve(out, rows, config)
    summary["provenance_sha256"] = provenance.digest(out)  # a provenance.json altered after the run shows
    write_text_atomically(out / "summary.json", json.dumps(to_json(summary), indent=2, allow_nan=False))
    return summary


def compare(a: Path, b: Path) -> str:
    """Rounds to the target accuracy of two finished runs and the speed-up of b over a."""
    summaries = []
    for run in (a, b):
        summary = read_object(run / "summary.json", "summary.json (is the run finished?)")
        if not all(key in summary for key in ("rounds_to_target", "target_accuracy")):
            raise InputError(f"{run / 'summary.json'}: not a summary of fl.run (no rounds_to_target)")
        summaries.append(summary)
    ra, rb = (s["rounds_to_target"] for s in summaries)
    speed = f"{ra / rb:.2f}x" if ra and rb else "n/a (a run never reached the target)"
    text = (
        f"target accuracy {summaries[0]['target_accuracy']:g}: {a} needs {ra} rounds, {b} needs {rb}; "
        f"speed-up of the second over the first: {speed}"
    )
    worst = [s.get("worst_client") for s in summaries]
    if any(worst):
        said = [f"client {w['client']} at {w['accuracy']:.4f}" if w else "not evaluated" for w in worst]
        text += f"\nworst client (last per-client evaluation): {a}: {said[0]}; {b}: {said[1]}"
    return text


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m fl.run", description="Run one FL experiment from a TOML config.")
    add = parser.add_argument
    add("--config", type=Path, help="TOML config (see configs/); defaults apply to anything it leaves out")
    add("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value")
    add("--out", type=Path, help="run directory (default results/runs/<config name>)")
    add(
        "--resume", type=Path, metavar="RUN_DIR",
        help="continue the interrupted run in RUN_DIR; with --set train.rounds=N (that key alone), a finished or "
        "stopped run goes on to N rounds, equal to a run of N rounds from the start",
    )  # fmt: skip
    add(
        "--init-from", type=Path, metavar="CHECKPOINT",
        help="start from another run's checkpoint (same data, model, algorithm and local training, but train.lr and "
        "train.weight_decay may change from there on; e.g. its checkpoint_round49.pt from train.keep_round) instead "
        "of round 1",
    )  # fmt: skip
    add("--overwrite", action="store_true", help="replace an existing run directory's results")
    add("--device", choices=("auto", "cpu", "cuda"), help="shortcut for --set train.device=...")
    add(
        "--workers", type=int, metavar="N",
        help="shortcut for --set train.workers=N (0: the machine's cores, 1: none); allowed with --resume: the "
        "count changes the speed, never the numbers",
    )  # fmt: skip
    add("--compare", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), help="rounds to target and speed-up")
    add("--quiet", action="store_true", help="no progress bar (on a terminal), no line per round (elsewhere)")
    add(
        "--print-config", action="store_true",
        help="print the resolved config (TOML: every key, defaults included) of --config and --set (or of the run "
        "--resume names) and exit without running",
    )  # fmt: skip
    add(
        "--tensorboard", type=curves_folder, metavar="DIR",
        help="write TensorBoard event files of every round into DIR (shortcut for --set log.tensorboard=DIR; allowed "
        "with --resume; needs pip install 'shufflefl[tensorboard]')",
    )  # fmt: skip
    add(
        "--mlflow", type=curves_folder, metavar="DIR",
        help="write every round into the local MLflow tracking store DIR, one MLflow run per run folder (shortcut "
        "for --set log.mlflow=DIR; allowed with --resume; needs pip install 'shufflefl[mlflow]')",
    )  # fmt: skip
    add(
        "--accept-code-change", action="store_true",
        help="with --resume: continue a run that other code started (the change is recorded in provenance.json)",
    )  # fmt: skip
    return parser


def run_flags(args) -> list[str]:
    """The flags of ``args`` that start or continue a run (which ``--compare``, reading two finished runs, refuses)."""
    given = {
        "--config": args.config, "--set": args.set, "--out": args.out, "--resume": args.resume,
        "--init-from": args.init_from, "--overwrite": args.overwrite, "--device": args.device,
        "--workers": args.workers is not None, "--accept-code-change": args.accept_code_change,
        "--tensorboard": args.tensorboard, "--mlflow": args.mlflow, "--print-config": args.print_config,
    }  # fmt: skip
    return [flag for flag, value in given.items() if value]


def resume_in_place(run: Path | None, out: Path | None, overwrite: bool, accept_code_change: bool) -> None:
    """``--resume RUN`` continues RUN in RUN: refuse RUN itself a symbolic link (never written through), an
    ``--out`` elsewhere and ``--overwrite``, and ``--accept-code-change`` without ``--resume`` (fl.run, fl.flower)."""
    if run is None:
        if accept_code_change:
            raise InputError("--accept-code-change continues a run that other code started: it goes with --resume")
        return
    refuse_link(run, "run directory")
    if out is not None and out.resolve() != run.resolve():
        raise InputError(f"--resume continues the run in its own folder {run}; drop --out {out}")
    if overwrite:
        raise InputError("--overwrite starts a run anew, --resume continues one: use one of them")


def start_or_resume(args) -> tuple[Path, RunConfig | None]:
    """What ``fl.run ARGS`` (a start or a ``--resume``) checks before it takes the run folder's lock: the folder and,
    for a start, the config (its folder made: :func:`new_run_folder`); one line for what is refused."""
    overrides = list(args.set) + ([f"train.device={json.dumps(args.device)}"] if args.device else [])
    overrides += [f"train.workers={args.workers}"] if args.workers is not None else []
    overrides += [f"log.tensorboard={json.dumps(str(args.tensorboard))}"] if args.tensorboard else []
    overrides += [f"log.mlflow={json.dumps(str(args.mlflow))}"] if args.mlflow else []
    if args.init_from and args.resume:
        raise InputError("--init-from starts a new run; --resume continues one: use one of them")
    resume_in_place(args.resume, args.out, args.overwrite, args.accept_code_change)
    if args.resume:
        if args.config:
            raise InputError("--resume takes the run's own config; drop --config/--set")
        extension_rounds(args.set)  # a key other than train.rounds refused before the lock
        if not (args.resume / "config.json").is_file():
            raise InputError(f"{args.resume}: not a run directory (no config.json)")
        if args.mlflow:
            require_mlflow()
        return args.resume, None
    config = load_config(args.config, overrides)
    if config.log.tensorboard:
        require_tensorboard()  # before anything is written: one line naming the extra
    if config.log.mlflow:
        require_mlflow()
    out = args.out or Path("results/runs") / (args.config.stem if args.config else "default")
    if args.init_from:
        check_init_from(config, args.init_from)  # refused before the folder is made
    new_run_folder(out, args.overwrite, f"use --resume {out}, --overwrite, or another --out")
    return out, config


def locked_config(args, out: Path, config: RunConfig | None) -> RunConfig:
    """Under the folder's lock: a resumed run's own config (with what a resume may change: the device, the worker
    count, where the curves go, and ``train.rounds`` to more rounds, which :func:`extend` writes into its folder; a
    changed plug-in refused before it is imported), or a started run's written into ``config.json``."""
    if not args.resume:
        write_text_atomically(out / "config.json", json.dumps(config.to_dict(), indent=2))
        return config
    tree = read_object(out / "config.json", "config.json of the run")
    train = tree.setdefault("train", {})
    if not isinstance(train, dict):
        raise InputError(f"{out / 'config.json'}: its [train] is not a table")
    if args.device:  # what a resumed run may change: the device, the worker count
        train["device"] = args.device
    if args.tensorboard:  # where the curves go: no number changes
        tree.setdefault("log", {})["tensorboard"] = str(args.tensorboard)
    if args.mlflow:
        tree.setdefault("log", {})["mlflow"] = str(args.mlflow)
    if args.workers is not None:
        train["workers"] = args.workers
    recorded = {} if args.accept_code_change else provenance.recorded_plugins(out)
    with plugins.expecting(recorded):  # a changed plug-in is refused before it is imported
        config = from_dict(tree)
    rounds = extension_rounds(args.set)
    if rounds is not None and rounds < config.train.rounds:
        raise InputError(
            f"--set train.rounds={rounds}: the run in {out} has {config.train.rounds} rounds; a run is extended, "
            "never shortened"
        )
    if rounds is not None:
        config = config.extended(rounds)
    if config.log.tensorboard:
        require_tensorboard()
    if config.log.mlflow:
        require_mlflow()
    return config


def printed_config(args) -> str:
    """``--print-config``: the resolved config, as TOML, of ``--config`` and ``--set`` (and the flags that set a
    key: ``--device``, ``--workers``, ``--tensorboard``, ``--mlflow``), or of the run ``--resume`` names (with
    ``--set train.rounds=N``: as extended); nothing is run or written. What else would start, compare or write is
    refused in one line."""
    given = run_flags(args) + (["--compare"] if args.compare else [])
    refused = ("--compare", "--init-from", "--overwrite", "--out", "--accept-code-change")
    extra = [flag for flag in refused if flag in given]
    if extra:
        raise InputError(f"--print-config prints a config and runs nothing: drop {', '.join(extra)}")
    if not args.resume:
        overrides = list(args.set) + ([f"train.device={json.dumps(args.device)}"] if args.device else [])
        overrides += [f"train.workers={args.workers}"] if args.workers is not None else []
        overrides += [f"log.tensorboard={json.dumps(str(args.tensorboard))}"] if args.tensorboard else []
        overrides += [f"log.mlflow={json.dumps(str(args.mlflow))}"] if args.mlflow else []
        return load_config(args.config, overrides).to_toml()
    if args.config:
        raise InputError("--resume takes the run's own config; drop --config/--set")
    rounds = extension_rounds(args.set)
    config = read_run_config(args.resume)
    return (config if rounds is None else config.extended(max(rounds, config.train.rounds))).to_toml()


RUN_LOCK = ".running"  # the lock file fl.run holds in a run folder while it runs (it holds the runner's pid)


@guarded("fl.run")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.print_config:
        print(printed_config(args), end="")
        return 0
    if args.compare:
        if run_flags(args):
            raise InputError(f"--compare reads two finished runs and runs nothing: drop {', '.join(run_flags(args))}")
        print(compare(*args.compare))
        return 0
    out, config = start_or_resume(args)
    # one process per run folder: a second start or resume stops
    with locked(out / RUN_LOCK, busy=f"run directory {out}"):
        config = locked_config(args, out, config)
        summary = execute(
            config, out, resume=bool(args.resume), quiet=args.quiet, start_from=args.init_from,
            accept_code_change=args.accept_code_change,
        )  # fmt: skip
    acc, diverged = summary["final_test_accuracy"], summary["diverged_at_round"]
    if diverged is not None:  # a non-finite model has no accuracy: the run's result is that it diverged
        best = summary["best_test_accuracy"]
        before = "none measured" if best is None else round(best, 4)
        said = f"diverged at round {diverged}: no final test accuracy (best before it: {before})"
    else:
        said = f"final test accuracy {acc if acc is None else round(acc, 4)}"
    print(
        f"{out}: {summary['rounds']} rounds, {said}, rounds to {summary['target_accuracy']:g}: "
        f"{summary['rounds_to_target']}, lr {summary['lr']:g}, {summary['seconds']:.1f} s"
    )
    if summary["estimates_mean"]:
        print("estimates (mean over measurements): " + json.dumps(summary["estimates_mean"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
