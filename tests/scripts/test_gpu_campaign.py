"""scripts/gpu-campaign.sh and its scheduler scripts/campaign.py, on the CPU: `start all` launches every open task in
priority order under a limit of 3 (at least 6 of them, with a stand-in Python that plays fl.run's part), each
dependent arm once the kept round-49 / round-19 / round-23 state exists; the per-minute report and the end summary
(a stand-in nvidia-smi); a lease cut off mid-way (its processes killed) whose packed files, on a fresh store, let the
runs continue to the numbers of uninterrupted ones, bit for bit (tiny FedCOG runs on a tiny CIFAR-10); what each
group asks Python for; what `wait` packs; bad arguments."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from fl.data.formats import write_pickle_batch
from fl.quality import report_name
from fl.run import main as run_main
from fl.synthesis.fedssyn import KEY_FILE, PACKED_FILE, cache_key
from lab.campaign import pack, schedule, tasks
from lab.campaign import status as store_status
from lab.campaign.__main__ import main as campaign_main

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-campaign.sh"


def stand_ins(tmp_path: Path, sleep: float = 0.0) -> tuple[Path, Path, Path]:
    """A folder holding a stand-in ``nvidia-smi`` (87 % busy, 23456 of 81559 MiB used, 12288 MiB free) and a
    stand-in Python that records every call (``calls.txt``: its arguments; ``times.txt``: start and end) and plays
    fl.run: ``--out`` gets config.json, the kept checkpoint_round{K}.pt of ``--set train.keep_round=K`` and
    summary.json after ``sleep`` seconds; an ``--init-from`` file missing at the start is recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in\n  *memory.free*) echo 12288 ;;\n  *utilization.gpu*) echo "87, 23456, 81559" ;;\n'
        '  *) echo "NVIDIA Stand-in, 81559 MiB, 580.00" ;;\nesac\n'
    )
    calls, times, python = tmp_path / "calls.txt", tmp_path / "times.txt", bin_dir / "python"
    python.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
echo "start $(date +%s.%N) $*" >> {times}
out=""; init=""; keep=""; prev=""
for arg in "$@"; do
  case $prev in
    --out) out=$arg ;;
    --init-from) init=$arg ;;
    --set) case $arg in train.keep_round=*) keep=${{arg#train.keep_round=}} ;; esac ;;
  esac
  prev=$arg
done
if [ -n "$init" ] && [ ! -f "$init" ]; then echo "missing $init" >> {times}; fi
sleep {sleep}
if [ -n "$out" ]; then
  mkdir -p "$out" && echo '{{}}' > "$out/config.json"
  if [ -n "$keep" ]; then echo x > "$out/checkpoint_round$keep.pt"; fi
  echo '{{}}' > "$out/summary.json"
fi
echo "end $(date +%s.%N) $*" >> {times}
""")  # fmt: skip
    for tool in (smi, python):
        tool.chmod(0o755)
    return bin_dir, calls, times


def environment(tmp_path: Path, bin_dir: Path, python: str, **more: str) -> dict[str, str]:
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "SHUFFLEFL_RUNS": str(tmp_path / "store"),
        "OUT": str(tmp_path / "out"), "SHUFFLEFL_DATA": str(tmp_path), "PYTHON": python,
        "CAMPAIGN_PYTHON": sys.executable, "CAMPAIGN_POLL_SECONDS": "0.05", "CAMPAIGN_REPORT_SECONDS": "1",
        "CAMPAIGN_LEDGER": str(tmp_path / "ledger"), **more,
    }  # fmt: skip


def campaign_call(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)


def ended(store: Path, timeout: float = 60) -> dict:
    """The status once the scheduler has ended (so that no test leaves it running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = store_status.read_status(store)
        if status and status.get("ended"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"the scheduler did not end: {store_status.read_status(store)}")


def overlap(intervals: list[tuple[float, float, int]]) -> int:
    """The most slots held at once by (start, end, slots) intervals."""
    events = sorted([(s, w) for s, _, w in intervals] + [(e, -w) for _, e, w in intervals], key=lambda x: (x[0], x[1]))
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


@pytest.mark.slow  # ~20 stand-in tasks of 1 s, three at a time, and the reports: 28 s on 2 cores
def test_start_all_runs_every_open_task_by_priority_three_at_a_time_after_its_state(tmp_path):
    bin_dir, _, times = stand_ins(
        tmp_path, sleep=1.0
    )  # long enough for a report to see arms waiting, even on a busy machine
    env = environment(tmp_path, bin_dir, str(bin_dir / "python"), CAMPAIGN_JOBS="3")
    done = campaign_call(env, "start", "all", "3600")  # an hour: every DynaFed arm's predicted minutes fit
    print(done.stdout)  # the per-minute report (here every second) and the end summary
    assert done.returncode == 0, done.stderr
    status = ended(tmp_path / "store")
    rows = status["tasks"]
    planned = [t for t in tasks.plan(tmp_path / "store") if "all" in t.groups]
    assert [r["name"] for r in rows] == [t.name for t in planned] and len(rows) >= 6
    assert all(r["state"] == "done" for r in rows), [r for r in rows if r["state"] != "done"]
    # three at a time, as the scheduler saw it and as the processes ran (the DDPM trainer holds all 3 slots)
    assert overlap([(r["start"], r["end"], min(r["slots"], 3)) for r in rows]) == 3
    lines = times.read_text().splitlines()
    assert not any(line.startswith("missing") for line in lines)  # every --init-from file was there at the start
    spans: dict[str, list[float]] = {}
    for line in lines:
        _, stamp, call = line.split(" ", 2)
        if not call.startswith("-c"):  # the device line's torch version
            spans.setdefault(call, []).append(float(stamp))
    assert len(spans) >= 6 and overlap([(s, e, 1) for s, e in spans.values()]) <= 3
    # priority order among the tasks that wait for nothing; each dependent after its source wrote the state
    free = sorted((r for r in rows if not r["needs"]), key=lambda r: r["start"])
    assert [r["priority"] for r in free] == sorted(r["priority"] for r in free)
    by_name = {r["name"]: r for r in rows}
    kept = {r["needs"].rsplit("_", 1)[1] for r in rows if r["needs"]}
    assert kept == {"round49.pt", "round19.pt", "round23.pt"}
    for row in rows:
        if row["needs"]:
            assert row["start"] >= by_name[row["after"]]["end"] - 0.5, row["name"]
    fedcog = by_name["fedcog_fmnist_niid1_seed0_fedcog"]
    assert fedcog["needs"] == "runs/fedcog_fmnist_niid1_seed0/checkpoint_round49.pt"
    assert (
        by_name["hfmds_fmnist_shards_seed2_fedavg"]["needs"]
        == "runs/hfmds_fmnist_shards_seed2_hfmds/checkpoint_round19.pt"
    )
    # the report and the summary
    assert "GPU 87 %, 23456 / 81559 MiB" in done.stdout and "running (limit 3)" in done.stdout
    assert "waiting for a slot (" in done.stdout
    assert "waiting for the state they start from (" in done.stdout and "_fedcog (after fedcog_fmnist_" in done.stdout
    assert f"finished ({len(rows)}): ddpm_sets_seed0 " in done.stdout and "== summary after" in done.stdout
    assert "back (1 files" in done.stdout  # the records: nothing unfinished, no DDPM set


def test_the_limit_comes_from_cores_and_free_gpu_memory(tmp_path, monkeypatch):
    bin_dir, _, _ = stand_ins(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("CAMPAIGN_JOBS", raising=False)
    monkeypatch.setattr(schedule.os, "cpu_count", lambda: 16)
    assert schedule.job_limit() == (3, "16 CPU cores, 12288 MiB GPU memory free at 4 GiB a run")
    monkeypatch.setenv("CAMPAIGN_GIB_PER_RUN", "0.5")
    assert schedule.job_limit()[0] == 16
    monkeypatch.setenv("CAMPAIGN_JOBS", "5")
    assert schedule.job_limit() == (5, "CAMPAIGN_JOBS")
    monkeypatch.delenv("CAMPAIGN_JOBS")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi at all
    assert schedule.job_limit() == (16, "16 CPU cores, no GPU")


def tiny_cifar(root: Path) -> Path:
    """tests/conftest.py's ``cifar_root``: 5 x 40 training and 30 test images whose mean depends on the label."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 40) for i in range(1, 6)] + [("test_batch", 30)]:
        labels = rng.integers(0, 10, n)
        data = np.clip(rng.normal(100 + 12 * labels[:, None], 30, (n, 3072)), 0, 255).astype(np.uint8)
        write_pickle_batch(folder / name, {"data": data, "labels": labels.tolist()})
    return root


def tiny_args(root: Path, rounds: int, *extra: str) -> list[str]:
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='iid'", "data.clients=4",
        "model.name='fedcog-cnn'", f"train.rounds={rounds}", "train.batch_size=16", "train.checkpoint_every=2",
        "train.device='cpu'", "train.participation=0.5", "train.local_steps=3", *extra,
    ]  # fmt: skip
    return [arg for setting in settings for arg in ("--set", setting)]


ROUNDS = 14  # the FedCOG arms' (rounds 5-14 with FedCOG)


def rows_of(run: Path) -> list[dict]:
    """A run's metrics rows without their timings (the whole lines: a row being written is not yet one)."""
    text = (run / "metrics.jsonl").read_text() if (run / "metrics.jsonl").exists() else ""
    rows = [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]
    return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in rows]


@pytest.mark.slow  # ~6 Python processes, mostly one after the other: 39-74 s on 2 busy cores
def test_a_lease_cut_off_mid_way_continues_from_its_files_as_if_never_stopped(tmp_path):
    """FedAvg keeps its round-3 state; two FedCOG arms start from it (FedCOG from round 5). Each arm is killed
    (SIGKILL) mid-way, then the scheduler; the files packed then, unpacked into a fresh store by `resume`, carry
    both arms to the metrics of uninterrupted runs, bit for bit."""
    data, store = tiny_cifar(tmp_path / "data"), tmp_path / "store"
    fedcog = ["method.name='fedcog'", "method.start_round=5", "method.generate_steps=2", "method.kd_batch_size=5"]
    kept = "runs/src/checkpoint_round3.pt"
    arms = {"arm1": ["method.n_generate=12"], "arm2": ["method.n_generate=8"]}
    plan = [{"name": "src", "priority": 1, "run": "runs/src", "args": tiny_args(data, 4, "train.keep_round=3")}]
    plan += [
        {"name": name, "priority": 2, "run": f"runs/{name}", "needs": kept, "after": "src",
         "args": [*tiny_args(data, ROUNDS, *fedcog, *more), "--init-from", str(store / kept)]}
        for name, more in arms.items()
    ]  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    bin_dir, _, _ = stand_ins(tmp_path)
    env = environment(tmp_path, bin_dir, sys.executable, CAMPAIGN_JOBS="3", CAMPAIGN_PLAN=str(tmp_path / "plan.json"))
    lease = subprocess.Popen(["bash", str(SCRIPT), "start", "all", "120"], env=env, stdout=subprocess.PIPE, text=True)
    cut = set()
    deadline = time.monotonic() + 120
    while len(cut) < len(arms) and time.monotonic() < deadline:  # each arm killed past its first FedCOG round
        status = store_status.read_status(store)
        assert not status or status["ended"] is None, "the lease ended before its arms could be cut off"
        for row in status["tasks"] if status else []:
            run = store / row["run"]
            if row["name"] in arms and row["name"] not in cut and row["state"] == "running":
                if (run / "checkpoint.pt").exists() and len(rows_of(run)) >= 6:
                    os.killpg(row["pid"], signal.SIGKILL)  # mid-round, as when the machine goes
                    cut.add(row["name"])
        time.sleep(0.02)
    os.kill(store_status.read_status(store)["pid"], signal.SIGKILL)  # and the scheduler
    first, _ = lease.communicate(timeout=60)
    print(first)
    assert lease.returncode == 0
    assert all(len(rows_of(store / "runs" / name)) < ROUNDS for name in arms)  # cut off mid-way
    assert "will resume (2): arm1 (round " in first and "finished (1): src" in first
    back = sorted((tmp_path / "out").iterdir())
    sizes = {p.name: p.stat().st_size for p in back}
    print("packed:", sizes)
    assert len(back) <= 8 and all(size < 16 * 2**20 for size in sizes.values())
    assert [p.name for p in back] == ["records-1.tgz", "state-1.tar"]
    with tarfile.open(tmp_path / "out" / "state-1.tar") as archive:
        listed = archive.getnames()
    names = set(listed)
    assert len(names) == len(listed)  # the round-3 state the two arms start from, once
    assert {"runs/arm1/checkpoint.pt", "runs/arm2/checkpoint.pt", "runs/src/checkpoint_round3.pt"} <= names
    assert "runs/src/checkpoint.pt" not in names  # src finished: only the state the arms start from
    # the uninterrupted runs, in this process
    reference = tmp_path / "reference"
    assert run_main([*tiny_args(data, 4, "train.keep_round=3"), "--out", str(reference / "src"), "--quiet"]) == 0
    for name, more in arms.items():
        start = ["--init-from", str(reference / "src" / "checkpoint_round3.pt")]
        args = [*tiny_args(data, ROUNDS, *fedcog, *more), *start, "--out", str(reference / name), "--quiet"]
        assert run_main(args) == 0
    # the next lease: a fresh machine, the files carried
    carried = tmp_path / "carried"
    shutil.copytree(tmp_path / "out", carried)
    shutil.rmtree(store)
    env["OUT"] = str(tmp_path / "out2")
    env["ACCEPT_CODE_CHANGE"] = "1"  # the next lease may run newer code (recorded); so may this test, where others edit
    second = campaign_call(env, "resume", "120", *map(str, sorted(carried.iterdir())))
    print(second.stdout)
    assert second.returncode == 0, second.stderr
    assert "finished (2): arm1 " in second.stdout and "finished before (1): src" in second.stdout
    for name in arms:
        assert f"runs/{name}: unpacked (" in second.stdout and "resumable)" in second.stdout  # not from round 1
        assert rows_of(store / "runs" / name) == rows_of(reference / name), name
    ended(store)


def recording_start(tmp_path, group: str, wanted, done_arms: tuple[str, ...] = (), kept: str = "") -> tuple[list, Path]:
    """`start GROUP 0` with the stand-in Python on a store whose ``done_arms`` have finished (config, summary, their
    round-19 state) and where ``kept`` (a checkpoint) exists; the recorded calls once ``wanted(calls)`` holds (the
    tasks run in the scheduler, in sessions of their own), after the scheduler ended."""
    store = tmp_path / "store"
    for name in done_arms:
        arm = store / "runs" / name
        arm.mkdir(parents=True)
        for file in ("config.json", "summary.json", "checkpoint_round19.pt"):
            (arm / file).write_text("{}")
    if kept:
        (store / kept).parent.mkdir(parents=True, exist_ok=True)
        (store / kept).write_text("{}")
        (store / kept).parent.joinpath(".shufflefl-output").write_text("fl.run\n")  # as fl.run's folder holds it
    bin_dir, calls, _ = stand_ins(tmp_path)
    done = campaign_call(environment(tmp_path, bin_dir, str(bin_dir / "python")), "start", group, "0")
    assert done.returncode == 0, done.stderr
    ended(store)
    lines = calls.read_text().splitlines() if calls.exists() else []
    assert wanted(lines), lines
    return lines, store


def fl_runs(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("-m fl.run")]


def test_the_seeds_group_runs_fedavg_beside_dynafed_for_seeds_1_and_2(tmp_path):
    arms = ("dynafed_fmnist_a001_paper_n1000_dsa_seed1", "dynafed_fmnist_a001_paper_n1000_dsa_seed2")
    lines, store = recording_start(tmp_path, "seeds", lambda c: len(fl_runs(c)) == 2, arms)
    for seed in (1, 2):
        (call,) = [c for c in fl_runs(lines) if f"fedavg_from19_seed{seed} " in c]
        assert f"--set train.seed={seed}" in call and "--set train.estimate_every=20" in call
        assert f"--init-from {store}/runs/dynafed_fmnist_a001_paper_n1000_dsa_seed{seed}/checkpoint_round19.pt" in call


def test_the_controls_group_branches_dsa_off_and_n0_from_seed_0(tmp_path):
    lines, store = recording_start(
        tmp_path, "controls", lambda c: len(fl_runs(c)) == 3, ("dynafed_fmnist_a001_paper_n1000_dsa",)
    )
    kept = f"--init-from {store}/runs/dynafed_fmnist_a001_paper_n1000_dsa/checkpoint_round19.pt"
    calls = fl_runs(lines)
    (none,) = [c for c in calls if "paper_n1000_none " in c]
    (n0,) = [c for c in calls if "paper_n0_dsa " in c]
    (fedavg,) = [c for c in calls if "fedavg_from19 " in c]
    assert 'method.augment="none"' in none and "method.iterations=1000" in none and kept in none
    assert "method.iterations=0" in n0 and kept in n0 and kept in fedavg


def test_the_ddpm_sets_group_trains_seeds_0_and_1(tmp_path):
    lines, store = recording_start(tmp_path, "ddpm-sets", lambda c: sum("scripts/ddpm_sets.py" in x for x in c) == 2)
    trainers = sorted(c for c in lines if c.startswith("scripts/ddpm_sets.py"))
    assert trainers == [
        f'scripts/ddpm_sets.py --config configs/fedssyn_fmnist_ddpm.toml --set train.seed={seed} '
        f'--set method.cache_dir="{store}/synthetic" --set method.min_steps=2000 --workers 4'
        for seed in (0, 1)
    ]  # fmt: skip
    assert not fl_runs(lines)


def test_the_seeds_dynafed_group_runs_the_dynafed_arms_of_seeds_1_and_2_alone(tmp_path):
    lines, store = recording_start(tmp_path, "seeds-dynafed", lambda c: len(fl_runs(c)) == 2)
    runs = fl_runs(lines)
    assert not any("fedavg" in c for c in runs)
    for seed in (1, 2):
        (call,) = [c for c in runs if f"--set train.seed={seed} " in c]
        assert call.startswith("-m fl.run --config configs/paper/dynafed_fmnist_a001_dynafed.toml")
        assert "--set method.iterations=1000" in call and '--set method.augment="dsa"' in call
        assert "--set train.keep_round=19" in call and "--set train.estimate_every=20" in call
        assert call.endswith(f"--out {store}/runs/dynafed_fmnist_a001_paper_n1000_dsa_seed{seed} --overwrite --quiet")


def test_the_n3000_group_runs_the_code_settings_with_fedavg_from_round_23(tmp_path):
    kept = "runs/dynafed_fmnist_a001_code_n3000_dsa/checkpoint_round23.pt"  # as the DynaFed arm writes it
    lines, store = recording_start(tmp_path, "n3000", lambda c: len(fl_runs(c)) == 2, kept=kept)
    dynafed = next(c for c in fl_runs(lines) if "_code.toml" in c)
    fedavg = next(c for c in fl_runs(lines) if c != dynafed)
    runs = store / "runs"
    assert dynafed.startswith("-m fl.run --config configs/paper/dynafed_fmnist_a001_code.toml")
    assert "--set method.iterations=3000" in dynafed and "--set train.keep_round=23" in dynafed
    assert dynafed.endswith(f"--out {runs}/dynafed_fmnist_a001_code_n3000_dsa --overwrite --quiet")
    assert fedavg.startswith("-m fl.run --config configs/paper/dynafed_fmnist_a001.toml")
    assert f"--init-from {runs}/dynafed_fmnist_a001_code_n3000_dsa/checkpoint_round23.pt" in fedavg
    assert "--set train.estimate_every=20" in fedavg and fedavg.endswith("fedavg_from23 --overwrite --quiet")


def test_the_bench_group_runs_the_gpu_bench_then_the_gpu_tests(tmp_path):
    lines, store = recording_start(tmp_path, "bench", lambda c: any("pytest" in x for x in c))
    bench = lines.index(f"benchmarks/gpu_bench.py --out {store}/logs/gpu_bench.json")
    assert lines[bench + 1] == "-m pytest -q -m gpu tests/fl/test_gpu.py -p no:cacheprovider"


def generator_folder(cache: Path, client: int, payload: int = 1000, unpacked: bool = False) -> str:
    """A finished DDPM folder as fl.synthesis.pack reads it (key, generator.json, one set); ``unpacked``: as unpacked
    from an earlier lease (packed.json, no weights)."""
    key = {"client": client, "config": {"generator": "ddpm"}, "data": "test"}
    folder = cache / f"client{client}-{cache_key(key)}"
    folder.mkdir(parents=True)
    set_key = {"n_tilde": 4, "client": client}
    name = f"synthetic-{cache_key(set_key)}"
    (folder / KEY_FILE).write_text(json.dumps({"generator": key, "sets": {f"{name}.npz": set_key}}))
    (folder / "generator.json").write_text("{}")
    (folder / f"{name}.npz").write_bytes(os.urandom(payload))
    (folder / f"{name}.json").write_text("{}")
    if unpacked:
        (folder / PACKED_FILE).write_text("{}")
    return folder.name


def test_wait_packs_the_records_and_the_new_ddpm_sets_never_a_checkpoint(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    run = store / "runs" / "dynafed_fmnist_a001_paper_n1000_dsa"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5}\n')
    for name in ("dynafed_synthesis.pt", "checkpoint.pt", "checkpoint_round19.pt"):
        (run / name).write_bytes(b"x")
    new = generator_folder(store / "synthetic", 0)
    generator_folder(store / "synthetic", 1, unpacked=True)  # came from an earlier lease: home already
    bin_dir, _, _ = stand_ins(tmp_path)
    done = campaign_call(environment(tmp_path, bin_dir, "python3"), "wait", "0")
    assert done.returncode == 0, done.stderr
    assert "no campaign in" in done.stdout and "GPU 87 %" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["ddpm_sets.tar", "records-1.tgz"]  # nothing else comes back
    with tarfile.open(out / "records-1.tgz") as archive:
        names = archive.getnames()
    assert "runs/dynafed_fmnist_a001_paper_n1000_dsa/metrics.jsonl" in names
    assert "runs/dynafed_fmnist_a001_paper_n1000_dsa/dynafed_synthesis.pt" in names
    assert not any(n.endswith(".pt") and "checkpoint" in n for n in names)
    with tarfile.open(out / "ddpm_sets.tar") as archive:
        folders = {n.split("/")[0] for n in archive.getnames() if "/" in n}
    assert folders == {new}


@pytest.mark.parametrize(
    "args",
    [[], ["start"], ["start", "everything"], ["stop"], ["start", "ddpm-sets", "soon"], ["start", "n3000", "60", "more"],
     ["wait", "-1"], ["resume", "60"], ["resume", "soon", "a.tar"]],
)  # fmt: skip
def test_a_bad_call_is_one_usage_line_and_touches_nothing(tmp_path, args):
    env = {"PATH": "/usr/bin:/bin", "SHUFFLEFL_RUNS": str(tmp_path / "store"), "OUT": str(tmp_path / "out")}
    done = campaign_call(env, *args, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("usage: ") and len(done.stderr.splitlines()) == 1
    assert "all|ddpm-sets|fedcog|hfmds|seeds-dynafed|seeds|controls|n3000|bench" in done.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()


def test_a_plan_of_no_such_group_says_so_in_one_line():
    done = subprocess.run(["bash", "scripts/gpu-campaign.sh", "plan", "everything"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "no group 'everything'; the groups: all, ddpm-sets" in done.stderr


def test_runs_finished_in_the_ledger_are_left_out(tmp_path):
    """A run the ledger holds finished (made on the CPU, say) is not run again, unless an open task starts from its
    state: the ledger keeps no checkpoint, so a FedAvg base whose FedCOG arm is still open runs again."""
    planned = [t for t in tasks.plan(tmp_path / "store") if "fedcog" in t.groups]
    ledger = tmp_path / "ledger"
    for name in ("fedcog_fmnist_niid1_code_seed0", "fedcog_fmnist_niid1_code_seed0_fedcog",
                 "fedcog_fmnist_niid2_code_seed0"):  # fmt: skip
        (ledger / "runs" / name).mkdir(parents=True)
        (ledger / "runs" / name / "summary.json").write_text("{}")
    kept, skipped = tasks.open_tasks(planned, ledger)
    assert skipped == ["fedcog_fmnist_niid1_code_seed0", "fedcog_fmnist_niid1_code_seed0_fedcog"]
    names = {t.name for t in kept}
    assert {"fedcog_fmnist_niid2_code_seed0", "fedcog_fmnist_niid2_code_seed0_fedcog"} <= names
    assert len(kept) == len(planned) - 2


def test_a_ddpm_set_whose_quality_report_the_ledger_holds_is_left_out(tmp_path):
    """A seed's DDPM set made anywhere (the CPU, say) is done once the ledger holds its quality report at the
    campaign's min_steps; a report of that seed's 20-epoch set is not it."""
    planned = [t for t in tasks.plan(tmp_path / "store") if "ddpm-sets" in t.groups]
    ledger = tmp_path / "ledger"
    (ledger / "quality").mkdir(parents=True)
    (ledger / "quality" / "ddpm-fmnist-seed1.json").write_text("{}")
    assert tasks.open_tasks(planned, ledger) == (planned, [])
    made = {"generator": "ddpm", "dataset": "fmnist", "seed": 0, "min_steps": tasks.DDPM_STEPS}
    assert planned[0].record == f"quality/{report_name(made)}"  # the name python -m fl.quality's report gets
    (ledger / planned[0].record).write_text("{}")
    kept, skipped = tasks.open_tasks(planned, ledger)
    assert skipped == ["ddpm_sets_seed0"] and [t.name for t in kept] == ["ddpm_sets_seed1"]


def test_an_out_of_memory_task_goes_back_to_the_queue_with_fewer_at_a_time(tmp_path):
    """A task whose log says CUDA ran out of memory is launched again (at most schedule.MAX_RETRIES times) and the
    admission limit drops to what was running; a task failing otherwise stays failed."""
    flag = tmp_path / "tried"
    oom = f'if [ ! -f {flag} ]; then touch {flag}; echo "torch.OutOfMemoryError: CUDA out of memory"; exit 1; fi'
    plan = [
        {"name": "greedy", "priority": 1, "command": ["bash", "-c", oom]},
        {"name": "broken", "priority": 1, "command": ["bash", "-c", "echo 'ValueError: no'; exit 3"]},
        {"name": "slow", "priority": 1, "command": ["bash", "-c", "sleep 1"]},
    ]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    bin_dir, _, _ = stand_ins(tmp_path)
    env = environment(tmp_path, bin_dir, sys.executable, CAMPAIGN_JOBS="3", CAMPAIGN_PLAN=str(tmp_path / "plan.json"))
    campaign_call(env, "start", "all", "30")
    status = ended(tmp_path / "store")
    rows = {row["name"]: row for row in status["tasks"]}
    assert rows["greedy"]["state"] == "done" and rows["greedy"]["retries"] == 1
    assert rows["broken"]["state"] == "failed" and "retries" not in rows["broken"]
    assert status["limit"] < 3


def test_a_failed_part_of_the_bench_is_a_failed_task(tmp_path):
    (command,) = [task.command for task in tasks.bench(tmp_path)]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text('#!/bin/sh\ncase "$*" in *gpu_bench*) echo "CUDA out of memory"; exit 1 ;; esac\nexit 0\n')
    fake.chmod(0o755)
    done = subprocess.run(command, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(fake)}, capture_output=True)
    assert done.returncode == 1  # the benchmark's failure, though the gpu tests after it passed


def test_state_is_packed_by_value_sources_first_then_the_runs_nearest_to_finishing(tmp_path):
    store = tmp_path / "store"

    def run(name: str, rounds: int, done: int, finished: bool = False) -> dict:
        folder = store / "runs" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"train": {"rounds": rounds}}))
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"round": t}) + "\n" for t in range(1, done + 1)))
        (folder / ("summary.json" if finished else "checkpoint.pt")).write_text("{}")
        if finished:
            (folder / "checkpoint_round19.pt").write_text("x")
        return {"name": name, "run": f"runs/{name}", "priority": 3, "needs": "", "after": "",
                "state": "done" if finished else "running"}  # fmt: skip

    rows = [run("far", 50, 10), run("near", 50, 49), run("source", 50, 50, finished=True), run("mid", 50, 30)]
    rows.append({"name": "arm", "run": "runs/arm", "priority": 4, "needs": "runs/source/checkpoint_round19.pt",
                 "after": "source", "state": "waiting"})  # fmt: skip
    groups, _, _ = pack.states({"tasks": rows}, store)
    assert [name for name, _ in groups] == ["source", "near", "mid", "far"]


@pytest.mark.parametrize(
    "file, content, said",
    [
        ("status.json", '{"tasks": [], "started": 1.0', "not JSON"),
        ("status.json", "[1, 2]", "not a campaign's status"),
        ("status.json", '{"tasks": [], "started": 1.0}', "not a campaign's status"),  # no limit
        ("status.json", '{"tasks": [], "limit": 3, "started": "yesterday"}', "not a campaign's status"),
        ("previous.json", '{"done": ["a"', "not the record of earlier leases"),
        ("previous.json", '{"done": 3}', "is not a list of task names"),
    ],
)  # fmt: skip
def test_a_damaged_status_or_record_is_one_line(tmp_path, monkeypatch, capsys, file, content, said):
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(tmp_path / "store"))
    (tmp_path / "store" / "campaign").mkdir(parents=True)
    (tmp_path / "store" / "campaign" / file).write_text(content)
    if file == "previous.json":
        code = campaign_main(["unpack", str(tmp_path / "nothing.tar")])
    else:
        monkeypatch.setenv("CAMPAIGN_REPORT_SECONDS", "0")
        code = campaign_main(["watch", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, err


def memory_stand_in(bin_dir: Path, free_mib: int, total_mib: int) -> None:
    """Replace the stand-in nvidia-smi by one that reports ``free_mib`` of ``total_mib`` MiB."""
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\ncase "$*" in\n  *memory.free*) echo {free_mib} ;;\n  *memory.total*) echo {total_mib} ;;\n'
        '  *utilization.gpu*) echo "50, 1000, 24576" ;;\n  *) echo "NVIDIA Stand-in, 24576 MiB, 580.00" ;;\nesac\n'
    )


def test_admission_by_each_tasks_memory_never_commits_more_than_the_device_holds(tmp_path):
    """Three tasks of 10 GiB on a 24 GiB device (the scheduler commits 90 %): never more than two at once, even
    with three slots; each runs capped at its own memory ($SHUFFLEFL_GPU_GIB, which fl.run applies)."""
    record = tmp_path / "gib.txt"
    work = f'echo "$SHUFFLEFL_GPU_GIB" >> {record}; sleep 0.6'
    plan = [{"name": f"t{k}", "priority": 1, "gib": 10, "command": ["bash", "-c", work]} for k in range(3)]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    bin_dir, _, _ = stand_ins(tmp_path)
    memory_stand_in(bin_dir, 24000, 24576)
    env = environment(tmp_path, bin_dir, sys.executable, CAMPAIGN_JOBS="3", CAMPAIGN_PLAN=str(tmp_path / "plan.json"))
    campaign_call(env, "start", "all", "60")
    status = ended(tmp_path / "store")
    rows = status["tasks"]
    assert all(row["state"] == "done" for row in rows)
    assert overlap([(row["start"], row["end"], 1) for row in rows]) == 2
    assert record.read_text().split() == ["10", "10", "10"]


def test_a_task_with_a_large_state_starts_only_when_its_predicted_time_fits(tmp_path):
    """With 30 s of lease: a task whose state is large (it comes back only in volumes over several calls) predicted
    at 10 minutes is not started (it says why), one predicted to fit runs, and a task of a small state runs whatever
    its prediction (its state comes home in the call's archives)."""
    plan = [
        {"name": "long", "priority": 1, "large_state": True, "minutes": 10, "command": ["true"]},
        {"name": "short", "priority": 2, "large_state": True, "minutes": 0.01, "command": ["true"]},
        {"name": "small", "priority": 3, "minutes": 10, "command": ["true"]},
    ]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    bin_dir, _, _ = stand_ins(tmp_path)
    env = environment(tmp_path, bin_dir, sys.executable, CAMPAIGN_JOBS="1", CAMPAIGN_PLAN=str(tmp_path / "plan.json"))
    campaign_call(env, "start", "all", "30")
    rows = {row["name"]: row for row in ended(tmp_path / "store")["tasks"]}
    assert rows["long"]["state"] == "skipped" and "only in volumes over several calls" in rows["long"]["note"]
    assert rows["short"]["state"] == "done" and rows["small"]["state"] == "done"


@pytest.mark.slow  # real tiny runs: one fleet process, then fl.run alone for each (~20-40 s on 2 cores)
def test_with_campaign_fleet_ready_runs_start_as_one_fleet_with_the_numbers_of_fl_run(tmp_path):
    """CAMPAIGN_FLEET=3: the source run and an independent one (the ready ones) in one `python -m fl.fleet`
    process, then the source's two arms (from its round-3 state) in another; each task is done when its own run
    finished, and every run's rows are those of fl.run alone."""
    data, store = tiny_cifar(tmp_path / "data"), tmp_path / "store"
    kept = "runs/src/checkpoint_round3.pt"
    plan = [{"name": "src", "priority": 1, "run": "runs/src", "args": tiny_args(data, 4, "train.keep_round=3")}]
    plan += [
        {"name": name, "priority": 2, "run": f"runs/{name}", "needs": kept, "after": "src",
         "args": [*tiny_args(data, 6, f"train.lr={lr}"), "--init-from", str(store / kept)]}
        for name, lr in (("arm1", 0.01), ("arm2", 0.02))
    ]  # fmt: skip
    plan.append({"name": "other", "priority": 3, "run": "runs/other", "args": tiny_args(data, 3, "train.seed=1")})
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    bin_dir, _, _ = stand_ins(tmp_path)
    env = environment(tmp_path, bin_dir, sys.executable, CAMPAIGN_JOBS="3", CAMPAIGN_FLEET="3",
                      CAMPAIGN_PLAN=str(tmp_path / "plan.json"))  # fmt: skip
    campaign_call(env, "start", "all", "300", timeout=300)
    rows = {row["name"]: row for row in ended(store, 300)["tasks"]}
    assert all(row["state"] == "done" for row in rows.values()), rows
    assert rows["src"]["pid"] == rows["other"]["pid"] != rows["arm1"]["pid"] == rows["arm2"]["pid"]
    assert rows["other"]["fleet"] == "fleet-src" and rows["arm2"]["fleet"] == "fleet-arm1"
    for name, entry in [(row["name"], row) for row in plan]:
        alone = tmp_path / "alone" / name
        args = [
            a.replace(str(store / kept), str(tmp_path / "alone" / "src" / "checkpoint_round3.pt"))
            for a in entry["args"]
        ]
        assert run_main([*args, "--out", str(alone), "--quiet"]) == 0
        how = ("backend", "fleet", "workers")  # how the clients trained (a fleet, worker processes): not a number
        numbers = [
            [{k: v for k, v in r.items() if k not in how} for r in rows_of(run)]
            for run in (store / "runs" / name, alone)
        ]
        assert numbers[0] == numbers[1] and len(numbers[0]) >= 3, name


def two_slots_30_s(tmp_path, plan: list[dict]) -> list[dict]:
    """The rows of ``plan`` (CAMPAIGN_PLAN) once the scheduler ends, started with two slots and 30 s of lease."""
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    bin_dir, _, _ = stand_ins(tmp_path)
    env = environment(tmp_path, bin_dir, sys.executable, CAMPAIGN_JOBS="2", CAMPAIGN_PLAN=str(tmp_path / "plan.json"))
    campaign_call(env, "start", "all", "30")
    return ended(tmp_path / "store")["tasks"]


def test_a_task_with_a_large_state_fits_beside_the_work_already_started(tmp_path):
    """Processes share the chip in time slices: with 30 s of lease and two slots, two tasks of a large state
    predicted at 18 s each never run together (36 s of work), and one of a small state does not start beside them
    either; each starts once the chip is idle, and all three end."""
    plan = [{"name": name, "priority": k, "large_state": name != "small", "minutes": 0.3,
             "command": ["sleep", "0.5"]} for k, name in enumerate(("first", "second", "small"))]  # fmt: skip
    rows = two_slots_30_s(tmp_path, plan)
    assert all(row["state"] == "done" for row in rows)
    assert overlap([(row["start"], row["end"], 1) for row in rows]) == 1
    assert [row["name"] for row in sorted(rows, key=lambda row: row["start"])] == ["first", "second", "small"]


def test_tasks_of_a_small_state_alone_share_the_chip_whatever_their_predictions(tmp_path):
    """Without a task of a large state, the booking holds nothing: two tasks of a small state predicted past the
    lease run together."""
    plan = [{"name": f"p{k}", "priority": 1, "minutes": 5, "command": ["sleep", "0.6"]} for k in range(2)]
    rows = two_slots_30_s(tmp_path, plan)
    assert all(row["state"] == "done" for row in rows)
    assert overlap([(row["start"], row["end"], 1) for row in rows]) == 2
