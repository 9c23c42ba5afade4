"""What a synthetic-data *method* provides to the engine: hooks at named moments of a run, each a no-op here.

An :class:`~fl.algorithms.Algorithm` changes the update equations; a :class:`Method` changes what clients train on
and what they minimise, or what the server does after aggregating. The two compose: the engine calls both and
names neither. The hooks, and who uses them:

- :meth:`Method.prepare`, once before training, on the federation's index arrays (:class:`Split`): Fedssyn trains
  the generators and deals the shuffled synthetic pool; the centralised baselines merge the clients into one.
- :meth:`Method.before_round`, at the start of every round, before any client trains (:class:`ServerRound` with
  the round's participants): FMDS/HFMDs clients invert their synthetic sets and the server pools them.
- :meth:`Method.client_payload`, after ``before_round``: the server entries sent to every participant, which its
  client hooks see as ``c.state["server"]`` (default: all of them; DynaFed sends none).
- :meth:`Method.before_client`, per participating client before local training, returns a :class:`LocalTask`
  (or None: plain cross-entropy): FedCOG generates x̂ from the global and the client's previous local model.
- :meth:`LocalTask.loss`, every local step: the objective on the real batch plus the method's extra term or extra
  samples (FedCOG's KD on x̂; HFMDs' B synthetic + B real).
- :meth:`Method.after_client`, per participant after local training (FedCOG keeps its local model).
- :meth:`Method.after_aggregate`, on the server after aggregation (DynaFed fine-tunes on D_syn).
- :meth:`Method.report` and :meth:`Method.pictures`, at the end: numbers for summary.json and image grids (as
  data, drawn by the run's writer: DynaFed's D_syn, HFMDs' pool).
- :meth:`Method.communication`, numbers a participant sends or receives per round beyond the algorithm's; a
  cost that varies by round (HFMDs' pool) goes in the round's log as ``numbers_sent``, which the run adds to its
  communication.

In a round the engine calls ``before_round``, then ``before_client`` for every participant, trains them (one after
another, or all at once: :mod:`fl.batched`, when every participant's :class:`LocalTask` is a
:class:`BatchedTask` or None), then
``after_client`` for every participant, aggregates and calls ``after_aggregate``. Hooks of one client read and
write only that client's entries, so the order among clients does not matter.

Method state lives in the engine's state (``EngineState.method``: ``{"server": {...}, "clients": {i: {...}}}``,
tensors and numbers only), so the checkpoint carries it and ``--resume`` stays bit-identical. A restore puts every
tensor of it on the run's device (``fl.run``'s checkpoint; a Flower node's client entries on the node's), so a
hook keeps its state there too, or moves what it keeps elsewhere on purpose (FedCOG's local models and DynaFed's
trajectory stay on the CPU) before mixing it with the round's tensors. Hooks *replace* entries of these dicts and
never change a stored tensor in place: the engine hands them a copy of the two dicts, so a round cut short by
Ctrl-C leaves the previous state whole. A method that needs nothing keeps it empty: no per-client storage and no
extra work in the local step.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np
import torch
from tqdm import tqdm

from theory.errors import InputError

if TYPE_CHECKING:
    from fl.clients import ClientSet, LocalConfig
    from fl.data import Dataset
    from fl.flat import FlatModel


@dataclass
class Split:
    """The federation before preprocessing: per client, index arrays into the dataset's training pool (``train``:
    D_i after any real-data shuffle, ``val``: the local validation split, ``original``: D_i), and optionally the
    per-client synthetic sets (uint8 x, labels) with how they reach the clients ("shuffle" or "own", see
    :func:`fl.federation.assemble`)."""

    train: list[np.ndarray]
    val: list[np.ndarray]
    original: list[np.ndarray]
    synthetic: list[tuple[np.ndarray, np.ndarray]] | None = None
    synthetic_mode: str = "shuffle"


@dataclass(frozen=True)
class Picture:
    """An image grid a method asks the run's writer to draw into ``file`` (in the run folder): ``images`` (n, C, H,
    W) uint8 with class ``labels`` (n,), or, with ``soft``, float images (any range) with label probabilities
    (n, classes)."""

    file: str
    images: np.ndarray
    labels: np.ndarray
    title: str
    soft: bool = False


@dataclass(frozen=True)
class Setup:
    """What :meth:`Method.prepare` sees: the dataset, the run seed, the real-data shuffle fraction p, the run's
    device (where a method may train its own networks)."""

    dataset: Dataset
    seed: int
    p: float
    device: str = "cpu"


@dataclass
class ClientRound:
    """What the per-client hooks see in round t: client i, the server model x (flat), the model to evaluate
    parameter vectors with, the clients' data, the local-training settings, the method state (mutable), a
    torch.Generator seeded from (seed, t, i) for the method's own draws (never the batch order's), and the round's
    log (shared by the round's clients; lands in the metrics row as ``method``)."""

    t: int
    i: int
    x: torch.Tensor
    flat: FlatModel
    data: ClientSet
    local: LocalConfig
    state: dict
    seed: int
    log: dict = dataclasses.field(default_factory=dict)
    task: LocalTask | None = None  # what before_client returned, for after_client

    @functools.cached_property
    def generator(self) -> torch.Generator:
        """Made on first use: a method that draws nothing pays nothing."""
        return torch.Generator().manual_seed(self.seed)


# The folder a server hook may keep the progress of long work in (DynaFed's synthesis), so that an interrupted run
# continues it instead of starting over: ``fl.run`` sets it to the run folder; None (the default: tests, Flower)
# keeps nothing.
WORK_FOLDER: contextvars.ContextVar[Path | None] = contextvars.ContextVar("work_folder", default=None)


@dataclass
class ServerRound:
    """What the round hooks see in round t: the server model x (before the round in :meth:`Method.before_round`,
    aggregated in :meth:`Method.after_aggregate`), the model to evaluate parameter vectors with, the clients' data
    (for shapes and classes; a method must not read client data on the server unless its paper does: work done
    *on* the clients before the round, such as HFMDs' inversion, reads only each client's own), the method state
    (mutable), the round's log, a torch.Generator seeded from (seed, t) for the method's own draws, made on first
    use, and the round's participants."""

    t: int
    x: torch.Tensor
    flat: FlatModel
    data: ClientSet
    state: dict
    seed: int
    log: dict = dataclasses.field(default_factory=dict)
    clients: tuple[int, ...] = ()

    @functools.cached_property
    def generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed)


class CyclicBatches:
    """Index batches of ``batch_size`` into n items, cycling through fresh permutations drawn from ``generator``
    (the last batch of a permutation may be smaller)."""

    def __init__(self, n: int, batch_size: int, generator: torch.Generator, device: torch.device | str) -> None:
        self.n, self.batch_size, self.generator, self.device = n, batch_size, generator, device
        self._queue: list[torch.Tensor] = []

    def next(self) -> torch.Tensor:
        if not self._queue:
            order = torch.randperm(self.n, generator=self.generator).to(self.device)
            self._queue = list(order.split(self.batch_size))
        return self._queue.pop(0)


class LocalTask(Protocol):
    """One client's objective for one round: ``loss(model, x, y)`` on a real batch (x, y), called every step."""

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The scalar loss whose gradient the local step takes: ``model`` at the current local weights, (x, y) the
        step's real batch (already on the model's device)."""
        ...


@dataclasses.dataclass
class Extra:
    """The extra samples of a :class:`BatchedTask`'s K steps: step s adds the samples ``x[index[s]]`` (labels
    ``y[index[s]]``, ``mask[s]``: 1 for a sample, 0 for padding) to the real batch, and its loss is
    ``weights[0]`` · mean CE(real batch) + ``weights[1]`` · mean CE(extra samples). ``share``: report, at the first
    step, how much of the gradient the extra term contributes."""

    x: torch.Tensor  # (n, *sample shape): the samples the batches index
    y: torch.Tensor  # (n,)
    index: torch.Tensor  # (K, b)
    mask: torch.Tensor  # (K, b)
    weights: tuple[float, float]
    share: bool = False


class BatchedTask(LocalTask, Protocol):
    """A :class:`LocalTask` that the batched backend (:mod:`fl.batched`) trains with the other clients in one
    computation, to float rounding of its ``loss``. Its objective is cross-entropy on the real batch, optionally
    mixed with extra samples (:class:`Extra`), and it may collect the real samples' features (a model with
    ``features`` and ``classifier``) summed per class under the evolving local model.

    - ``extra_width``: b, the extra samples a step (0: none); ``feature_classes``: the classes to sum features
      over (0: none). Tasks of equal (b, features wanted) share a vmapped call.
    - ``extra(K)``: the K steps' extra samples, drawn as ``loss`` would draw them, or None.
    - ``take(sums, counts, share)``: after training, the per-class feature sums (C, d) and counts (C,) (None
      when not wanted or the client took no step) and ``{"pool_share", "cosine"}`` of the first step (or None)."""

    extra_width: int
    feature_classes: int

    def extra(self, steps: int) -> Extra | None:
        """The extra samples of the round's ``steps`` local steps (:class:`Extra`), drawn as :meth:`loss` would
        draw them, or None (no extra samples)."""
        ...

    def take(self, sums: torch.Tensor | None, counts: torch.Tensor | None, share: dict | None) -> None:
        """After training: the per-class feature sums (C, d) and counts (C,) under the evolving local model (None
        when not wanted or the client took no step), and the first step's ``{"pool_share", "cosine"}`` (or None)."""
        ...


@dataclass(frozen=True)
class Method:
    """No method: every client trains on its own data with cross-entropy, the server only aggregates."""

    name: ClassVar[str] = "none"
    # Why the method cannot run with its clients on other machines (fl.flower), or "" when it can: it can when
    # client work happens only in prepare_client and the per-client hooks, reading only that client's data and
    # method state, and the server's hooks read no client data.
    not_distributed: ClassVar[str] = ""
    # The entries of a client's own state (``c.state["clients"][c.i]``) that the server hooks read: they travel
    # up every round the client takes part in (on Flower too), and the numbers in them are added to the round's
    # communication (:func:`numbers_sent_up`). Entries not named stay on the client.
    client_sends: ClassVar[tuple[str, ...]] = ()

    def check(self) -> Method:
        """Raise :class:`~theory.errors.InputError` (naming the ``method.KEY``) for an out-of-range value."""
        return self

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        """Once before training: the federation the run uses, and what to report about building it. By default
        :meth:`prepare_client` on every client, then :meth:`prepare_server` on what they sent."""
        start, clients = time.perf_counter(), range(len(split.train))
        quiet = True if type(self).prepare_client is Method.prepare_client else None  # a bar only for real work
        bar = tqdm(clients, "clients prepare", unit="client", leave=False, disable=quiet)
        sent = [self.prepare_client(setup, split, i) for i in bar]
        return self.prepare_server(setup, split, sent, time.perf_counter() - start)

    def prepare_client(self, setup: Setup, split: Split, i: int) -> dict | None:
        """Client i's share of :meth:`prepare`, computed on client i from its own D_i (``split.original[i]``)
        alone: what it sends the server once (``{"x": uint8 array, "y": labels, "info": JSON-able dict}``: a
        synthetic set), or None (nothing)."""
        return None

    def missing(self, setup: Setup, split: Split) -> list[int]:
        """The clients whose :meth:`prepare_client` has work to do on this machine that a cache could have spared
        (training a generator): none by default. ``python -m figures`` asks before it runs an arm whose data must
        come from elsewhere (a GPU lease's DDPM sets)."""
        return []

    def prepare_server(self, setup: Setup, split: Split, sent: list, seconds: float) -> tuple[Split, dict]:
        """The server's share of :meth:`prepare`: the federation from what the clients sent (``seconds``: the
        wall time their share took) and what to report."""
        return split, {}

    def before_round(self, s: ServerRound) -> None:
        """At the start of round s.t, before any client trains (s.x: the server model the clients receive)."""

    def client_payload(self, state: dict) -> dict:
        """What the server sends every participant of the round, after :meth:`before_round`: the server entries
        its client hooks read, as ``c.state["server"]`` (tensors and numbers). Default: every server entry. Every
        backend delivers exactly this and nothing else (``fl.run`` in one process or worker processes, the batched
        backend, a Flower node), so a client hook never reads what a node would not have; a client hook writes only
        its own ``c.state["clients"][c.i]``. The numbers a payload costs are the method's to count
        (:meth:`communication`, or ``numbers_sent`` in the round's log)."""
        return dict(state.get("server", {}))

    def before_client(self, c: ClientRound) -> LocalTask | None:
        """Per participating client, before local training: its objective for the round (None: cross-entropy)."""
        return None

    def after_client(self, c: ClientRound, y: torch.Tensor) -> None:
        """Per participating client, after local training ended at the local model y (``c.task``: its objective)."""

    def after_aggregate(self, s: ServerRound) -> torch.Tensor:
        """On the server after aggregation in round s.t: the server model the round ends with."""
        return s.x

    def communication(self, n_params: int) -> int:
        """Numbers sent per participating client per round beyond the algorithm's (both directions)."""
        return 0

    def real_weight(self, i: int, data: ClientSet, state: dict) -> float:
        """The weight of client i's real-data loss in its objective (the estimators scale ∇f_i by it)."""
        return 1.0

    def synthetic_weight(self, state: dict) -> float:
        """The weight of the loss on :meth:`synthetic_set` in every client's objective, when each local step mixes
        in a batch of it (HFMDs: 1 − α); 0: the set is not trained on (the estimators add its noise to σ̂²)."""
        return 0.0

    def first_stateful_round(self) -> int | None:
        """The first round whose hooks store method state (None: never). A run of this method can start from
        another run's state only up to that round (``fl.run --init-from``): the other run stored none."""
        return None

    def shares_state_with(self, other: Method, next_round: int) -> bool:
        """Whether the state ``other`` (the same method with other settings) kept before ``next_round`` is the state
        this one would have kept (``fl.run --init-from`` then keeps it). Default: never."""
        return False

    def synthetic_set(self, state: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A synthetic set held outside the clients' data (inputs, label probabilities), for the estimators' δ²."""
        return None

    def report(self, info: dict, state: dict) -> dict:
        """At the end of a run: entries for summary.json (from what :meth:`prepare` reported and the final method
        state)."""
        return {}

    def pictures(self, state: dict) -> list[Picture]:
        """At the end of a run: what the method wants drawn (its synthetic set), as data; the run's writer draws
        each into the run folder (a method never draws)."""
        return []


def numbers_sent_up(method: Method, clients: dict, participants: list[int]) -> int:
    """The numbers the participants' :attr:`Method.client_sends` entries hold (a tensor or array: its elements; a
    number: one): what travels up beyond the algorithm's in one round."""
    total = 0
    for i in participants:
        entries = clients.get(i, {})
        for key in method.client_sends:
            value = entries.get(key)
            total += 0 if value is None else int(value.numel() if hasattr(value, "numel") else np.size(value))
    return total


def require(ok: bool, key: str, message: str) -> None:
    """A method's config check: InputError naming ``method.KEY`` when ``ok`` is false."""
    if not ok:
        raise InputError(f"config method.{key}: {message}")


def new_state() -> dict:
    """An empty method state."""
    return {"server": {}, "clients": {}}
