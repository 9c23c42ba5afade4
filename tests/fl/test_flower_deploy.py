"""A real Flower deployment on loopback: a SuperLink and two SuperNodes as subprocesses on 127.0.0.1 (insecure,
local only), `flwr run flower/` submits two rounds of FedAvg on a tiny CIFAR-10, and the run folder holds the same
metrics and server model as python -m fl.run (one thread everywhere: bit for bit). Every process started here is
stopped, within a bounded time, whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")
if not shutil.which("flower-superlink") or not shutil.which("flwr"):
    pytest.skip("the Flower command-line tools are not installed", allow_module_level=True)

from fl.run import main as run_main

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


@pytest.mark.slow
def test_loopback_deployment_runs_two_rounds_like_fl_run(cifar_root, tmp_path):
    overrides = [
        "data.dataset='cifar10'", f"data.data_root='{cifar_root}'", "data.partition='iid'", "data.clients=2",
        "model.name='fedcog-cnn'", "train.rounds=2", "train.batch_size=16", "train.device='cpu'",
        "train.local_steps=3",
    ]  # fmt: skip
    local = tmp_path / "local"
    assert run_main([x for o in overrides for x in ("--set", o)] + ["--out", str(local), "--quiet"]) == 0
    home, app, out = tmp_path / "flwr-home", tmp_path / "app", tmp_path / "deployed"
    home.mkdir()
    shutil.copytree(ROOT / "flower", app)
    link = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{link}"\ninsecure = true\n'
    )
    env = {**os.environ, "FLWR_HOME": str(home), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    logs, procs = tmp_path / "logs", []
    logs.mkdir()

    def start(name, *command):
        log = (logs / f"{name}.log").open("w")
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True))

    try:
        start("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link))
        wait_for_port(link, 60)
        for i in range(2):
            start(
                f"node{i}", "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link}",
                "--port", str(free_port()), "--node-config", f"partition-id={i} num-partitions=2",
            )  # fmt: skip
        run_config = f'config="" set="{";".join(overrides)}" out="{out}" timeout=120'
        submitted = subprocess.run(
            ["flwr", "run", str(app), "loopback", "--run-config", run_config], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        deadline = time.monotonic() + 240
        while not (out / "summary.json").exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert (out / "summary.json").exists(), "\n".join(p.read_text()[-1500:] for p in logs.iterdir())
    finally:
        for proc in procs:  # the process groups: SuperNodes start ClientApp processes, the SuperLink a ServerApp
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def rows(folder):
        keep = ("round", "communication", "clients", "test_loss", "test_accuracy")
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k in keep} for line in lines]

    assert rows(out) == rows(local) and len(rows(out)) == 2
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (local, out))
    assert torch.equal(a["x"], b["x"])
