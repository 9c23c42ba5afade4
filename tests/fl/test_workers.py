"""Clients in worker processes (fl.workers) against the in-process loop with one thread: bit for bit.

- engine level, float64, tiny data: two rounds of each of the 6 algorithms, with no method and with FedCOG (its
  per-client hooks run in the worker that trains the client, its state comes back), full and partial participation;
- fl.run level (tiny CIFAR copy): Fedssyn with each algorithm (data dealt before training, reaching the workers
  through shared memory), FedCOG, and no method; metrics, server model and client states equal;
- a worker killed with SIGKILL stops the run with one line and a folder whose resume equals an uninterrupted run;
- SIGTERM or SIGINT to a workers run: the same.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fl.config import build_algorithm
from fl.engine import init_state, run_round
from fl.flat import FlatModel
from fl.methods import FedCOG, Method
from fl.run import main
from fl.workers import ModelSpec, RunSpec, WorkerLost, Workers, from_wire, get_workers, resolve_workers, to_wire
from tests.fl.algorithms.conftest import local, make_data

ALGORITHMS = {
    "fedavg": {}, "fedprox": {"mu": 0.1}, "scaffold": {}, "feddyn": {"alpha": 0.1}, "fedpvr": {},
    "fedavgm": {"beta": 0.5},
}  # fmt: skip
SPEC = ModelSpec("mlp", (1, 2, 2), 3, "float64")  # make_data's 4 features as a 1x2x2 image


def image_data():
    data = make_data()
    data.x, data.test_x = data.x.view(-1, 1, 2, 2), data.test_x.view(-1, 1, 2, 2)
    return data


def rounds(pool, algorithm_name: str, method: Method, participation: float, n_rounds: int = 2):
    data = image_data()
    algorithm = build_algorithm({"name": algorithm_name, **ALGORITHMS[algorithm_name]})
    config = local(participation=participation)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        flat = FlatModel(SPEC())
    state = init_state(flat, algorithm, data.n_clients, lr=0.1)
    if pool is not None:
        pool.setup(RunSpec(SPEC, algorithm, method, data, config, seed=3))
    records = []
    for _ in range(n_rounds):
        state, record = run_round(state, flat, algorithm, data, config, 3, method, pool)
        records.append({k: v for k, v in record.items() if not k.startswith(("seconds", "backend", "workers"))})
    return state, records


def assert_same_state(a, b):
    assert torch.equal(a.x, b.x)
    assert a.server.keys() == b.server.keys() and all(torch.equal(a.server[k], b.server[k]) for k in a.server)
    assert a.clients.keys() == b.clients.keys() and all(torch.equal(a.clients[k], b.clients[k]) for k in a.clients)
    assert a.method["clients"].keys() == b.method["clients"].keys()
    for i, entries in a.method["clients"].items():
        for key, value in entries.items():
            other = b.method["clients"][i][key]
            assert torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other


@pytest.fixture(scope="module")
def pool():
    workers = Workers(2)
    yield workers
    workers.close()


@pytest.mark.parametrize("participation", [1.0, 0.67])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("method", ["none", "fedcog"])
def test_workers_equal_the_in_process_loop(pool, algorithm, method, participation):
    if not pool.alive():
        pytest.skip("the module's workers were stopped by an earlier failure")
    hooks = FedCOG(start_round=2, n_generate=6, generate_steps=2, kd_batch_size=3) if method == "fedcog" else Method()
    alone, alone_records = rounds(None, algorithm, hooks, participation)
    workers, worker_records = rounds(pool, algorithm, hooks, participation)
    assert worker_records == alone_records
    assert_same_state(alone, workers)
    if method == "fedcog":  # the previous local models came back from the workers
        assert alone.method["clients"] and set(workers.method["clients"]) == set(alone.method["clients"])


def test_wire_keeps_dtypes_and_structure():
    value = {1: [torch.arange(3), (torch.ones(2, dtype=torch.float64), "a")], "n": None}
    back = from_wire(to_wire(value))
    assert torch.equal(back[1][0], value[1][0]) and back[1][1][0].dtype == torch.float64 and back[1][1][1] == "a"
    assert back["n"] is None


def test_worker_count(monkeypatch):
    assert resolve_workers(4, 3, "cpu") == 3  # capped by the participants
    assert resolve_workers(1, 10, "cpu") == 1
    assert resolve_workers(8, 10, "cuda") == 1  # on CUDA the batched backend is the parallelism
    monkeypatch.setenv("SHUFFLEFL_WORKERS", "2")
    assert resolve_workers(0, 10, "cpu") == 2


def test_a_dead_worker_is_one_line_and_the_set_is_replaced():
    workers = get_workers(2)
    workers.setup(RunSpec(SPEC, build_algorithm({"name": "fedavg"}), Method(), image_data(), local(), seed=0))
    os.kill(workers.processes[0].pid, signal.SIGKILL)
    workers.processes[0].join(5)
    flat = FlatModel(SPEC())
    state = init_state(flat, build_algorithm({"name": "fedavg"}), 3, lr=0.1)
    with pytest.raises(WorkerLost, match=r"client worker \d \(pid \d+\) died"):
        workers.train(1, state, {"server": {}, "clients": {}}, [0, 1, 2], [{}, {}, {}])
    assert not workers.alive() and get_workers(2) is not workers


# --- fl.run end to end ------------------------------------------------------------------------------------------


def run_args(root, out, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='mlp'", "--set", "train.rounds=3",
        "--set", "train.batch_size=16", "--set", "train.device='cpu'", "--set", "train.participation=0.75",
        "--set", "algorithm.name='scaffold'", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("seconds", "backend", "workers"))} for r in rows]


def same_run(a: Path, b: Path) -> None:
    assert metrics(a) == metrics(b)
    ca, cb = (torch.load(p / "checkpoint.pt", weights_only=True) for p in (a, b))
    assert torch.equal(ca["x"], cb["x"]) and all(torch.equal(ca["clients"][k], cb["clients"][k]) for k in ca["clients"])


FEDCOG = ("--set", "method.name='fedcog'", "--set", "method.start_round=2", "--set", "method.n_generate=8",
          "--set", "method.generate_steps=2", "--set", "method.kd_batch_size=4")  # fmt: skip


@pytest.mark.parametrize(
    ("method", "algorithm"), [*(("fedssyn", name) for name in ALGORITHMS), ("fedcog", "scaffold"), ("none", "feddyn")]
)
def test_fl_run_with_workers_equals_one_process(cifar_root, tmp_path, monkeypatch, method, algorithm):
    from fl.synthesis import fedssyn
    from tests.fl.synthesis.conftest import MeanImage

    monkeypatch.setattr(fedssyn, "build_generator", lambda name, shape, n, overrides, device="cpu": MeanImage(shape, n))
    extra = (
        FEDCOG
        if method == "fedcog"
        else ("--set", "method.name='fedssyn'", "--set", "method.n_tilde=20", "--set", f"method.cache_dir='{tmp_path}'")
    )
    if method == "none":
        extra = ()
    extra = (*extra, "--set", f"algorithm.name='{algorithm}'")
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(run_args(cifar_root, one, "--workers", "1", *extra)) == 0
    assert main(run_args(cifar_root, two, "--workers", "2", *extra)) == 0
    assert json.loads((two / "metrics.jsonl").read_text().splitlines()[0])["backend"] == "workers"
    same_run(one, two)


def start(root: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [
        *run_args(root, out, "--workers", "2", *extra),
        "--set",
        "train.rounds=40",
        "--set",
        "train.checkpoint_every=1",
    ]
    command = [sys.executable, "-m", "fl.run", *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rounds(out: Path, process: subprocess.Popen, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        path = out / "metrics.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run did not reach round {n}: {process.poll()}")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9 a worker", "SIGTERM", "SIGINT"])
def test_a_stopped_workers_run_resumes_to_the_uninterrupted_one(cifar_root, tmp_path, how):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    process = start(cifar_root, broken)
    wait_for_rounds(broken, process, 2)
    workers = [pid for pid in children(process.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(workers) == 2
    if how in ("SIGTERM", "SIGINT"):
        process.send_signal(getattr(signal, how))
    else:
        os.kill(workers[0], signal.SIGKILL)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "--resume" in lines[0], err
    if how.startswith("kill"):
        assert "died" in lines[0]
    assert main(["--resume", str(broken), "--quiet", "--workers", "2"]) == 0
    assert main([*run_args(cifar_root, straight, "--workers", "1"), "--set", "train.rounds=40"]) == 0
    assert metrics(broken)[-1]["round"] == 40
    same_run(straight, broken)
