"""python -m fl.run end to end on a tiny CIFAR-10 copy the test writes: outputs, resume bit-identical to an
uninterrupted run, Ctrl-C saving a checkpoint, one-line errors for bad configs."""

from __future__ import annotations

import json

import pytest
import torch

from fl.config import load_config
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at


def base_args(root, out, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='mlp'", "--set", "train.rounds=4",
        "--set", "train.batch_size=16", "--set", "train.checkpoint_every=2", "--set", "train.device='cpu'",
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def metrics(out):
    """The metrics rows without their timings (seconds, seconds_local, seconds_method)."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in rows]


def same_run(a, b):
    """Runs a and b wrote the same metrics rows and ended in the same server model and client states."""
    assert metrics(a) == metrics(b)
    end_a = torch.load(a / "checkpoint.pt", weights_only=True)
    end_b = torch.load(b / "checkpoint.pt", weights_only=True)
    assert torch.equal(end_a["x"], end_b["x"])
    for key in end_a["clients"]:
        assert torch.equal(end_a["clients"][key], end_b["clients"][key])


def test_run_writes_config_metrics_checkpoint_summary(cifar_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", "train.estimate_every=2", "--set", "data.p=0.5")) == 0
    assert {"config.json", "metrics.jsonl", "checkpoint.pt", "summary.json"} <= {f.name for f in out.iterdir()}
    rows = metrics(out)
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert all(0 <= r["test_accuracy"] <= 1 for r in rows)
    assert rows[-1]["communication"] == 4 * 4 * 2 * json.loads((out / "summary.json").read_text())["n_params"]
    estimates = [r["estimates"] for r in rows if "estimates" in r]
    assert len(estimates) == 3 and all(
        {"zeta2", "zeta2_hat", "sigma2", "sigma2_hat", "delta2"} <= set(e) for e in estimates
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 4 and summary["p_realised"][0] == pytest.approx(0.5, abs=0.05)
    assert "final test accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "feddyn"])
def test_resume_is_bit_identical(cifar_root, tmp_path, monkeypatch, algorithm):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    extra = ("--set", f"algorithm.name='{algorithm}'", "--set", "train.participation=0.5")
    assert main(base_args(cifar_root, straight, *extra)) == 0

    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, broken, *extra)) == 2  # Ctrl-C: checkpoint saved, one-line message
    assert [r["round"] for r in metrics(broken)] == [1, 2]
    resume()
    assert main(["--resume", str(broken), "--quiet"]) == 0
    same_run(straight, broken)


@pytest.mark.parametrize("stop", ["worker lost", "Ctrl-C"])
def test_a_stop_while_the_round_is_evaluated_loses_no_row(cifar_root, tmp_path, monkeypatch, stop):
    """A worker that dies (or a Ctrl-C) while round 3's test batches are evaluated: the round is lost whole (no
    client state of it kept, no row skipped) and the resumed run equals the straight one. Once seen under load
    with a worker killed by SIGKILL: round 3's state was kept without its metrics row."""
    from fl.experiment import Experiment
    from fl.workers import WorkerLost

    straight, broken = tmp_path / "straight", tmp_path / "broken"
    extra = ("--set", "algorithm.name='scaffold'", "--set", "train.participation=0.5")
    assert main(base_args(cifar_root, straight, *extra)) == 0
    real, calls = Experiment.evaluate, []

    def dying(self, x):
        calls.append(1)
        if len(calls) == 3:
            raise WorkerLost("a worker died") if stop == "worker lost" else KeyboardInterrupt
        return real(self, x)

    monkeypatch.setattr(Experiment, "evaluate", dying)
    assert main(base_args(cifar_root, broken, *extra)) == 2
    assert [r["round"] for r in metrics(broken)] == [1, 2]
    assert torch.load(broken / "checkpoint.pt", weights_only=True)["round"] == 3
    monkeypatch.setattr(Experiment, "evaluate", real)
    assert main(["--resume", str(broken), "--quiet"]) == 0
    same_run(straight, broken)


def test_a_run_from_another_runs_state_may_change_the_local_step(cifar_root, tmp_path, capsys):
    """--init-from with another train.lr and train.weight_decay: the rounds before the branch are the source's, the
    new step is used from there on (said on stderr, kept in the summary); an lr grid keeps the source's tuned value
    when it holds it and is refused when it does not; another momentum is still refused."""
    source, branch = tmp_path / "source", tmp_path / "branch"
    assert main(base_args(cifar_root, source, "--set", "train.keep_round=2")) == 0
    init = ("--init-from", str(source / "checkpoint_round2.pt"))
    step = ("--set", "train.lr=0.01", "--set", "train.weight_decay=0.001")
    capsys.readouterr()
    assert main(base_args(cifar_root, branch, *step, *init)) == 0
    assert "from round 3 on lr 0.05 -> 0.01, weight_decay 0 -> 0.001" in capsys.readouterr().err
    summary = json.loads((branch / "summary.json").read_text())
    assert summary["lr"] == 0.01
    assert summary["init_from_changes"] == {"lr": [0.05, 0.01], "weight_decay": [0.0, 0.001]}
    assert metrics(branch)[:2] == metrics(source)[:2] and metrics(branch)[2:] != metrics(source)[2:]
    same = tmp_path / "same"  # a grid holding the source's lr: its value, nothing changed
    assert main(base_args(cifar_root, same, "--set", "train.lr=[0.01, 0.05]", *init)) == 0
    assert metrics(same) == metrics(source)
    assert "init_from_changes" not in json.loads((same / "summary.json").read_text())
    capsys.readouterr()
    assert main(base_args(cifar_root, tmp_path / "grid", "--set", "train.lr=[0.01, 0.02]", *init)) == 2
    assert "give one train.lr" in capsys.readouterr().err
    assert main(base_args(cifar_root, tmp_path / "other", "--set", "train.momentum=0.5", *init)) == 2


def test_lr_grid_is_tuned_on_validation(cifar_root, tmp_path):
    out = tmp_path / "tuned"
    assert main(base_args(cifar_root, out, "--set", "train.lr=[0.001, 0.1]", "--set", "train.tune_rounds=1")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [row["lr"] for row in summary["lr_tuning"]] == [0.001, 0.1]
    best = max(summary["lr_tuning"], key=lambda row: row["val_accuracy"])
    assert summary["lr"] == best["lr"]


def test_existing_run_is_not_overwritten(cifar_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", "train.rounds=1")) == 0
    assert main(base_args(cifar_root, out, "--set", "train.rounds=1")) == 2
    assert "--resume" in capsys.readouterr().err


def test_compare_two_runs(cifar_root, tmp_path, capsys):
    for name in ("a", "b"):
        assert main(base_args(cifar_root, tmp_path / name, "--set", "train.target_accuracy=0.01")) == 0
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "speed-up" in capsys.readouterr().out


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.alpha=0", "data.alpha"),
        ("data.alpha=-1", "data.alpha"),
        ("train.participation=0", "train.participation"),
        ("train.participation=1.5", "train.participation"),
        ("data.p=1.2", "data.p"),
        ("data.clients=100000", "clients"),
        ("data.bogus=1", "data.bogus"),
        ("nosection.key=1", "nosection"),
        ("algorithm.name='nope'", "algorithm.name"),
        ("algorithm.mu=1", "algorithm.mu"),
        ("model.name='resnet'", "model.name"),
        ("train.rounds='many'", "train.rounds"),
        ("data.dataset='imagenet'", "imagenet"),
        ("train", "section.key=value"),
    ],
)
def test_bad_config_is_one_line_exit_2(cifar_root, tmp_path, capsys, override, message):
    assert main([*base_args(cifar_root, tmp_path / "bad"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1 and message in err


def test_missing_dataset_is_one_line_exit_2(cifar_root, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    args = base_args(tmp_path / "empty", tmp_path / "run")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "CIFAR-10 not found" in err and err.count("\n") == 1


def test_missing_config_file_and_resume_dir(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "none.toml")]) == 2
    assert main(["--resume", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_shipped_configs_load():
    from pathlib import Path

    configs = sorted(Path(__file__).resolve().parents[2].joinpath("configs").rglob("*.toml"))
    assert len(configs) >= 7
    for path in configs:
        load_config(path)


def test_a_diverging_run_stops_and_says_so(cifar_root, tmp_path, capsys):
    """lr = 1e6 blows the MLP up: the run stops at the first non-finite server model, marks the round, skips the
    estimates there, and still writes its summary (a sweep carries on)."""
    out = tmp_path / "run"
    args = base_args(
        cifar_root, out, "--set", "train.lr=1e6", "--set", "train.rounds=6", "--set", "train.estimate_every=1"
    )
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert rows[-1].get("diverged") and "estimates" not in rows[-1]
    assert all(not r.get("diverged") for r in rows[:-1])
    assert summary["diverged_at_round"] == rows[-1]["round"] < 6
    assert "diverged" in capsys.readouterr().out


@pytest.mark.parametrize("key", ["data.subsample", "data.test_subsample"])
def test_negative_subsample_is_a_one_line_error(key, capsys):
    assert_one_line_config_error(["--set", f"{key}=-1", "--out", "unused"], key, capsys)


def test_a_run_folder_in_use_is_refused_in_one_line(cifar_root, tmp_path, capsys):
    """A second `fl.run` on a folder another process is running (a start with --overwrite or a --resume) stops
    with one line and touches nothing: two writers would interleave the metrics and lose rounds."""
    from fl.atomic import locked
    from fl.runfolder import RUN_LOCK

    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--set", "train.rounds=2")) == 0
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file() and f.name != RUN_LOCK}
    capsys.readouterr()
    # a second open of the lock file: as another process holds it
    with locked(out / RUN_LOCK, busy="the other process"):
        assert main(["--resume", str(out), "--quiet"]) == 2
        assert main(base_args(cifar_root, out, "--set", "train.rounds=2", "--overwrite")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and err.count(f"run directory {out} is in use by another process") == 2
    assert before == {f.name: f.read_bytes() for f in out.iterdir() if f.is_file() and f.name != RUN_LOCK}
    assert main(["--resume", str(out), "--quiet"]) == 0  # free again: the finished run resumes to its summary


def test_model_width_reaches_the_model_and_a_model_without_one_is_a_one_line_error(cifar_root, tmp_path, capsys):
    """model.width = 8 builds ConvNet-3 with 8 channels (the server model's parameter count says so); a model
    that takes no width stops in one line."""
    from fl.models import ConvNet3, count_parameters

    out = tmp_path / "run"
    args = base_args(cifar_root, out, "--set", "train.rounds=1", "--set", "model.name='convnet3'")
    assert main([*args, "--set", "model.width=8"]) == 0
    n_params = json.loads((out / "summary.json").read_text())["n_params"]
    assert (
        n_params == count_parameters(ConvNet3((3, 32, 32), 10, width=8)) != count_parameters(ConvNet3((3, 32, 32), 10))
    )
    assert main(base_args(cifar_root, tmp_path / "mlp", "--set", "model.width=8")) == 2
    assert "width" in capsys.readouterr().err.splitlines()[-1]
    capsys.readouterr()
    neg = base_args(cifar_root, tmp_path / "neg", "--set", "model.width=-1")
    assert_one_line_config_error(neg, "model.width", capsys)


@pytest.mark.parametrize("device, index", [("cuda", 0), ("cuda:1", 1)])
def test_the_memory_cap_names_the_cuda_device_by_index(monkeypatch, device, index):
    """``set_per_process_memory_fraction`` refuses a torch.device without an index (the 2026-11-28 H100 lease: every
    DDPM task of the scheduler failed on ``cuda``); the cap passes one, and the fraction of the device's memory."""
    from types import SimpleNamespace

    import fl.experiment as experiment

    calls = []

    def fraction(share, where):
        if not isinstance(where, int):  # torch's own check, on a machine without CUDA
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{where}")
        calls.append((share, where))

    monkeypatch.setenv("SHUFFLEFL_GPU_GIB", "4")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=16 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", fraction)
    experiment.cap_gpu_memory(torch.device(device))
    assert calls == [(0.25, index)]


def test_a_new_run_in_the_folder_of_an_interrupted_branch_drops_its_origin(cifar_root, tmp_path):
    """Hardening sweep L2: an --init-from run stopped before its first round left ``init_from.txt``; a plain new run
    in that folder starts from round 1, so the stale origin goes (a restart would have read it) and the ledger
    never copies it."""
    source, branch = tmp_path / "source", tmp_path / "branch"
    assert main(base_args(cifar_root, source, "--set", "train.keep_round=1")) == 0
    branch.mkdir()
    (branch / "init_from.txt").write_text(str(source / "checkpoint_round1.pt"))  # what the stopped branch left
    (branch / ".shufflefl-output").write_text("fl.run\n")
    assert main(base_args(cifar_root, branch)) == 0
    assert not (branch / "init_from.txt").exists()
    assert metrics(branch) == metrics(source)
