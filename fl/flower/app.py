"""Our algorithms as a Flower app (Flower's Message API: ``flwr.app``, ``flwr.serverapp``, ``flwr.clientapp``).

One config, three ways to run it: ``python -m fl.run`` (one process), ``python -m fl.flower`` (Flower's simulation
engine), or a real Flower deployment (SuperLink + SuperNodes, ``flwr run``; see docs/guides/runs.md). Nothing of an
algorithm's math is written here:

- the server (:class:`FlowerExperiment`) is :class:`fl.experiment.Experiment` with its round replaced: it selects the
  clients as ``fl.run`` does (:func:`fl.engine.select_clients`), sends each its round (server model x, the server
  state the algorithm's correction reads, round and step size) as a Flower message, and aggregates the replies
  with the algorithm's own :meth:`~fl.algorithms.Algorithm.server_update`; evaluation, metrics, checkpoints and
  the summary are ``fl.run``'s (:func:`fl.loop.execute`);
- the client (:func:`train`) runs :func:`fl.engine.client_work` (the method's client hooks around local training
  with the algorithm's correction, the same seeded batch order) and :meth:`~fl.algorithms.Algorithm.client_update`
  on its partition of the same federation (node config ``partition-id`` = client index of :mod:`fl.federation`),
  keeps its algorithm state (SCAFFOLD's c_i, FedDyn's g_i) in the node's ``Context.state``, as a real device
  would, and replies with its local model y_i and the change of its state (the server's update reads client
  states only as new − old).

What travels per client and round is counted from the messages' arrays and checked against
:meth:`~fl.algorithms.Algorithm.communication` (x and the broadcast server state down, y_i and Δ state up;
FedPVR's control variates on the head only); a mismatch stops the run.

Methods run split as on real machines (:attr:`fl.methods.Method.not_distributed` names those that cannot yet):

- a method's client preparation (:meth:`~fl.methods.Method.prepare_client`; Fedssyn: train the generator on
  ρ·n_i of D_i, sample ñ images) runs on each node on its own data, ``train.prepare``; the server pools what they
  sent (:meth:`~fl.methods.Method.prepare_server`), deals it as ``fl.run`` does, and sends each client its share
  once (``train.deal``; kept in the node's ``Context.state``); the numbers sent up and dealt are checked against
  ``fl.run``'s ``synthetic_numbers_sent_once``;
- the per-client hooks (FedCOG's generation and distillation) run on the node around its local training, the
  client's method state (FedCOG's previous local model) kept in ``Context.state``, the hooks' round log sent back
  and merged in participant order (lists extend);
- the server hooks (DynaFed's trajectory, synthesis and fine-tuning) run on the server.

A client trains on its own samples only (:func:`own_data`: its partition, then what it was dealt, in the server's
order, so the seeded batches are ``fl.run``'s). Each reply also carries the client's whole new state (its algorithm
rows and its method entries: bookkeeping, not the algorithm's communication, so not counted), which the server keeps
where ``fl.run`` keeps it (``EngineState.clients`` and ``.method["clients"]``), so the checkpoint holds it. A server
hands each node its kept state the first time it selects it (:meth:`FlowerExperiment.restore`): a resumed run (of
``fl.flower`` or of ``fl.run``) continues SCAFFOLD's c_i and FedCOG's local models as ``fl.run --resume`` does,
restored onto the node's device as a checkpoint restores the server's.

In the simulation engine the ServerApp runs in a thread of its own (:class:`ServerRun`); Ctrl-C reaches the main
thread, which sets :attr:`ServerRun.stop`: the server stops waiting for its clients (:meth:`FlowerExperiment.receive`
raises KeyboardInterrupt in its thread), so :func:`fl.loop.execute` saves the checkpoint of the last whole round.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fl.algorithms import Context as AlgorithmContext
from fl.clients import carried_rows
from fl.config import RunConfig, build_algorithm, build_method, from_dict
from fl.engine import (
    ClientSet,
    EngineState,
    client_seed,
    client_work,
    client_zeros,
    close_round,
    configure_round,
    merge_log,
)
from fl.experiment import Experiment, resolve_device
from fl.methods.base import ClientRound, Method, Setup, Split
from theory.errors import InputError


def broadcast_keys(algorithm) -> list[str]:
    """The server state a client's correction reads (SCAFFOLD's and FedPVR's c)."""
    return [k for k in algorithm.server_keys if k in algorithm.client_keys]


def pack(tensors: dict[str, torch.Tensor], mask: torch.Tensor | None) -> ArrayRecord:
    """Vectors as an ArrayRecord, restricted to ``mask`` where given (what is sent)."""
    return ArrayRecord(
        torch_state_dict={k: (v if mask is None else v[mask]).detach().cpu() for k, v in tensors.items()}
    )


def unpack(record: ArrayRecord, like: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The vectors of ``record`` on ``like``'s device and dtype, expanded from ``mask`` (zeros elsewhere)."""
    out = {}
    for k, v in record.to_torch_state_dict().items():
        v = v.to(like.device, like.dtype)
        if mask is not None:
            full = torch.zeros_like(like)
            full[mask] = v
            v = full
        out[k] = v
    return out


def numbers(record: ArrayRecord, key: str | None = None) -> int:
    """How many numbers ``record`` holds (only its array ``key`` where given)."""
    return sum(int(np.prod(array.shape)) for k, array in record.items() if key is None or k == key)


def state_mask(exp: Experiment) -> torch.Tensor | None:
    """The parameters whose control variates travel (FedPVR: the head), or None for all."""
    mask_of = getattr(exp.algorithm, "mask", None)
    if mask_of is None:
        return None
    x = exp.flat.params
    mask = mask_of(AlgorithmContext(x, {}, {}, exp.flat.head_mask))
    return None if mask is None else mask.bool()


def check_supported(config: RunConfig) -> None:
    method = build_method(config.method)
    if method.not_distributed:
        raise InputError(
            f"method.name = {config.method['name']!r} does not run through the Flower app: {method.not_distributed}; "
            "use python -m fl.run"
        )
    algorithm = build_algorithm(config.algorithm)
    if algorithm.not_distributed:
        raise InputError(
            f"algorithm.name = {config.algorithm['name']!r} does not run through the Flower app: "
            f"{algorithm.not_distributed}; use python -m fl.run"
        )
    if len(config.train.lr) != 1:
        raise InputError("train.lr: the Flower app takes one step size, not a grid")


def has_client_preparation(method: Method) -> bool:
    return type(method).prepare_client is not Method.prepare_client


def config_record(config: RunConfig, **values) -> ConfigRecord:
    return ConfigRecord({"config": json.dumps(config.to_dict()), **values})


class FlowerExperiment(Experiment):
    """``fl.run``'s experiment whose clients are Flower nodes (one per client partition) reached through ``grid``:
    the method's client preparation (Fedssyn's generators) runs on the nodes, the server deals what the method
    dealt, and every round goes to the nodes."""

    def __init__(
        self, config: RunConfig, grid: Grid, timeout: float | None = None, stop: threading.Event | None = None
    ) -> None:
        check_supported(config)
        self.grid, self.timeout, self.stop = grid, timeout, stop or threading.Event()
        self.nodes = self.discover(config.data.clients)
        self.partition_of = {node: i for i, node in self.nodes.items()}
        super().__init__(config)
        self.n_workers = 1  # the nodes are the parallelism: no local worker processes
        self.restored: set[int] = set()  # the clients whose node holds its kept state (handed in this process)
        self.deal()

    def exchange(self, contents: dict[int, RecordDict], kind: str, what: str) -> dict[int, RecordDict]:
        """Send ``contents[i]`` to client i's node as a ``kind`` message; the replies by client (a failed client
        stops the run)."""
        messages = [Message(c, self.nodes[i], kind, group_id=what) for i, c in contents.items()]
        replies = {}
        for reply in self.receive(messages):
            if reply.has_error():
                raise InputError(f"Flower {what}: client {self.partition_of[reply.metadata.src_node_id]} failed: "
                                 f"{reply.error.reason}")  # fmt: skip
            replies[self.partition_of[reply.metadata.src_node_id]] = reply.content
        if sorted(replies) != sorted(contents):
            raise InputError(f"Flower {what}: replies from clients {sorted(replies)}, sent to {sorted(contents)}")
        return replies

    def receive(self, messages: list[Message]) -> list[Message]:
        """Flower's ``grid.send_and_receive`` (push, then pull the replies until all came or ``timeout`` passed) that
        gives up once :attr:`stop` is set: KeyboardInterrupt in the server's thread, where :func:`fl.loop.execute`
        saves the checkpoint of the last whole round."""
        waiting = set(self.grid.push_messages(messages))
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        poll = getattr(self.grid, "pull_interval", 1.0)  # the simulation's grid pulls every 0.1 s
        replies: list[Message] = []
        while waiting:
            if self.stop.is_set():
                raise KeyboardInterrupt
            arrived = list(self.grid.pull_messages(waiting))
            replies += arrived
            waiting -= {reply.metadata.reply_to_message_id for reply in arrived}
            if waiting and deadline is not None and time.monotonic() > deadline:
                break
            if waiting:
                self.stop.wait(poll)
        return replies

    def discover(self, n_clients: int, wait: float = 120.0) -> dict[int, int]:
        """partition-id -> node id of every client, asking each connected node for its partition."""
        deadline, nodes = time.monotonic() + wait, []
        while len(nodes) < n_clients and time.monotonic() < deadline:
            if self.stop.is_set():
                raise KeyboardInterrupt
            nodes = list(self.grid.get_node_ids())
            self.stop.wait(0.2)
        if len(nodes) < n_clients:
            raise InputError(f"{len(nodes)} Flower nodes connected, the config has data.clients = {n_clients}")
        ask = [Message(RecordDict({}), n, "query", group_id="partition") for n in nodes]
        found = {}
        for reply in self.receive(ask):
            if reply.has_error():
                raise InputError(f"Flower node {reply.metadata.src_node_id}: {reply.error.reason}")
            found[int(reply.content["partition"]["partition-id"])] = reply.metadata.src_node_id
        if sorted(found) != list(range(n_clients)):
            raise InputError(f"Flower nodes hold partitions {sorted(found)}, expected 0..{n_clients - 1}")
        return found

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        """The method's client preparation on every node (``train.prepare``), then the server's share."""
        if not has_client_preparation(self.method):
            return self.method.prepare(setup, split)
        tick = time.perf_counter()
        ask = RecordDict({"cfg": config_record(self.config)})
        replies = self.exchange(dict.fromkeys(range(len(split.train)), ask), "train.prepare", "prepare")
        sent = []
        for i in range(len(split.train)):
            arrays = {k: v.numpy() for k, v in replies[i]["set"].to_torch_state_dict().items()}
            sent.append(arrays | {"info": json.loads(str(replies[i]["info"]["info"]))})
        self.uploaded = sum(numbers(replies[i]["set"], "x") for i in replies)
        return self.method.prepare_server(setup, split, sent, time.perf_counter() - tick)

    def deal(self) -> None:
        """Send every client the samples of its training set it does not hold (the synthetic share the method
        dealt it), once; what travels is checked against the synthetic numbers ``fl.run`` counts."""
        if not self.synthetic:
            return
        n_real = len(self.data.y) - sum(len(s[1]) for s in self.synthetic)
        shares = {}
        for i, index in enumerate(self.data.train):
            mine = index[index >= n_real]
            x, y = self.data.x[mine].cpu(), self.data.y[mine].cpu()
            shares[i] = RecordDict({"dealt": ArrayRecord(torch_state_dict={"x": x, "y": y})})
        self.exchange(shares, "train.deal", "deal")
        dealt = sum(numbers(share["dealt"], "x") for share in shares.values())
        if not self.uploaded == dealt == self.synthetic_numbers:
            raise InputError(
                f"Flower: {self.uploaded} synthetic numbers sent up, {dealt} dealt, fl.run counts "
                f"{self.synthetic_numbers}"
            )

    def compute_round(self, state: EngineState):
        """:func:`fl.engine.compute_round` with the participants' work on their nodes: the method's server hooks
        here, its client hooks, local training and ``client_update`` on the nodes."""
        seed, config = self.config.train.seed, self.config
        rnd = configure_round(state, self.flat, self.data, self.local, seed, self.method)  # fl.engine's, its seeds
        t, selected, method_state, clock, log = rnd.t, rnd.selected, rnd.method_state, rnd.clock, rnd.log
        mask = state_mask(self)
        down = {
            "x": pack({"x": state.x}, None),
            "server": pack({k: state.server[k] for k in broadcast_keys(self.algorithm)}, mask),
        }
        cfg = config_record(config, round=t, lr=float(state.lr))
        payload = pack_entries(self.method.client_payload(method_state))  # what the clients' hooks read (the method's)
        down_all = {**down, "payload_arrays": payload["arrays"], "payload_values": payload["values"], "cfg": cfg}
        contents = {i: RecordDict(down_all | self.restore(state, i)) for i in selected}
        replies = rnd.timed("seconds_local", self.exchange, contents, "train", f"round {t}")
        self.restored.update(selected)
        for i in selected:  # the clients' method logs, in participant order (lists extend, other values replace)
            clock["seconds_method"] += float(replies[i]["metrics"]["seconds_method"])
            merge_log(log, json.loads(str(replies[i]["log"]["log"])))
        ys = torch.stack([unpack(replies[i]["y"], state.x, None)["y"] for i in selected])
        shared = broadcast_keys(self.algorithm)  # the client states the server's update reads (as new - old)
        deltas = {
            k: torch.stack([unpack(replies[i]["delta"], state.x, mask)[k] for i in selected])
            if k in shared
            else torch.zeros(len(selected), state.x.numel(), dtype=state.x.dtype, device=state.x.device)
            for k in self.algorithm.client_keys
        }
        sent = sum(numbers(down["x"]) + numbers(down["server"]) for _ in selected)
        sent += sum(numbers(replies[i]["y"]) + numbers(replies[i]["delta"]) for i in selected)
        if sent != self.communication(len(selected)):
            raise InputError(
                f"Flower round {t}: {sent} numbers travelled, {self.algorithm.name}.communication counts "
                f"{self.communication(len(selected))}"
            )
        x, server = self.algorithm.server_update(state.x, state.server, ys, rnd.weights, deltas, self.data.n_clients)
        for i in selected:  # the clients' method entries, before the server's hook reads them (as in fl.run)
            if "state_arrays" in replies[i]:
                method_state.setdefault("clients", {})[i] = unpack_entries(
                    RecordDict({"arrays": replies[i]["state_arrays"], "values": replies[i]["state_values"]}), "cpu"
                )  # fmt: skip
        backend = {"backend": "flower"}
        new, record = close_round(rnd, state, x, server, self.flat, self.data, seed, self.method, backend)
        rows = {i: unpack(replies[i]["state"], state.x, None) for i in selected}  # the clients' new states, kept
        stack = {k: torch.stack([rows[i][k] for i in selected]) for k in state.clients if k in rows[selected[0]]}
        return new, record, (np.array(selected), stack)

    def restore(self, state: EngineState, i: int) -> dict:
        """What client i's node is handed with its first round in this process: its kept state (its rows of
        ``state.clients``, its method entries, none: empty), which replaces whatever the node holds. A fresh run's are
        zeros, as a node starts; a resumed run's are the checkpoint's. Nothing once handed."""
        if i in self.restored:
            return {}
        rows = {k: v[i] for k, v in state.clients.items()}
        handed = {"restore": pack(rows, None)}
        entries = state.method.get("clients", {}).get(i)
        if entries is not None:
            packed = pack_entries(entries)
            handed |= {"restore_arrays": packed["arrays"], "restore_values": packed["values"]}
        return handed


class NodeExperiment(Experiment):
    """A node's copy of the federation: its partition of the same split; the method's preparation waits for the
    server's ``train.prepare`` (:meth:`fl.methods.Method.prepare_client` on this client's data alone)."""

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        self.setup, self.split = setup, split
        return split, {}


@functools.lru_cache(maxsize=4)
def client_experiment(config_json: str) -> NodeExperiment:
    """The client side's copy of the federation (built once per process and config). A client process is a
    trainer: on the CPU it trains with one intra-op thread, as fl.run's trainers do
    (:func:`fl.experiment.trainer_threads`), so its numbers do not depend on the node's core count."""
    config = from_dict(json.loads(config_json))
    if resolve_device(config.train.device).type == "cpu":
        torch.set_num_threads(1)
    return NodeExperiment(config)


def own_data(exp: Experiment, i: int, dealt: ArrayRecord | None) -> ClientSet:
    """Client i's training data alone: its samples of the federation, then what the server dealt it, in the order
    of the server's training set (so the seeded batches pick the same samples as in ``fl.run``)."""
    data = exp.data
    index = data.train[i]
    x, y = data.x[index], data.y[index]
    if dealt is not None:
        extra = dealt.to_torch_state_dict()
        x, y = torch.cat([x, extra["x"].to(x.device, x.dtype)]), torch.cat([y, extra["y"].to(y.device, y.dtype)])
    train = [index[:0]] * data.n_clients
    train[i] = torch.arange(len(y), device=index.device)
    empty = [index[:0]] * data.n_clients
    own = list(empty)  # only its count is read (fl.clients.client_budget): client i's D_i
    own[i] = torch.arange(len(data.original[i]), device=index.device)
    return ClientSet(x, y, train, empty, own, empty, data.test_x[:0], data.test_y[:0], data.n_classes)


def pack_entries(entries: dict) -> RecordDict:
    """Method entries (tensors and JSON values) as a RecordDict: ``arrays`` and ``values``."""
    tensors = {k: v for k, v in entries.items() if isinstance(v, torch.Tensor)}
    others = {k: v for k, v in entries.items() if k not in tensors}
    return RecordDict({
        "arrays": ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in tensors.items()}),
        "values": ConfigRecord({"json": json.dumps(others)}),
    })  # fmt: skip


def unpack_entries(record: RecordDict, device: torch.device | str) -> dict:
    """:func:`pack_entries`' entries back, their tensors on ``device`` in their own dtypes."""
    values = json.loads(str(record["values"]["json"]))
    return {k: v.to(device) for k, v in record["arrays"].to_torch_state_dict().items()} | values


def save_entries(context: Context, entries: dict) -> None:
    """A method's per-client state (tensors and JSON values) into the node's ``Context.state``."""
    packed = pack_entries(entries)
    context.state["method"], context.state["method_values"] = packed["arrays"], packed["values"]


def load_entries(context: Context, device: torch.device | str) -> dict | None:
    """The method's per-client state kept in ``context`` (None: none yet), its tensors on ``device`` (the node's run
    device, where a checkpoint would restore them: see :mod:`fl.methods.base`)."""
    if "method" not in context.state:
        return None
    return unpack_entries(RecordDict({"arrays": context.state["method"], "values": context.state["method_values"]}),
                          device)  # fmt: skip


client_app = ClientApp()


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """The node's client index (partition-id) for the server's map of nodes."""
    partition = ConfigRecord({"partition-id": int(context.node_config["partition-id"])})
    return Message(RecordDict({"partition": partition}), reply_to=msg)


@client_app.train("prepare")
def prepare(msg: Message, context: Context) -> Message:
    """The method's preparation on this client's data (Fedssyn: train the generator, sample ñ images): sent once."""
    exp = client_experiment(str(msg.content["cfg"]["config"]))
    sent = exp.method.prepare_client(exp.setup, exp.split, int(context.node_config["partition-id"]))
    arrays = ArrayRecord(torch_state_dict={k: torch.as_tensor(sent[k]) for k in ("x", "y")})
    info = ConfigRecord({"info": json.dumps(sent["info"])})
    return Message(RecordDict({"set": arrays, "info": info}), reply_to=msg)


@client_app.train("deal")
def deal(msg: Message, context: Context) -> Message:
    """Keep what the server dealt this client (Fedssyn's D̃_si) for every later round."""
    context.state["dealt"] = msg.content["dealt"]
    return Message(RecordDict({}), reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of client i (:func:`fl.engine.train_client` between the method's client hooks), its algorithm and
    method state kept in ``context``."""
    cfg = msg.content["cfg"]
    exp = client_experiment(str(cfg["config"]))
    i, t, lr = int(context.node_config["partition-id"]), int(cfg["round"]), float(cfg["lr"])
    seed = exp.config.train.seed
    data = own_data(exp, i, context.state.get("dealt"))
    mask = state_mask(exp)
    x = unpack(msg.content["x"], exp.flat.params, None)["x"]
    server = {k: torch.zeros_like(x) for k in exp.algorithm.server_keys}
    server |= unpack(msg.content["server"], x, mask)
    if "restore" in msg.content:  # the server's kept state of this client (a resumed run's from its checkpoint)
        context.state["client"] = msg.content["restore"]
        context.state.pop("method", None)
        context.state.pop("method_values", None)
        if "restore_arrays" in msg.content:
            context.state["method"] = msg.content["restore_arrays"]
            context.state["method_values"] = msg.content["restore_values"]
    keys = exp.algorithm.client_keys + carried_rows(exp.local)
    zeros = {k: v[0] for k, v in client_zeros(keys, 1, x).items()}  # this client's rows
    own = unpack(context.state["client"], x, None) if "client" in context.state else zeros
    ctx = AlgorithmContext(x, server, own, exp.flat.head_mask)
    entries = load_entries(context, x.device)
    sent = RecordDict({"arrays": msg.content["payload_arrays"], "values": msg.content["payload_values"]})
    method_state = {"server": unpack_entries(sent, x.device), "clients": {} if entries is None else {i: entries}}
    log: dict = {}
    hook = ClientRound(t, i, x, exp.flat, data, exp.local, method_state, client_seed(seed, t, i, 1), log)
    y, steps, seconds_method = client_work(exp.flat, exp.algorithm, data, exp.local, exp.method, hook, ctx, lr, seed)
    kept = {}  # the client's whole new state, for the server's copy (the checkpoint's): not counted as traffic
    if i in method_state["clients"]:
        save_entries(context, method_state["clients"][i])
        kept = {"state_arrays": context.state["method"], "state_values": context.state["method_values"]}
    new = exp.algorithm.client_update(y, ctx, steps, lr) | {k: ctx.client[k] for k in carried_rows(exp.local)}
    if new:
        context.state["client"] = pack(new, None)
    content = RecordDict(
        {
            "y": pack({"y": y}, None),
            "delta": pack({k: new[k] - own[k] for k in broadcast_keys(exp.algorithm)}, mask),
            "metrics": MetricRecord({"partition-id": i, "steps": steps, "seconds_method": seconds_method}),
            "log": ConfigRecord({"log": json.dumps(log)}),
            "state": pack(new, None),
            **kept,
        }
    )
    return Message(content, reply_to=msg)


class ServerRun:
    """One simulated run's ServerApp (:meth:`app`: ``fl.loop.execute`` of ``config`` into the run folder ``out`` with a
    :class:`FlowerExperiment`) and what the main thread shares with the thread Flower runs it in: :attr:`stop` (set
    on Ctrl-C: the server stops waiting for its clients and saves its checkpoint), :attr:`started` and
    :attr:`finished` (set when the app's main began, and when it returned or raised) and :attr:`error` (what it
    raised, None if nothing)."""

    def __init__(
        self, config: RunConfig, out: Path, resume: bool = False, quiet: bool = True, accept_code_change: bool = False
    ) -> None:
        self.config, self.out, self.resume, self.quiet = config, Path(out), resume, quiet
        self.accept_code_change = accept_code_change
        self.stop, self.started, self.finished = threading.Event(), threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def app(self) -> ServerApp:
        app = ServerApp()

        @app.main()
        def main(grid: Grid, context: Context) -> None:
            from fl.experiment import trainer_threads
            from fl.loop import execute

            self.started.set()
            try:
                with trainer_threads(self.config):  # the server's own training (a method's) and evaluation
                    exp = FlowerExperiment(self.config, grid, stop=self.stop)
                    execute(
                        self.config, self.out, resume=self.resume, quiet=self.quiet, exp=exp,
                        accept_code_change=self.accept_code_change,
                    )  # fmt: skip
            except KeyboardInterrupt:  # stopped before the first round (execute turns a later one into an InputError)
                self.error = InputError("interrupted while the Flower server was starting, before its first round")
                raise self.error from None
            except BaseException as error:
                self.error = error
                raise
            finally:
                self.finished.set()

        return app

    def stop_and_wait(self, notice_after: float = 2.0) -> None:
        """Ask the server to stop and wait until it has (its checkpoint saved), if it started; a second Ctrl-C stops
        the wait."""
        self.stop.set()
        if self.started.is_set() and not self.finished.wait(notice_after):
            sys.stderr.write(
                "stopping: the Flower server saves its checkpoint when its current step ends (Ctrl-C again to leave)\n"
            )
            while not self.finished.wait(0.1):  # in slices: the second Ctrl-C is handled between them
                pass
