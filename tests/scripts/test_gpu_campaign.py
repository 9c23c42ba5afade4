"""scripts/gpu-campaign.sh: what `wait` packs for the device tool to bring back (metrics without checkpoints;
DynaFed's D_syn apart), on a store the test writes; what each group of `start` asks Python for (``fl.run``, the DDPM
sets' trainer and ``fl.synthesis pack``, the synthesis benchmark and the gpu tests), with a stand-in for Python that
records it (DynaFed arms written as done or checkpointed where a FedAvg partner waits for them, so nothing trains);
bad arguments."""

from __future__ import annotations

import subprocess
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_wait_packs_metrics_and_dsyn_apart(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    run = store / "runs" / "dynafed_fmnist_a001_paper_n1000_dsa"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5}\n')
    for name in ("dynafed_synthesis.pt", "checkpoint.pt", "checkpoint_round19.pt"):
        (run / name).write_bytes(b"x")
    failed = store / "runs" / "hfmds_fmnist_shards_seed1_hfmds"
    failed.mkdir()
    (store / "logs").mkdir()
    (store / "logs" / "hfmds_shards_1.log").write_text("Traceback (most recent call last):\n")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), "wait", "0"],
        env={"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(store), "OUT": str(out), "PYTHON": "python3"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 'dynafed_fmnist_a001_paper_n1000_dsa rows=1 "test_accuracy": 0.5' in done.stdout
    assert "FAILED: " in done.stdout and "hfmds_shards_1.log" in done.stdout
    with tarfile.open(out / "metrics.tgz") as archive:
        names = archive.getnames()
    assert "runs/dynafed_fmnist_a001_paper_n1000_dsa/metrics.jsonl" in names and not any(
        n.endswith(".pt") for n in names
    )
    with tarfile.open(out / "dsyn.tgz") as archive:
        assert archive.getnames() == ["runs/dynafed_fmnist_a001_paper_n1000_dsa/dynafed_synthesis.pt"]


def start(tmp_path, group: str, done_arms: list[str], calls_expected: int) -> list[str]:
    """`start GROUP 0` on a store whose named DynaFed arms have finished: the stand-in Python's ``-m`` calls, once
    there are ``calls_expected`` of them (:func:`start_group`)."""
    for name in done_arms:
        arm = tmp_path / "store" / "runs" / name
        arm.mkdir(parents=True)
        for file in ("config.json", "summary.json", "checkpoint_round19.pt"):
            (arm / file).write_text("{}")

    def modules(lines: list[str]) -> list[str]:
        return [line for line in lines if line.startswith("-m ")]

    lines, _ = start_group(tmp_path, group, lambda lines: len(modules(lines)) >= calls_expected)
    return modules(lines)


def test_the_seeds_group_runs_fedavg_beside_dynafed_for_seeds_1_and_2(tmp_path):
    arms = ["dynafed_fmnist_a001_paper_n1000_dsa_seed1", "dynafed_fmnist_a001_paper_n1000_dsa_seed2"]
    calls = start(tmp_path, "seeds", arms, 2)
    runs = tmp_path / "store" / "runs"
    for seed in (1, 2):
        (call,) = [c for c in calls if f"fedavg_from19_seed{seed} " in c]
        assert f"--set train.seed={seed}" in call and "--set train.estimate_every=20" in call
        assert f"--init-from {runs}/dynafed_fmnist_a001_paper_n1000_dsa_seed{seed}/checkpoint_round19.pt" in call
    assert len(calls) == 2


def test_the_controls_group_branches_dsa_off_and_n0_from_seed_0(tmp_path):
    calls = start(tmp_path, "controls", ["dynafed_fmnist_a001_paper_n1000_dsa"], 3)
    runs = tmp_path / "store" / "runs"
    kept = f"--init-from {runs}/dynafed_fmnist_a001_paper_n1000_dsa/checkpoint_round19.pt"
    (none,) = [c for c in calls if "paper_n1000_none " in c]
    (n0,) = [c for c in calls if "paper_n0_dsa " in c]
    (fedavg,) = [c for c in calls if "fedavg_from19 " in c]
    assert 'method.augment="none"' in none and "method.iterations=1000" in none and kept in none
    assert "method.iterations=0" in n0 and kept in n0 and kept in fedavg
    assert len(calls) == 3


@pytest.mark.parametrize("args", [[], ["start"], ["start", "everything"], ["stop"]])
def test_a_bad_call_is_one_usage_line_and_touches_nothing(tmp_path, args):
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(tmp_path / "store"), "OUT": str(tmp_path / "out")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr.startswith("usage: ") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()


def recording_python(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for Python that records every call."""
    calls, python = tmp_path / "calls.txt", tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 0\n')
    python.chmod(0o755)
    return python, calls


def start_group(tmp_path, group: str, wanted, kept: str = "") -> tuple[list[str], Path]:
    """`start GROUP 0` with :func:`recording_python` (``kept``: a checkpoint, relative to the store, that a DynaFed
    arm has already written, so that its FedAvg partner starts at once); the calls once ``wanted(calls)`` holds,
    and the store."""
    store = tmp_path / "store"
    if kept:
        (store / kept).parent.mkdir(parents=True)
        (store / kept).write_text("{}")
    python, calls = recording_python(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(store), "OUT": str(tmp_path / "out"), "PYTHON": str(python)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), "start", group, "0"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30  # the group's commands run in their own sessions (setsid): wait for them
    while time.monotonic() < deadline:
        lines = calls.read_text().splitlines() if calls.exists() else []
        if wanted(lines):
            return lines, store
        time.sleep(0.2)
    raise AssertionError(f"the calls never matched: {lines}")


def test_the_ddpm_sets_group_trains_seeds_0_and_1_and_packs_the_sets(tmp_path):
    (tmp_path / "store" / "synthetic").mkdir(parents=True)  # as the trainers leave it; the pack runs every minute
    lines, store = start_group(tmp_path, "ddpm-sets", lambda c: sum("scripts/ddpm_sets.py" in x for x in c) == 2)
    trainers = sorted(c for c in lines if c.startswith("scripts/ddpm_sets.py"))
    assert trainers == [
        f'scripts/ddpm_sets.py --config configs/fedssyn_fmnist_ddpm.toml --set train.seed={seed} '
        f'--set method.cache_dir="{store}/synthetic" --workers 4'
        for seed in (0, 1)
    ]  # fmt: skip
    assert f"-m fl.synthesis pack {store}/synthetic {tmp_path / 'out'} --name ddpm_sets --generator ddpm" in lines
    assert not any("fl.run" in c for c in lines)


def test_the_seeds_dynafed_group_runs_the_dynafed_arms_of_seeds_1_and_2_alone(tmp_path):
    _, store = start_group(tmp_path, "seeds-dynafed", lambda c: sum("fl.run" in x for x in c) == 2)
    time.sleep(1)  # a FedAvg arm would start right after its DynaFed arm returns
    runs = [c for c in (tmp_path / "calls.txt").read_text().splitlines() if "fl.run" in c]
    assert len(runs) == 2 and not any("fedavg" in c for c in runs)
    for seed in (1, 2):
        (call,) = [c for c in runs if f"--set train.seed={seed} " in c]
        assert call.startswith("-m fl.run --config configs/paper/dynafed_fmnist_a001_dynafed.toml")
        assert "--set method.iterations=1000" in call and '--set method.augment="dsa"' in call
        assert "--set train.keep_round=19" in call and "--set train.estimate_every=20" in call
        assert call.endswith(f"--out {store}/runs/dynafed_fmnist_a001_paper_n1000_dsa_seed{seed} --overwrite --quiet")


def test_the_n3000_group_runs_the_code_settings_with_fedavg_from_round_23(tmp_path):
    kept = "runs/dynafed_fmnist_a001_code_n3000_dsa/checkpoint_round23.pt"  # as the DynaFed arm writes it
    lines, store = start_group(tmp_path, "n3000", lambda c: sum("fl.run" in x for x in c) == 2, kept)
    runs_started = [c for c in lines if "fl.run" in c]  # two background arms: either may be recorded first
    dynafed = next(c for c in runs_started if "_code.toml" in c)
    fedavg = next(c for c in runs_started if c != dynafed)
    runs = store / "runs"
    assert dynafed.startswith("-m fl.run --config configs/paper/dynafed_fmnist_a001_code.toml")
    assert "--set method.iterations=3000" in dynafed and "--set train.keep_round=23" in dynafed
    assert dynafed.endswith(f"--out {runs}/dynafed_fmnist_a001_code_n3000_dsa --overwrite --quiet")
    assert fedavg.startswith("-m fl.run --config configs/paper/dynafed_fmnist_a001.toml")
    assert f"--init-from {runs}/dynafed_fmnist_a001_code_n3000_dsa/checkpoint_round23.pt" in fedavg
    assert "--set train.estimate_every=20" in fedavg and fedavg.endswith("fedavg_from23 --overwrite --quiet")


def test_the_bench_group_times_the_synthesis_then_runs_the_gpu_tests(tmp_path):
    lines, store = start_group(tmp_path, "bench", lambda c: any("pytest" in x for x in c))
    bench = lines.index(f"benchmarks/synthesis_bench.py --paper --out {store}/logs/synthesis_bench.json")
    assert lines[bench + 1] == "-m pytest -q -m gpu tests/fl/test_gpu.py -p no:cacheprovider"


@pytest.mark.parametrize("args", [["start", "ddpm-sets", "soon"], ["start", "n3000", "60", "more"], ["wait", "-1"]])
def test_a_bad_seconds_argument_is_one_usage_line_and_touches_nothing(tmp_path, args):
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(tmp_path / "store"), "OUT": str(tmp_path / "out")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr.startswith("usage: ") and len(done.stderr.splitlines()) == 1
    assert "ddpm-sets|seeds-dynafed|seeds|controls|n3000|bench" in done.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()
