"""A Flower deployment on this machine: a SuperLink and N SuperNodes as subprocesses on 127.0.0.1 (insecure, for
tests and measurements only), and ``flwr run`` of the app in ``flower/`` against it. Every process started is
stopped on exit, whatever happens (process groups: SuperNodes start ClientApp processes, the SuperLink a ServerApp).

    with Loopback(n_clients=2, workdir=tmp) as link:
        link.run({"config": "configs/fmnist_quick.toml", "set": "train.rounds=2", "out": "/abs/run"}, wait_for=path)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from theory.output import open_unlinked, write_text_atomically

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


def toml_value(value) -> str:
    return (
        str(value).lower()
        if isinstance(value, bool)
        else repr(value)
        if isinstance(value, int | float)
        else f'"{value}"'
    )


def started_run(output: str) -> str | None:
    """The run id ``flwr run`` printed ("Successfully started run 123..."), or None."""
    found = re.search(r"started run (\d+)", output)
    return found.group(1) if found else None


class Loopback:
    """SuperLink + ``n_clients`` SuperNodes (partition-id 0..N-1) with their logs and ``FLWR_HOME`` in
    ``workdir``; ``threads`` sets OMP/MKL threads of every process (1: bit for bit with a one-thread fl.run)."""

    def __init__(self, n_clients: int, workdir: Path, threads: int | None = 1) -> None:
        self.n_clients, self.workdir = n_clients, Path(workdir)
        self.home, self.logs = self.workdir / "flwr-home", self.workdir / "logs"
        self.env = {**os.environ, "FLWR_HOME": str(self.home)}
        if threads:
            self.env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        self.procs: list[subprocess.Popen] = []
        self.names: list[str] = []  # each process's name (its log is logs/NAME.log)

    def _start(self, name: str, *command: str) -> None:
        log = open_unlinked(self.logs / f"{name}.log", "a")  # never through a link planted there
        self.procs.append(
            subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=log, start_new_session=True)
        )
        self.names.append(name)

    def __enter__(self) -> Loopback:
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        write_text_atomically(
            self.home / "config.toml",
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{self.port}"\n'
            "insecure = true\n",
        )
        try:
            self._start("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(self.port))
            wait_for_port(self.port, 60)
            for i in range(self.n_clients):
                self._start(
                    f"node{i}", "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                    "--port", str(free_port()), "--node-config", f"partition-id={i} num-partitions={self.n_clients}",
                )  # fmt: skip
        except BaseException:
            self.__exit__()
            raise
        return self

    def run(self, run_config: dict, wait_for: Path, timeout: float = 600.0, status_every: float = 30.0) -> float:
        """Submit ``flwr run flower/`` with ``run_config`` and wait until ``wait_for`` exists; the seconds it took.
        The wait fails fast (RuntimeError, its first line the reason) when a process of the deployment exits, or
        when the run has ended without ``wait_for`` (its ServerApp refused or failed: ``flwr ls``, asked every
        ``status_every`` seconds), rather than after ``timeout``."""
        app = self.workdir / "app"
        if not app.exists():
            shutil.copytree(ROOT / "flower", app)
        overrides = " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items())
        start = time.monotonic()
        submitted = subprocess.run(
            ["flwr", "run", str(app), "loopback", "--run-config", overrides], cwd=ROOT, env=self.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if submitted.returncode:
            raise RuntimeError(f"flwr run failed: {submitted.stdout[-1000:]} {submitted.stderr[-1000:]}")
        run_id = started_run(submitted.stdout)
        asked = start
        while not wait_for.exists():
            if time.monotonic() - start > timeout:
                tails = "\n".join(f"{p.name}: {p.read_text()[-800:]}" for p in sorted(self.logs.iterdir()))
                raise TimeoutError(f"{wait_for} did not appear in {timeout} s\n{tails}")
            self._check_alive()
            if run_id is not None and time.monotonic() - asked >= status_every:
                asked = time.monotonic()
                status = self.run_status(run_id)
                if status.startswith("finished") and not wait_for.exists():
                    raise RuntimeError(f"Flower run {run_id} ended ({status}) without writing {wait_for}; see "
                                       f"the logs in {self.logs}")  # fmt: skip
            time.sleep(0.5)
        return time.monotonic() - start

    def _check_alive(self) -> None:
        """A RuntimeError naming the first process of the deployment that has exited, and its log."""
        for name, proc in zip(self.names, self.procs):
            if proc.poll() is not None:
                raise RuntimeError(f"Flower {name} exited ({proc.returncode}); see {self.logs / (name + '.log')}")

    def run_status(self, run_id: str) -> str:
        """The run's status as ``flwr ls`` says it ("running", "finished:failed", ...); "" where it does not say."""
        try:
            listed = subprocess.run(
                ["flwr", "ls", "loopback", "--run-id", run_id, "--format", "json"], cwd=ROOT, env=self.env,
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            return str(json.loads(listed.stdout)["runs"][0]["status"])
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError, TypeError):
            return ""

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
        self.names.clear()
