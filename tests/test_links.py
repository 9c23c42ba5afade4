"""No tool writes through a symbolic link planted at a path it writes (issue 69, item 1): for each command, every
file it makes is first made by a real run, then replaced by a link to a file outside the output folder, and the
command run again (its marker file's link points at a file that names the tool, so that the folder is still the
tool's own). Each file is then either replaced whole (a temporary file renamed over the link) or the command refuses
in one line, exit 2; the linked file keeps its content. A run or sweep folder that is itself a link is refused."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

import fl.synthesis.fedssyn as fedssyn
from fl.run import main as run_main
from fl.runfolder import RUN_LOCK
from fl.sweep import main as sweep_main
from lab.campaign import schedule
from lab.campaign.__main__ import main as campaign_main
from sims.mnist.__main__ import OUTPUTS as MNIST_OUTPUTS
from sims.mnist.__main__ import main as mnist_main
from sims.quadratic.__main__ import OUTPUTS as QUADRATIC_OUTPUTS
from sims.quadratic.__main__ import main as quadratic_main
from tests.benchmarks.test_bench_bad_inputs import load_bench
from tests.fl.synthesis.conftest import MeanImage, make_tiny_dataset
from tests.scripts.test_gpu_campaign import ended
from tests.sims.test_mnist import real_dataset
from theory.cli import OWNER
from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
OURS = "a user's own file, not the tool's\n"


def victim_of(tmp_path: Path, text: str = OURS) -> Path:
    """The file every planted link points at: outside the output folders, holding ``text``."""
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text(text)
    return victim


def relink(folder: Path, victim: Path, keep: tuple[str, ...] = ()) -> list[str]:
    """Every plain file directly in ``folder`` (but ``keep``) replaced by a link to ``victim``; their names."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink() and p.name not in keep)
    for name in names:
        (folder / name).unlink()
        (folder / name).symlink_to(victim)
    return names


def assert_replaced(folder: Path, names: list[str], victim: Path, text: str) -> None:
    """The linked file kept ``text``; each of ``names`` is now a real file of the tool's (no link left)."""
    assert victim.read_text() == text
    linked = [name for name in names if (folder / name).is_symlink()]
    assert not linked, f"still links: {linked}"
    assert all((folder / name).is_file() for name in names)


def one_line(err: str, *fragments: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err


def run_args(root: Path, out: Path, *extra: str) -> list[str]:
    """tests/fl/test_run.py's tiny run (4 rounds of an MLP on a tiny CIFAR-10), with per-client evaluation (so that
    clients.csv and clients.png are made) and no worker processes."""
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='iid'", "data.clients=4",
        "model.name='mlp'", "train.rounds=4", "train.batch_size=16", "train.checkpoint_every=2",
        "train.device='cpu'", "train.workers=1", "train.client_eval_every=2",
    ]  # fmt: skip
    return [*(arg for s in settings for arg in ("--set", s)), "--out", str(out), "--quiet", *extra]


@pytest.fixture
def finished(cifar_root, tmp_path) -> Path:
    out = tmp_path / "run"
    assert run_main(run_args(cifar_root, out)) == 0
    assert {"clients.png", "clients.csv", OWNER, "summary.json"} <= {p.name for p in out.iterdir()}
    return out


def test_fl_run_replaces_every_planted_link_and_never_follows_one(cifar_root, finished, tmp_path):
    victim = victim_of(tmp_path, "fl.run\n")
    names = relink(finished, victim, keep=(RUN_LOCK,))  # the lock refuses a link: tests/test_security.py
    assert {OWNER, "clients.png", "config.json", "metrics.jsonl", "checkpoint.pt", "summary.json"} <= set(names)
    assert run_main(run_args(cifar_root, finished, "--overwrite")) == 0
    assert_replaced(finished, names, victim, "fl.run\n")


def test_a_plain_resume_replaces_the_links_planted_at_what_it_writes(finished, tmp_path):
    victim = victim_of(tmp_path, "fl.run\n")
    read = (RUN_LOCK, "config.json", "checkpoint.pt", "metrics.jsonl", "provenance.json")  # what a resume reads
    names = relink(finished, victim, keep=read)
    assert {OWNER, "clients.png", "clients.csv", "summary.json"} <= set(names)
    assert run_main(["--resume", str(finished), "--quiet"]) == 0  # a finished run: its figure and summary again
    assert_replaced(finished, ["clients.png", "summary.json"], victim, "fl.run\n")  # the rest left as links


@pytest.mark.parametrize("how", ["resume", "overwrite", "new"])
def test_a_run_folder_that_is_a_link_is_refused_in_one_line(cifar_root, finished, tmp_path, capsys, how):
    link = tmp_path / "link"
    if how == "new":  # a link to an empty folder of the user's
        (tmp_path / "empty").mkdir()
        link.symlink_to(tmp_path / "empty", target_is_directory=True)
    else:
        link.symlink_to(finished, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in link.iterdir()}
    capsys.readouterr()
    argv = ["--resume", str(link), "--quiet"] if how == "resume" else run_args(cifar_root, link)
    assert run_main(argv + (["--overwrite"] if how == "overwrite" else [])) == 2
    one_line(capsys.readouterr().err, "symbolic link", str(link))
    assert {p.name: p.read_bytes() for p in link.iterdir()} == before


def test_a_fedssyn_runs_samples_figure_and_files_replace_planted_links(tmp_path, monkeypatch):
    import fl.experiment as experiment_module

    monkeypatch.setattr(fedssyn, "build_generator", lambda name, shape, n, overrides, device="cpu": MeanImage(shape, n))
    data = make_tiny_dataset(n_per_class=20, n_classes=10)
    monkeypatch.setattr(experiment_module, "load", lambda name, root=None: data)
    out = tmp_path / "run"
    argv = [
        "--set", "data.partition='split-by-class'", "--set", "data.clients=10", "--set", "model.name='mlp'",
        "--set", "train.rounds=2", "--set", "train.device='cpu'", "--set", "train.workers=1",
        "--set", "synthetic.method='fedssyn'", "--set", "synthetic.n_tilde=6", "--set", "synthetic.epochs=1",
        "--set", f"synthetic.cache_dir='{tmp_path / 'cache'}'", "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert run_main(argv) == 0
    victim = victim_of(tmp_path, "fl.run\n")
    names = relink(out, victim, keep=(RUN_LOCK,))
    assert "synthetic_samples.png" in names
    assert run_main([*argv, "--overwrite"]) == 0
    assert_replaced(out, names, victim, "fl.run\n")


def planted(tmp_path: Path, folder: str, names: list[str], tool: str) -> tuple[Path, Path]:
    """A new output folder with a link to one victim file at each of ``names``: (the folder, the victim)."""
    out = tmp_path / folder
    out.mkdir()
    victim = victim_of(tmp_path, tool)
    for name in names:
        (out / name).symlink_to(victim)
    return out, victim


def test_sims_quadratic_replaces_every_planted_link(tmp_path):
    names = [OWNER, *QUADRATIC_OUTPUTS]
    out, victim = planted(tmp_path, "quadratic", names, "sims.quadratic\n")
    assert quadratic_main(["--quick", "--quiet", "--out", str(out)]) == 0  # its own folder: no --overwrite
    assert_replaced(out, names, victim, "sims.quadratic\n")
    assert {p.name for p in out.iterdir()} == set(names)  # nothing it writes was left out of the plant


def test_sims_mnist_replaces_every_planted_link(tmp_path):
    names = [OWNER, *MNIST_OUTPUTS]
    out, victim = planted(tmp_path, "mnist", names, "sims.mnist\n")
    argv = ["--quick", "--quiet", "--dataset", real_dataset(), "--per-class", "20", "--rounds", "2", "--epochs", "1",
            "--p", "0", "0.5", "--seeds", "1", "--out", str(out)]  # fmt: skip
    assert mnist_main(argv) == 0
    assert_replaced(out, names, victim, "sims.mnist\n")
    assert {p.name for p in out.iterdir()} == set(names)  # nothing it writes was left out of the plant


def sweep_args(root: Path, out: Path) -> list[str]:
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='iid'", "data.clients=2",
        "model.name='mlp'", "train.rounds=2", "train.batch_size=32", "train.device='cpu'", "train.workers=1",
    ]  # fmt: skip
    return [*(arg for s in settings for arg in ("--set", s)), "--vary", "train.lr=0.1", "--no-base", "--out",
            str(out), "--quiet"]  # fmt: skip


def test_fl_sweep_replaces_its_planted_links_and_refuses_a_linked_run_folder(cifar_root, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert sweep_main(sweep_args(cifar_root, out)) == 0
    victim = victim_of(tmp_path, "fl.sweep\n")
    names = relink(out, victim)
    assert {OWNER, "sweep.png", "sweep.json", "table.csv"} <= set(names)
    assert sweep_main(sweep_args(cifar_root, out)) == 0  # the run is reused; the sweep's files written again
    assert_replaced(out, names, victim, "fl.sweep\n")

    users = tmp_path / "users"  # a run folder, then the folder of runs, swapped for a link to a user's folder
    for linked in (out / "train.lr=0.1" / "seed0", out / "train.lr=0.1"):
        users.mkdir()
        (users / "notes.txt").write_text(OURS)
        moved = tmp_path / "moved"
        linked.rename(moved)
        linked.symlink_to(users, target_is_directory=True)
        capsys.readouterr()
        assert sweep_main(sweep_args(cifar_root, out)) == 2
        one_line(capsys.readouterr().err, "symbolic link", str(linked))
        assert [p.name for p in users.iterdir()] == ["notes.txt"] and (users / "notes.txt").read_text() == OURS
        linked.unlink()
        moved.rename(linked)
        (users / "notes.txt").unlink()
        users.rmdir()
    capsys.readouterr()
    (tmp_path / "sweep-link").symlink_to(out, target_is_directory=True)  # the sweep folder itself
    assert sweep_main(sweep_args(cifar_root, tmp_path / "sweep-link")) == 2
    one_line(capsys.readouterr().err, "symbolic link")


def test_gpu_bench_out_replaces_a_planted_link(tmp_path, monkeypatch):
    """scripts/gpu-bench.sh runs benchmarks/gpu_bench.py; here its main in this process, the DDPM part a stand-in
    (the JSON is written after every part and at the end: each time through a temporary file)."""
    bench = load_bench("gpu_bench")
    monkeypatch.setattr(bench, "ddpm", lambda device, sizes: [{"part": "ddpm", "tflops": 1.0}])
    victim = victim_of(tmp_path)
    out = tmp_path / "bench" / "gpu.json"
    out.parent.mkdir()
    out.symlink_to(victim)
    assert bench.main(["--dry", "--parts", "ddpm", "--out", str(out)]) == 0
    assert_replaced(out.parent, [out.name], victim, OURS)
    assert json.loads(out.read_text())["complete"] is True


def campaign_env(tmp_path: Path, monkeypatch, plan: list[dict]) -> Path:
    store = tmp_path / "store"
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    for key, value in {"SHUFFLEFL_RUNS": str(store), "CAMPAIGN_PLAN": str(tmp_path / "plan.json"),
                       "CAMPAIGN_LEDGER": str(tmp_path / "ledger"), "CAMPAIGN_JOBS": "1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    return store


def test_the_campaign_refuses_a_linked_log_before_it_starts(tmp_path, monkeypatch, capsys):
    store = campaign_env(tmp_path, monkeypatch, [{"name": "t", "priority": 1, "command": ["true"]}])
    victim = victim_of(tmp_path)
    (store / "logs").mkdir(parents=True)
    (store / "logs" / "campaign.log").symlink_to(victim)
    assert campaign_main(["start", "all"]) == 2
    one_line(capsys.readouterr().err, "symbolic link", "campaign.log")
    assert victim.read_text() == OURS and not (store / "campaign" / "status.json").exists()


def test_a_campaign_task_whose_log_is_a_link_fails_and_writes_nothing_through_it(tmp_path, monkeypatch):
    plan = [{"name": "linked", "priority": 1, "command": ["bash", "-c", "echo ran"]},
            {"name": "plain", "priority": 2, "command": ["bash", "-c", "echo ran"]}]  # fmt: skip
    store = campaign_env(tmp_path, monkeypatch, plan)
    monkeypatch.setenv("CAMPAIGN_POLL_SECONDS", "0.05")
    victim = victim_of(tmp_path)
    (store / "logs").mkdir(parents=True)
    (store / "logs" / "linked.log").symlink_to(victim)
    assert campaign_main(["start", "all"]) == 0  # the scheduler, in its own process, launches the tasks
    rows = {row["name"]: row for row in ended(store)["tasks"]}
    assert rows["linked"]["state"] == "failed" and "symbolic link" in rows["linked"]["note"]
    assert rows["plain"]["state"] == "done" and (store / "logs" / "plain.log").read_text() == "ran\n"
    assert victim.read_text() == OURS


def fleet_rows(store: Path) -> list[dict]:
    return [{"name": name, "command": ["bash", "-c", "scripts/resumable.sh", "x", str(store / "runs" / name),
                                       "--quiet"]} for name in ("a", "b")]  # fmt: skip


def test_a_fleets_spec_replaces_a_planted_link(tmp_path):
    store, victim = tmp_path / "store", victim_of(tmp_path)
    (store / "campaign").mkdir(parents=True)
    (store / "logs").mkdir()
    (store / "campaign" / "fleet-a.json").symlink_to(victim)
    running: dict = {}
    schedule.start_fleet(fleet_rows(store), store, {"PATH": os.environ["PATH"], "PYTHON": "true"}, running)
    for process in {id(p): p for p in running.values()}.values():
        process.wait(timeout=60)
    assert_replaced(store / "campaign", ["fleet-a.json"], victim, OURS)
    assert len(json.loads((store / "campaign" / "fleet-a.json").read_text())) == 2


@pytest.mark.parametrize("log", ["fleet-a.log", "b.log"])
def test_a_fleet_with_a_linked_log_is_refused_before_anything_is_written(tmp_path, log):
    store, victim = tmp_path / "store", victim_of(tmp_path)
    (store / "logs").mkdir(parents=True)
    (store / "logs" / log).symlink_to(victim)
    running: dict = {}
    with pytest.raises(InputError, match="symbolic link"):
        schedule.start_fleet(fleet_rows(store), store, {"PATH": os.environ["PATH"], "PYTHON": "true"}, running)
    assert not running and not (store / "campaign" / "fleet-a.json").exists() and victim.read_text() == OURS


def test_gpu_check_summary_replaces_planted_links(tmp_path):
    """scripts/gpu_check_summary.py (the end of scripts/gpu-check.sh), its main in this process."""
    spec = importlib.util.spec_from_file_location("gpu_check_summary", ROOT / "scripts" / "gpu_check_summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    out = tmp_path / "out"
    out.mkdir()
    (out / "parts.jsonl").write_text(json.dumps({"part": "x", "seconds": 1.0, "rc": 0, "command": "x"}) + "\n")
    victim = victim_of(tmp_path)
    for name in ("summary.json", "summary.md"):
        (out / name).symlink_to(victim)
    assert summary.main(out) == 0
    assert_replaced(out, ["summary.json", "summary.md"], victim, OURS)
