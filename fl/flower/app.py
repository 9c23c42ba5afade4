"""Our algorithms as a Flower app (Flower's Message API: ``flwr.app``, ``flwr.serverapp``, ``flwr.clientapp``).

One config, three ways to run it: ``python -m fl.run`` (one process), ``python -m fl.flower`` (Flower's simulation
engine), or a real Flower deployment (SuperLink + SuperNodes, ``flwr run``; see the README). Nothing of an
algorithm's math is written here:

- the server (:class:`FlowerExperiment`) is :class:`fl.run.Experiment` with its round replaced: it selects the
  clients as ``fl.run`` does (:func:`fl.engine.select_clients`), sends each its round (server model x, the server
  state the algorithm's correction reads, round and step size) as a Flower message, and aggregates the replies
  with the algorithm's own :meth:`~fl.algorithms.Algorithm.server_update`; evaluation, metrics, checkpoints and
  the summary are ``fl.run``'s (:func:`fl.run.execute`);
- the client (:func:`train`) runs :func:`fl.engine.train_client` (local training with the algorithm's correction,
  the same seeded batch order) and :meth:`~fl.algorithms.Algorithm.client_update` on its partition of the same
  federation (node config ``partition-id`` = client index of :mod:`fl.federation`), keeps its algorithm state
  (SCAFFOLD's c_i, FedDyn's g_i) in the node's ``Context.state``, as a real device would, and replies with its local
  model y_i and the change of its state (the server's update reads client states only as new − old).

What travels per client and round is counted from the messages' arrays and checked against
:meth:`~fl.algorithms.Algorithm.communication` (x and the broadcast server state down, y_i and Δ state up;
FedPVR's control variates on the head only); a mismatch stops the run. Methods: only ``method.name = "none"`` (the
real-data shuffle ``data.p`` included) runs through the app so far; a synthetic-data method is refused with one
line (see README). A resumed Flower run restores the server from its checkpoint; client states restart at zero
unless the nodes kept theirs.
"""

from __future__ import annotations

import functools
import json
import time

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fl.algorithms import Context as AlgorithmContext
from fl.config import RunConfig, from_dict
from fl.engine import EngineState, select_clients, train_client
from fl.run import Experiment
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


def numbers(record: ArrayRecord) -> int:
    return sum(int(np.prod(array.shape)) for array in record.values())


def state_mask(exp: Experiment) -> torch.Tensor | None:
    """The parameters whose control variates travel (FedPVR: the head), or None for all."""
    mask_of = getattr(exp.algorithm, "mask", None)
    if mask_of is None:
        return None
    x = exp.flat.params
    mask = mask_of(AlgorithmContext(x, {}, {}, exp.flat.head_mask))
    return None if mask is None else mask.bool()


def check_supported(config: RunConfig) -> None:
    if config.method["name"] != "none":
        raise InputError(
            f"method.name = {config.method['name']!r}: the Flower app runs the algorithms without a synthetic-data "
            "method so far (method.name = 'none'); use python -m fl.run for the methods"
        )
    if len(config.train.lr) != 1:
        raise InputError("train.lr: the Flower app takes one step size, not a grid")


class FlowerExperiment(Experiment):
    """``fl.run``'s experiment whose rounds go to Flower nodes (one per client partition) through ``grid``."""

    def __init__(self, config: RunConfig, grid: Grid, timeout: float | None = None) -> None:
        check_supported(config)
        super().__init__(config)
        self.grid, self.timeout = grid, timeout
        self.nodes = self.discover()

    def discover(self, wait: float = 120.0) -> dict[int, int]:
        """partition-id -> node id of every client, asking each connected node for its partition."""
        deadline, nodes = time.monotonic() + wait, []
        while len(nodes) < self.data.n_clients and time.monotonic() < deadline:
            nodes = list(self.grid.get_node_ids())
            time.sleep(0.2)
        if len(nodes) < self.data.n_clients:
            raise InputError(
                f"{len(nodes)} Flower nodes connected, the config has data.clients = {self.data.n_clients}"
            )
        ask = [self.grid.create_message(RecordDict({}), "query", n, "partition") for n in nodes]
        found = {}
        for reply in self.grid.send_and_receive(ask, timeout=self.timeout):
            if reply.has_error():
                raise InputError(f"Flower node {reply.metadata.src_node_id}: {reply.error.reason}")
            found[int(reply.content["partition"]["partition-id"])] = reply.metadata.src_node_id
        if sorted(found) != list(range(self.data.n_clients)):
            raise InputError(f"Flower nodes hold partitions {sorted(found)}, expected 0..{self.data.n_clients - 1}")
        return found

    def compute_round(self, state: EngineState):
        t, seed, config = state.round, self.config.train.seed, self.config
        selected = select_clients(seed, t, self.data.n_clients, self.local.participation).tolist()
        mask = state_mask(self)
        down = {
            "x": pack({"x": state.x}, None),
            "server": pack({k: state.server[k] for k in broadcast_keys(self.algorithm)}, mask),
        }
        cfg = ConfigRecord({"round": t, "lr": float(state.lr), "config": json.dumps(config.to_dict())})
        messages = [
            self.grid.create_message(RecordDict({**down, "cfg": cfg}), "train", self.nodes[i], str(t)) for i in selected
        ]
        tick = time.perf_counter()
        replies = {}
        for reply in self.grid.send_and_receive(messages, timeout=self.timeout):
            if reply.has_error():
                raise InputError(f"Flower round {t}: a client failed: {reply.error.reason}")
            replies[int(reply.content["metrics"]["partition-id"])] = reply.content
        if sorted(replies) != selected:
            raise InputError(f"Flower round {t}: replies from {sorted(replies)}, sent to {selected}")
        seconds = time.perf_counter() - tick
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
        sizes = torch.tensor(self.data.sizes[selected], dtype=state.x.dtype, device=state.x.device)
        weights = sizes / sizes.sum() if self.local.weighting == "size" else torch.full_like(sizes, 1 / len(selected))
        zeros = {k: torch.zeros_like(v) for k, v in deltas.items()}
        x, server = self.algorithm.server_update(state.x, state.server, ys, weights, zeros, deltas, self.data.n_clients)
        record = {"round": t, "clients": selected, "seconds_local": seconds, "seconds_method": 0.0, "backend": "flower"}
        new = EngineState(t + 1, x, server, state.clients, state.lr, state.extra, state.method)
        return new, record, (np.array(selected), {})


@functools.lru_cache(maxsize=4)
def client_experiment(config_json: str) -> Experiment:
    """The client side's copy of the federation (built once per process and config)."""
    return Experiment(from_dict(json.loads(config_json)))


client_app = ClientApp()


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """The node's client index (partition-id) for the server's map of nodes."""
    partition = ConfigRecord({"partition-id": int(context.node_config["partition-id"])})
    return Message(RecordDict({"partition": partition}), reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of client i's local training (:func:`fl.engine.train_client`), its state kept in ``context``."""
    cfg = msg.content["cfg"]
    exp = client_experiment(str(cfg["config"]))
    i, t, lr = int(context.node_config["partition-id"]), int(cfg["round"]), float(cfg["lr"])
    mask = state_mask(exp)
    device = exp.flat.params
    x = unpack(msg.content["x"], device, None)["x"]
    server = {k: torch.zeros_like(x) for k in exp.algorithm.server_keys}
    server |= unpack(msg.content["server"], x, mask)
    zeros = {k: torch.zeros_like(x) for k in exp.algorithm.client_keys}
    own = unpack(context.state["client"], x, None) if "client" in context.state else zeros
    ctx = AlgorithmContext(x, server, own, exp.flat.head_mask)
    y, steps = train_client(exp.flat, exp.algorithm, exp.data, exp.local, x, lr, exp.config.train.seed, t, i, ctx)
    new = exp.algorithm.client_update(y, ctx, steps, lr)
    if new:
        context.state["client"] = pack(new, None)
    content = RecordDict(
        {
            "y": pack({"y": y}, None),
            "delta": pack({k: new[k] - own[k] for k in broadcast_keys(exp.algorithm)}, mask),
            "metrics": MetricRecord({"partition-id": i, "steps": steps}),
        }
    )
    return Message(content, reply_to=msg)


def server_app_for(config: RunConfig, out, resume: bool = False, quiet: bool = True) -> ServerApp:
    """A ServerApp that runs ``config`` into the run folder ``out`` through :func:`fl.run.execute`."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        from fl.run import execute

        execute(config, out, resume=resume, quiet=quiet, exp=FlowerExperiment(config, grid))

    return app
