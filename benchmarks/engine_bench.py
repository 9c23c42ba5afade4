"""Time one FedAvg round of the engine against a plain PyTorch training loop doing the same work.

    python benchmarks/engine_bench.py [--clients 10] [--repeats 3] [--threads T]

Both sides: real Fashion-MNIST, Dirichlet(0.1) over 10 clients (90% of each client's data trains), the FedCOG
CNN, one local epoch of batch-64 SGD (lr 0.05) on every client, on the CPU. The plain loop is what one writes
without an engine: for each client, ``model.load_state_dict(server)``, then ``torch.optim.SGD`` steps over the
client's batches (``zero_grad``, ``backward``, ``step``), then averaging the state dicts weighted by size. The
engine's round adds client selection, per-client seeded generators, the algorithm hooks and flat-vector
aggregation. Reported: seconds per round (best of --repeats), and the ratio engine / plain (target <= 1.2).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.algorithms import FedAvg  # noqa: E402
from fl.clients import LocalConfig  # noqa: E402
from fl.data import load  # noqa: E402
from fl.engine import init_state, run_round  # noqa: E402
from fl.federation import build_clients  # noqa: E402
from fl.flat import FlatModel  # noqa: E402
from fl.models import build_model  # noqa: E402
from theory.cli import ArgumentParser, positive_int  # noqa: E402
from theory.errors import InputError  # noqa: E402


def plain_round(model, server_state, data, lr: float, batch_size: int, seed: int) -> dict:
    """FedAvg written without the engine: load, SGD over the client's batches, weighted state-dict average."""
    sizes = data.sizes
    total = {k: torch.zeros_like(v) for k, v in server_state.items()}
    for i, index in enumerate(data.train):
        model.load_state_dict(server_state)
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(seed + i)
        order = index[torch.randperm(len(index), generator=generator)]
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(data.x[batch]), data.y[batch]).backward()
            optimizer.step()
        for k, v in model.state_dict().items():
            total[k] += v * (sizes[i] / sizes.sum())
    return total


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="engine_bench.py", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=positive_int, default=10)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        data = build_clients(
            load("fmnist"), "dirichlet", args.clients, np.random.default_rng(0), partition_params={"alpha": 0.1}
        )
    except InputError as error:  # no Fashion-MNIST, more clients than Dirichlet(0.1) can fill
        print(f"engine_bench.py: error: {error}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = build_model("fedcog-cnn", (1, 28, 28), 10)
    plain_model = build_model("fedcog-cnn", (1, 28, 28), 10)
    server_state = {k: v.clone() for k, v in model.state_dict().items()}
    flat = FlatModel(model)
    local = LocalConfig(epochs=1, batch_size=64)
    steps = int(sum(np.ceil(data.sizes / 64)))
    times = {"engine": [], "plain": []}
    for repeat in range(args.repeats):
        state = init_state(flat, FedAvg(), data.n_clients, 0.05)
        start = time.perf_counter()
        run_round(state, flat, FedAvg(), data, local, seed=repeat)
        times["engine"].append(time.perf_counter() - start)
        start = time.perf_counter()
        plain_round(plain_model, server_state, data, 0.05, 64, seed=repeat)
        times["plain"].append(time.perf_counter() - start)
    engine, plain = min(times["engine"]), min(times["plain"])
    print(
        f"one FedAvg round, {data.n_clients} clients x 1 epoch, {int(data.sizes.sum())} samples, {steps} steps, "
        f"FedCOG CNN, {torch.get_num_threads()} threads"
    )
    print(f"engine {engine:.2f} s   plain loop {plain:.2f} s   ratio engine/plain {engine / plain:.3f} (target <= 1.2)")
    print(f"all times: engine {np.round(times['engine'], 2).tolist()}, plain {np.round(times['plain'], 2).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
