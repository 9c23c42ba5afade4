"""The GPU lease's scheduler, behind ``bash scripts/gpu-campaign.sh``: the open experiments as tasks, launched in
priority order as many at a time as the machine holds, each once the state it starts from exists; a report every
minute; and what the device tool brings back packed into $OUT (the format: :mod:`fl.records.lease`).

    python scripts/campaign.py start GROUP     # write the plan of GROUP (or all) and start the scheduler in its
                                               # own session (it outlives the call that started it)
    python scripts/campaign.py watch SECONDS   # report and pack every CAMPAIGN_REPORT_SECONDS until SECONDS have
                                               # passed or every task has ended; then a one-screen summary
    python scripts/campaign.py unpack FILE...  # a previous lease's files into the store, before start
    python scripts/campaign.py schedule        # the scheduler's loop (start runs it)

A task is one command: an ``fl.run`` through scripts/resumable.sh's ``run`` (skipped when finished, resumed when
started), the DDPM sets' trainer, or the benchmark. Its priority orders the launches; ``needs`` is the file it
starts from (FedCOG's arm: its FedAvg run's checkpoint_round49.pt; HFMDs' FedAvg, FMDS and lr/10 arms: the HFMDs
run's checkpoint_round19.pt; DynaFed's FedAvg and control arms: the DynaFed arm's round-19 or round-23 state),
written by the task ``after``; ``slots``: the processes it runs (the DDPM trainer: DDPM_WORKERS). The limit on
slots at once is CAMPAIGN_JOBS, else the smaller of the CPU cores and the free GPU memory over
CAMPAIGN_GIB_PER_RUN (4) GiB; every process runs one torch thread (OMP_NUM_THREADS = 1). On top of the slots,
each task is admitted by its peak GPU memory (``gib``, else its kind's: :data:`KIND_GIB`), checked again before
every launch: the running tasks' memory plus its own stays within MARGIN of the device, and the free memory now
holds it; the task then runs capped at it (``$SHUFFLEFL_GPU_GIB``: fl.run sets
``torch.cuda.set_per_process_memory_fraction``). An out-of-memory task goes back to the queue with 1.5 times its
memory. A task whose state cannot come back (``portable`` false: DynaFed's arms) starts only when its predicted
minutes (``minutes``, else fl/cost.py's FLOPs at the planned rates or CAMPAIGN_RATES', :func:`predict`) fit in
what is left of the lease (``start``'s SECONDS); otherwise it is "skipped", saying why.

The store (SHUFFLEFL_RUNS) holds ``runs/NAME/`` and ``synthetic/`` as the experiment scripts lay them out,
``logs/NAME.log`` per task and ``campaign/status.json`` (the scheduler's state, which ``watch`` reads). What comes
back (:func:`pack`): the records of every run, the DDPM sets, then each unfinished run's state by priority, within
the device tool's limits (CAMPAIGN_MAX_FILES 8 files of CAMPAIGN_MAX_FILE_MIB 15, CAMPAIGN_MAX_TOTAL_MIB 60
together; CAMPAIGN_STATE_MIB caps the state alone). The state archives fill in priority order, so ``state-1.tar``
holds the first priorities: the one to carry to the next lease, where the code (~13 MB) and Fashion-MNIST (30 MB)
leave about 20 MiB of the tool's 64 MiB; the others continue at home. Measured checkpoints: a FedCOG arm 1.96 MB
(the server model and 10 clients' local models, which FedCOG needs), its FedAvg run 0.18 MB, an HFMDs run after a
synthesis 9.0 MB (its pool of 2,000 images), an HFMDs-protocol FedAvg 2.3 MB; no algorithm here keeps client
state, and every random draw derives from (seed, round, client), so nothing else is needed. DynaFed's runs keep
every client's Adam moments (206 MB measured at width 128), which cannot come back: an unfinished DynaFed arm
restarts from round 1.

CAMPAIGN_PLAN names a JSON list of tasks ({"name", "priority", "args" of fl.run, "run", "needs", "after",
"portable"}) that replaces the built-in plan (the tests' tiny runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.atomic import write_atomically  # noqa: E402
from fl.records.lease import (  # noqa: E402
    LEASE_FILE,
    RECORD_FILES,
    RECORDS,
    SETS,
    STATE,
    MiB,
    campaign_status,
    extract_state,
    lease_files,
    read_archive,
    write_archives,
)
from theory.errors import InputError  # noqa: E402

SEEDS = (0, 1, 2)
FINAL = ("done", "failed", "blocked", "skipped")
GROUPS = ("all", "ddpm-sets", "fedcog", "hfmds", "seeds-dynafed", "seeds", "controls", "n3000", "bench")


@dataclass(frozen=True)
class Task:
    """One command of the campaign (see the module docstring)."""

    name: str
    priority: int
    command: tuple[str, ...]
    groups: tuple[str, ...] = ("all",)
    run: str = ""  # its run folder in the store (runs/NAME), for fl.run tasks
    needs: str = ""  # the file in the store it starts from
    after: str = ""  # the task that writes ``needs``
    slots: int = 1
    portable: bool = True  # False: its state holds clients' optimiser moments, too large to come back
    gib: float = 0.0  # GPU memory it needs at its peak (0: its kind's, KIND_GIB)
    minutes: float = 0.0  # predicted minutes on the device (0: from its FLOPs at start, fl/cost.py; unknown: 0)


# Peak GPU memory by kind of task (GiB), from the lease of 2026-11-27 (one H100, 80 GiB): a DynaFed arm holds ~23
# during its synthesis (19 of it CUDA-graph pools); 16 fl.run processes held 70 (~4.4 each); a DDPM-sets trainer
# was not measured alone: 4 a worker assumed. The benchmark runs fleets up to 64 runs: 30 assumed.
KIND_GIB = {"dynafed": 24.0, "fl": 4.5, "ddpm": 4.0, "bench": 30.0}
MARGIN = 0.9  # the share of the device's memory the scheduler commits
DDPM_STEPS = 2000  # #49's goal: each client's DDPM at least this many steps (method.min_steps of the DDPM sets)


def fl_run(store: Path, name: str, *args: str) -> tuple[str, ...]:
    """scripts/resumable.sh's ``run`` of ``python -m fl.run ARGS --out STORE/runs/NAME``."""
    return ("bash", "-c", 'source scripts/resumable.sh && run "$@"', "run", f"{store}/runs/{name}", *args)


def run_task(store: Path, name: str, priority: int, groups: tuple[str, ...], *args: str, **more) -> Task:
    return Task(name, priority, fl_run(store, name, *args), groups, run=f"runs/{name}", **more)


def ddpm_sets(store: Path, python: str, workers: int) -> list[Task]:
    """(1) Each client's DDPM of configs/fedssyn_fmnist_ddpm.toml for seeds 0 and 1, ``workers`` clients at once,
    each for at least DDPM_STEPS steps (``method.min_steps``: the smallest clients' 80-100 steps at 20 epochs
    sampled noise on the last lease). An arm that uses these sets sets ``method.min_steps`` alike."""
    tasks = []
    for seed in (0, 1):
        command = (python, "scripts/ddpm_sets.py", "--config", "configs/fedssyn_fmnist_ddpm.toml", "--set")
        command += (f"train.seed={seed}", "--set", f'method.cache_dir="{store}/synthetic"', "--set")
        command += (f"method.min_steps={DDPM_STEPS}", "--workers", str(workers))
        tasks.append(Task(f"ddpm_sets_seed{seed}", 1, command, ("ddpm-sets", "all"), slots=workers))
    return tasks


def fedcog(store: Path) -> list[Task]:
    """(2) FedCOG Table 1 at the paper's settings, then at the authors' code's (the paper's 400 local steps are the
    CPU's longest runs), 3 seeds, both partitions: FedAvg, and FedCOG from its state after round 49."""
    tasks, groups = [], ("fedcog", "all")
    for setting in ("", "_code"):
        for seed in SEEDS:
            for part in ("niid1", "niid2"):
                base, config = f"fedcog_fmnist_{part}{setting}_seed{seed}", f"configs/paper/fedcog_fmnist_{part}"
                kept, seeding = f"runs/{base}/checkpoint_round49.pt", ("--set", f"train.seed={seed}")
                keep = ("--set", "train.keep_round=49")
                tasks.append(run_task(store, base, 2, groups, "--config", f"{config}{setting}.toml", *seeding, *keep))
                arm = ("--config", f"{config}{setting}_fedcog.toml", *seeding, "--init-from", f"{store}/{kept}")
                tasks.append(run_task(store, f"{base}_fedcog", 2, groups, *arm, needs=kept, after=base))
    return tasks


def hfmds(store: Path) -> list[Task]:
    """(3) HFMDs on Fashion-MNIST (scripts/hfmds-experiments.sh's runs), 3 seeds, both partitions: HFMDs from round
    1; from its state after round 19 FedAvg, FMDS (the first seed only, as the script) and FedAvg at lr/10 with
    weight decay x10 (HFMDs' real-data step without the pool: ``_fedavg_alpha01``), the controls last."""
    sources, arms, controls, groups = [], [], [], ("hfmds", "all")
    for part in ("dir001", "shards"):
        for seed in SEEDS:
            base = f"hfmds_fmnist_{part}_seed{seed}"
            sets = ("--set", 'data.partition="shards"') if part == "shards" else ()
            sets += ("--set", f"train.seed={seed}", "--set", "train.rounds=50")
            config = "configs/hfmds_fmnist_dir001"
            keep = ("--set", "train.keep_round=19")
            sources.append(
                run_task(store, f"{base}_hfmds", 3, groups, "--config", f"{config}_hfmds.toml", *sets, *keep)
            )
            kept = f"runs/{base}_hfmds/checkpoint_round19.pt"
            start = {"needs": kept, "after": f"{base}_hfmds"}
            fedavg = ("--config", f"{config}.toml", *sets)
            arms.append(
                run_task(store, f"{base}_fedavg", 3, groups, *fedavg, "--init-from", f"{store}/{kept}", **start)
            )
            if seed == SEEDS[0]:
                fmds = ("--config", f"{config}_fmds.toml", *sets, "--init-from", f"{store}/{kept}")
                arms.append(run_task(store, f"{base}_fmds", 3, groups, *fmds, **start))
            step = ("--set", "train.lr=0.0005", "--set", "train.weight_decay=0.005", "--init-from", f"{store}/{kept}")
            controls.append(run_task(store, f"{base}_fedavg_alpha01", 3, groups, *fedavg, *step, **start))
    return sources + arms + controls


def dynafed(store: Path) -> list[Task]:
    """(4) DynaFed at the paper's settings (scripts/dynafed-experiments.sh's runs): the DynaFed arms of seeds 1 and 2
    (their FedAvg partners finished on the H200 lease of 2026-11-26: group ``seeds`` only); seed 0's DSA arm, FedAvg
    from its round-19 state, DSA off and N = 0 from the same state; the code's settings (N = 3000, L = 24) with
    FedAvg from round 23. Every arm keeps its clients' Adam moments: none can come back unfinished."""

    def arm(name, groups, seed, iterations=1000, augment="dsa", setting="dynafed", keep=19, source="") -> Task:
        config = f"configs/paper/dynafed_fmnist_a001_{setting}.toml"
        args = ("--config", config, "--set", f"method.iterations={iterations}", "--set", f'method.augment="{augment}"')
        args += ("--set", f"train.keep_round={keep}", "--set", "train.estimate_every=20", "--set", f"train.seed={seed}")
        if not source:
            return run_task(store, name, 4, groups, *args, portable=False)
        kept = f"runs/{source}/checkpoint_round{keep}.pt"
        return run_task(store, name, 4, groups, *args, "--init-from", f"{store}/{kept}", needs=kept, after=source,
                        portable=False)  # fmt: skip

    def fedavg(name, groups, seed, source, keep=19) -> Task:
        kept = f"runs/{source}/checkpoint_round{keep}.pt"
        args = ("--config", "configs/paper/dynafed_fmnist_a001.toml", "--set", "train.estimate_every=20")
        args += ("--set", f"train.seed={seed}", "--init-from", f"{store}/{kept}")
        return run_task(store, name, 4, groups, *args, needs=kept, after=source, portable=False)

    dsa, code = "dynafed_fmnist_a001_paper_n1000_dsa", "dynafed_fmnist_a001_code_n3000_dsa"
    return [
        arm(f"{dsa}_seed1", ("seeds-dynafed", "seeds", "all"), 1),
        arm(f"{dsa}_seed2", ("seeds-dynafed", "seeds", "all"), 2),
        fedavg("dynafed_fmnist_a001_fedavg_from19_seed1", ("seeds",), 1, f"{dsa}_seed1"),
        fedavg("dynafed_fmnist_a001_fedavg_from19_seed2", ("seeds",), 2, f"{dsa}_seed2"),
        arm(dsa, ("controls", "all"), 0),
        fedavg("dynafed_fmnist_a001_fedavg_from19", ("controls", "all"), 0, dsa),
        arm("dynafed_fmnist_a001_paper_n1000_none", ("controls", "all"), 0, augment="none", source=dsa),
        arm("dynafed_fmnist_a001_paper_n0_dsa", ("controls", "all"), 0, iterations=0, source=dsa),  # no synthesis
        arm(code, ("n3000", "all"), 0, 3000, setting="code", keep=23),
        fedavg("dynafed_fmnist_a001_fedavg_from23", ("n3000", "all"), 0, code, 23),
    ]


def bench(store: Path) -> list[Task]:
    """(5) DynaFed's synthesis alone at width 128 (each path and CUDA switch), then the gpu tests; the task fails
    when either part does (a part's failure is never reported as success)."""
    script = ('rc=0; "$PYTHON" benchmarks/synthesis_bench.py --paper --out "$1" || rc=$?; '
              '"$PYTHON" -m pytest -q -m gpu tests/fl/test_gpu.py -p no:cacheprovider || rc=$?; exit $rc')  # fmt: skip
    return [Task("bench", 5, ("bash", "-c", script, "bench", f"{store}/logs/synthesis_bench.json"), ("bench", "all"))]


def plan(store: Path, python: str = "python3", ddpm_workers: int = 4) -> list[Task]:
    """Every task of every group in priority order; the group ``all`` holds the open ones."""
    return [*ddpm_sets(store, python, ddpm_workers), *fedcog(store), *hfmds(store), *dynafed(store), *bench(store)]


def custom_plan(path: Path, store: Path) -> list[Task]:
    """CAMPAIGN_PLAN's tasks: fl.run arguments ("args") or a whole "command"; every task in group all."""
    tasks = []
    for entry in json.loads(path.read_text()):
        command = entry.pop("command", None) or fl_run(store, entry["run"].removeprefix("runs/"), *entry.pop("args"))
        tasks.append(Task(command=tuple(command), **entry))
    return tasks


def store_path() -> Path:
    return Path(os.environ.get("SHUFFLEFL_RUNS") or "/root/store").expanduser()


def status_file(store: Path) -> Path:
    return store / "campaign" / "status.json"


def read_status(store: Path) -> dict | None:
    """The campaign's status (None without one); a status that is not whole JSON of a campaign (cut, a list,
    without its tasks or limit, a time that is no time) is an InputError naming the file."""
    path = status_file(store)
    if not path.exists():
        return None
    try:
        status = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, OSError):
        raise InputError(f"{path}: not JSON (cut short or damaged); start the campaign again") from None
    ok = isinstance(status, dict) and isinstance(status.get("tasks"), list) and all(isinstance(t, dict) for t in
                                                                                    status["tasks"])  # fmt: skip
    ok = ok and isinstance(status.get("limit"), int) and not isinstance(status.get("limit"), bool)
    ok = ok and all(isinstance(status.get(k), (int, float, type(None))) for k in ("started", "ended", "pid"))
    if not ok:
        raise InputError(f"{path}: not a campaign's status (its tasks, limit or times are missing or of another type)")
    return status


def write_status(store: Path, status: dict) -> None:
    path = status_file(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(status, indent=1)))


def alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat")
        return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def gpu_query(fields: str) -> list[str] | None:
    """nvidia-smi's values of ``fields`` for the first GPU, or None without one."""
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"], capture_output=True, text=True,
            timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return [v.strip() for v in lines[0].split(",")] if done.returncode == 0 and lines else None


def job_limit() -> tuple[int, str]:
    """How many slots at once, and why: CAMPAIGN_JOBS, else min(CPU cores, free GPU MiB / CAMPAIGN_GIB_PER_RUN)."""
    if os.environ.get("CAMPAIGN_JOBS"):
        return max(1, int(os.environ["CAMPAIGN_JOBS"])), "CAMPAIGN_JOBS"
    cores = os.cpu_count() or 1
    free = gpu_query("memory.free")
    if not free:
        return cores, f"{cores} CPU cores, no GPU"
    per_run = float(os.environ.get("CAMPAIGN_GIB_PER_RUN") or 4)
    by_memory = int(float(free[0]) / 1024 / per_run)
    return max(1, min(cores, by_memory)), f"{cores} CPU cores, {free[0]} MiB GPU memory free at {per_run:g} GiB a run"


def start(group: str) -> int:
    """Write GROUP's plan into the status and start the scheduler in its own session."""
    store = store_path()
    status = read_status(store)
    if status and status.get("ended") is None and alive(status.get("pid")):
        print(f"a campaign is running in {store} (pid {status['pid']}): follow it with `wait`", file=sys.stderr)
        return 2
    if os.environ.get("CAMPAIGN_PLAN"):
        tasks = custom_plan(Path(os.environ["CAMPAIGN_PLAN"]), store)
    else:
        python = os.environ.get("PYTHON") or "python3"
        tasks = plan(store, python, int(os.environ.get("DDPM_WORKERS") or 4))
    ledger = Path(os.environ.get("CAMPAIGN_LEDGER") or ROOT / "results" / "ledger")
    tasks, skipped = open_tasks([t for t in tasks if group in t.groups], ledger)
    if skipped:
        print(f"{len(skipped)} task(s) already finished in the run ledger, left out: {', '.join(skipped)}")
    limit, why = job_limit()
    rows = [asdict(t) | {"state": "waiting", "gib": needs_gib(t), "minutes": predicted_minutes(t)} for t in tasks]
    seconds = float(os.environ.get("CAMPAIGN_SECONDS") or 0)
    now = time.time()
    write_status(store, {"group": group, "limit": limit, "limit_why": why, "store": str(store), "pid": None,
                         "started": now, "deadline": now + seconds if seconds else None, "ended": None,
                         "tasks": rows})  # fmt: skip
    (store / "logs").mkdir(parents=True, exist_ok=True)
    with open(store / "logs" / "campaign.log", "ab") as log:
        daemon = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "schedule"], cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.time() + 60
    while not (read_status(store) or {}).get("pid"):  # the scheduler has taken over the status
        if daemon.poll() is not None or time.time() > deadline:
            print(f"the scheduler did not start (exit {daemon.poll()}); see {store / 'logs' / 'campaign.log'}")
            return 1
        time.sleep(0.05)
    print(f"campaign {group}: {len(tasks)} tasks, {limit} slots at a time ({why}); scheduler pid {daemon.pid}")
    return 0


def needs_gib(task: Task) -> float:
    """The GPU memory a task is admitted with: its own ``gib``, else its kind's (KIND_GIB) for each of its slots."""
    if task.gib:
        return task.gib
    kind = "bench" if task.name == "bench" else task_kind(task)
    return KIND_GIB[kind] * (task.slots if kind == "ddpm" else 1)


def task_kind(task: Task) -> str:
    return "ddpm" if "scripts/ddpm_sets.py" in task.command else "dynafed" if "dynafed" in task.name else "fl"


def predicted_minutes(task: Task) -> float:
    """The task's own ``minutes``, else its predicted minutes on one H100 (:func:`predict` at the planned rates or
    CAMPAIGN_RATES'), else 0 (unknown: a command that is no fl.run nor DDPM training)."""
    if task.minutes or "--config" not in task.command:
        return task.minutes
    return predict(task, rates_from(Path(os.environ["CAMPAIGN_RATES"]) if os.environ.get("CAMPAIGN_RATES") else None))[
        1
    ]


def gpu_memory() -> tuple[float, float] | None:
    """(free, total) GiB of the first GPU, or None without one (or unreadable)."""
    free, total = gpu_query("memory.free"), gpu_query("memory.total")
    try:
        return float(free[0]) / 1024, float(total[0]) / 1024
    except (TypeError, ValueError, IndexError):
        return None


def admitted(row: dict, running: dict, tasks: dict) -> str | None:
    """Why the task cannot start now for want of GPU memory (None: it can): the memory committed to the running
    tasks plus its own must stay within MARGIN of the device, and the memory free now must hold it (checked again
    before every launch)."""
    memory = gpu_memory()
    if memory is None:
        return None
    free, total = memory
    committed = sum(tasks[name]["gib"] for name in running)
    if committed + row["gib"] > MARGIN * total:
        return f"{committed:.0f} of {total:.0f} GiB committed, it needs {row['gib']:.0f}"
    if row["gib"] > free:
        return f"{free:.1f} GiB free now, it needs {row['gib']:.0f}"
    return None


def open_tasks(tasks: list[Task], ledger: Path) -> tuple[list[Task], list[str]]:
    """The tasks still open: a run finished in the run ledger (``ledger/runs/NAME/summary.json``, e.g. made on the
    CPU) is left out, unless a task still open starts from its state (the ledger keeps no checkpoint, so that run
    is made again); (open tasks, names left out)."""
    done = {t.name for t in tasks if t.run and (ledger / t.run / "summary.json").is_file()}
    needed = {t.after for t in tasks if t.after and t.name not in done}
    skipped = [t.name for t in tasks if t.name in done and t.name not in needed]
    return [t for t in tasks if t.name not in skipped], skipped


def finished_earlier(store: Path) -> set[str]:
    """The tasks that finished in earlier leases (``campaign/previous.json``, written by :func:`unpack`)."""
    path = store / "campaign" / "previous.json"
    if not path.exists():
        return set()
    try:
        done = json.loads(path.read_text())["done"]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError):
        raise InputError(f"{path}: not the record of earlier leases' tasks (cut or damaged); remove it") from None
    if not isinstance(done, list) or not all(isinstance(name, str) for name in done):
        raise InputError(f"{path}: its 'done' is not a list of task names; remove it")
    return set(done)


def schedule() -> int:
    """The scheduler's loop: launch the waiting tasks whose file exists, in priority order, while slots are free;
    reap the ended ones; until every task has ended. SIGTERM stops the tasks (fl.run saves its checkpoint)."""
    store = store_path()
    status = read_status(store)
    status["pid"] = os.getpid()
    tasks = {row["name"]: row for row in status["tasks"]}
    order = sorted(tasks.values(), key=lambda row: row["priority"])  # stable: plan order within a priority
    earlier = finished_earlier(store)
    for row in order:
        if row["run"] and (store / row["run"] / "summary.json").exists():
            row.update(state="done", note="finished before")
        elif row["name"] in earlier:
            row.update(state="done", note="finished in an earlier lease")
    limit, poll = status["limit"], float(os.environ.get("CAMPAIGN_POLL_SECONDS") or 2)
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    running: dict[str, subprocess.Popen] = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    (store / "logs").mkdir(parents=True, exist_ok=True)
    while True:
        for name, process in list(running.items()):
            if process.poll() is not None:
                rc = process.returncode
                tasks[name].update(state="done" if rc == 0 else "failed", rc=rc, end=time.time())
                del running[name]
                if rc != 0 and out_of_memory(store, name) and tasks[name].get("retries", 0) < MAX_RETRIES:
                    # back to the queue, and fewer tasks at a time from now on (the memory measured at the start
                    # was not what the running tasks need)
                    tasks[name].update(state="waiting", retries=tasks[name].get("retries", 0) + 1,
                                       gib=1.5 * tasks[name].get("gib", 0),
                                       note=f"out of memory (exit {rc}): back in the queue")  # fmt: skip
                    status["limit"] = limit = max(1, min(limit, len(running)))
        if stop:
            for process in running.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            for name, process in running.items():
                process.wait()
                tasks[name].update(state="failed", rc=process.returncode, end=time.time(), note="stopped")
            running.clear()
        free = limit - sum(min(tasks[name]["slots"], limit) for name in running)
        for row in order:
            if row["state"] != "waiting" or stop:
                continue
            if row["needs"] and not (store / row["needs"]).exists():
                source = tasks.get(row["after"])
                if source is None or source["state"] in FINAL:
                    row.update(state="blocked", note=f"{row['needs']} is not there")
                continue
            left = (status["deadline"] - time.time()) / 60 if status.get("deadline") else None
            if not row["portable"] and row.get("minutes") and left is not None and row["minutes"] > left:
                row.update(state="skipped", note=f"predicted {row['minutes']:.1f} min, {left:.1f} min left, and its "
                           "state cannot come back: not started")  # fmt: skip
                continue
            slots = min(row["slots"], limit)
            if slots > free or admitted(row, running, tasks) is not None:
                break  # strict priority: nothing of lower priority jumps ahead of a ready task
            cap = {"SHUFFLEFL_GPU_GIB": f"{row['gib']:g}"} if row.get("gib") else {}  # fl.run caps its process
            with open(store / "logs" / f"{row['name']}.log", "ab") as log:
                process = subprocess.Popen(
                    row["command"], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, env=env | cap,
                )  # fmt: skip
            running[row["name"]] = process
            row.update(state="running", pid=process.pid, start=time.time())
            free -= slots
        if not running and (stop or not any(row["state"] == "waiting" for row in order)):
            status["ended"] = time.time()
        write_status(store, status)
        if status["ended"]:
            return 0
        time.sleep(poll)


OOM_SIGNS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA_ERROR_OUT_OF_MEMORY", "OutOfMemoryError")
MAX_RETRIES = 2  # an out-of-memory task goes back to the queue at most this often


def out_of_memory(store: Path, name: str) -> bool:
    """Whether task ``name`` ended for want of GPU memory (its log's last 20 lines say so)."""
    return any(sign in log_tail(store, name, 20) for sign in OOM_SIGNS)


def rounds_left(folder: Path) -> int:
    """Rounds a run still has to go (its config's rounds minus its metrics rows); a large number where unknown."""
    try:
        rounds = json.loads((folder / "config.json").read_text())["train"]["rounds"]
        done = sum(1 for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip())
        return max(0, int(rounds) - done)
    except (OSError, ValueError, KeyError, TypeError):
        return 10**9


def last_row(metrics: Path) -> dict | None:
    """The last whole metrics row of a run (read from the file's end), or None."""
    try:
        with open(metrics, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - 65536))
            lines = file.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def progress(row: dict, store: Path) -> str:
    """Where a task is: its run's round of its rounds and test accuracy; for the DDPM trainer, the generators."""
    if row["run"]:
        folder = store / row["run"]
        last = last_row(folder / "metrics.jsonl")
        try:
            rounds = json.loads((folder / "config.json").read_text())["train"]["rounds"]
        except (OSError, ValueError, KeyError):
            rounds = "?"
        if not last:
            return "starting"
        accuracy = f", acc {last['test_accuracy']:.4f}" if isinstance(last.get("test_accuracy"), float) else ""
        return f"round {last.get('round')}/{rounds}{accuracy}"
    cache = store / "synthetic"
    if row["name"].startswith("ddpm") and cache.is_dir():
        trained = sum(1 for _ in cache.glob("client*/generator.json"))
        return f"generators: {trained} trained, {sum(1 for _ in cache.glob('client*/synthetic-*.json'))} sampled"
    return ""


def seconds(row: dict, now: float) -> float:
    return (row.get("end") or now) - row["start"] if row.get("start") else 0.0


def log_tail(store: Path, name: str, count: int = 1) -> str:
    """The last ``count`` lines of task ``name``'s log (the last one cut at 200 characters where ``count`` is 1)."""
    path = store / "logs" / f"{name}.log"
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    if count > 1:
        return "\n".join(lines[-count:])
    return (lines[-1][:200] + ("..." if len(lines[-1]) > 200 else "")) if lines else "(no output)"


def gpu_line() -> str:
    values = gpu_query("utilization.gpu,memory.used,memory.total")
    if not values or len(values) < 3:
        return "GPU: no nvidia-smi"
    return f"GPU {values[0]} %, {values[1]} / {values[2]} MiB"


def report(status: dict | None, store: Path) -> list[str]:
    """The lines printed every minute: the GPU, each running task's round and seconds, the waiting ones, failures."""
    if status is None:
        return [f"== {time.strftime('%H:%M:%S')} {gpu_line()}; no campaign in {store}"]
    now, rows = time.time(), status["tasks"]
    count = {state: sum(r["state"] == state for r in rows) for state in ("running", "waiting", "done", "failed")}
    lines = [f"== {time.strftime('%H:%M:%S')} {gpu_line()}; {count['running']} running (limit {status['limit']}), "
             f"{count['done']} done, {count['waiting']} waiting, {count['failed']} failed"]  # fmt: skip
    for row in rows:
        if row["state"] == "running":
            gone = "" if alive(row.get("pid")) else " (its process is gone)"
            lines.append(f"  {row['name']:<44} {progress(row, store):<32} {seconds(row, now):6.0f} s{gone}")
    waiting = [r for r in rows if r["state"] == "waiting"]
    ready = [r["name"] for r in waiting if not r["needs"] or (store / r["needs"]).exists()]
    after = [f"{r['name']} (after {r['after']})" for r in waiting if r["needs"] and not (store / r["needs"]).exists()]
    for label, names in (("for a slot", ready), ("for the state they start from", after)):
        if names:
            lines.append(
                textwrap.shorten(f"  waiting {label} ({len(names)}): {', '.join(names)}", 240, placeholder=" ...")
            )
    for row in rows:
        if row["state"] in ("failed", "blocked"):
            why = row.get("note") or f"exit {row.get('rc')}: {log_tail(store, row['name'])}"
            lines.append(f"  {row['state'].upper()}: {row['name']}: {why}")
    return lines


@dataclass
class Packed:
    """What one pack left in $OUT: the files, the runs whose state is in them, the runs that restart and why."""

    files: list[Path]
    resumable: list[str]
    restart: dict[str, str]
    notes: list[str]


def limits() -> dict[str, int]:
    mib = {key: float(os.environ.get(f"CAMPAIGN_{key.upper()}_MIB") or default)
           for key, default in (("max_file", 15), ("max_total", 60), ("state", 60))}  # fmt: skip
    return {**{k: int(v * MiB) for k, v in mib.items()}, "max_files": int(os.environ.get("CAMPAIGN_MAX_FILES") or 8)}


def read_files(folder: Path, names: list[str], prefix: str) -> list[tuple[str, bytes]]:
    """(prefix/name, bytes) of the files of ``folder`` that exist, read in the order given (a checkpoint before
    the metrics: the rows then reach at least its round, and a resume drops the rows after it)."""
    found = []
    for name in names:
        try:
            found.append((f"{prefix}/{name}", (folder / name).read_bytes()))
        except FileNotFoundError:
            continue
    return found


def records(store: Path) -> list[list[tuple[str, bytes]]]:
    """The records archive's groups: each run's records, the logs, the campaign's status."""
    runs = [run for run in sorted((store / "runs").glob("*")) if run.is_dir() and "." not in run.name]
    groups = [read_files(run, list(RECORD_FILES), f"runs/{run.name}") for run in runs]
    logs = sorted(p.name for p in (store / "logs").glob("*") if p.is_file())
    groups.append(read_files(store / "logs", logs, "logs"))
    groups.append(read_files(store / "campaign", ["status.json"], "campaign"))
    return [g for g in groups if g]


def states(status: dict, store: Path) -> tuple[list[tuple[str, list]], dict[str, str]]:
    """The state groups of the unfinished runs (and of the finished runs whose kept checkpoint an unfinished run
    still starts from), by value: those kept sources first, then the runs nearest to finishing (the fewest rounds
    left), then priority; and the unfinished runs whose state cannot come back, with why."""
    rows = status["tasks"]
    kept: dict[str, list[str]] = {}
    for row in rows:
        if row["needs"] and row["after"] and row["state"] != "done":
            kept.setdefault(row["after"], []).append(row["needs"].rsplit("/", 1)[1])
    groups, restart = [], {}
    for row in sorted(rows, key=lambda r: r["priority"]):
        folder = store / row["run"] if row["run"] else None
        if folder is None or not folder.is_dir():
            continue
        finished = (folder / "summary.json").exists()
        wanted = list(dict.fromkeys(kept.get(row["name"], [])))  # one copy for the several arms it starts
        if finished and not wanted:
            continue
        if not row["portable"]:
            if not finished:
                size = sum(p.stat().st_size for p in folder.glob("checkpoint*.pt")) / MiB
                restart[row["name"]] = (f"its clients' optimiser moments ({size:.0f} MiB of checkpoints) cannot come "
                                        "back: restarts from round 1")  # fmt: skip
            continue
        if not finished and not (folder / "checkpoint.pt").exists() and not wanted:
            restart[row["name"]] = "no checkpoint yet: starts over"
            continue
        names = [] if finished else ["checkpoint.pt"]
        names += [*wanted, "config.json", "provenance.json", "init_from.txt", "metrics.jsonl"]
        names += ["summary.json"] if finished else []
        value = (0 if finished else 1, rounds_left(folder), row["priority"])
        groups.append((value, row["name"], read_files(folder, names, row["run"])))
    # by value: a finished run's kept state that others start from first, then the runs nearest to finishing
    return [(name, files) for _, name, files in sorted(groups, key=lambda g: g[0])], restart


def pack_sets(store: Path, out: Path, max_files: int, max_bytes: int, max_file: int) -> tuple[list[Path], list[str]]:
    """The DDPM sets trained in this lease (not those unpacked from an earlier one: they came home already) packed
    by fl.synthesis.pack into ``out``, as many folders as ``max_files`` files and ``max_bytes`` hold; a note for
    those left out. pack works in a folder of its own (it keeps a record of what it wrote there, which must not
    come back as a ninth file) from a view of the chosen folders (hard links to their sets and metadata)."""
    cache, chosen, notes = store / "synthetic", [], []
    if cache.is_dir() and max_files > 0:
        from fl.synthesis.fedssyn import PACKED_FILE
        from fl.synthesis.pack import finished_folders, pack

        folders, _ = finished_folders(cache, "ddpm")
        fresh = [f for f in folders if not (cache / f.name / PACKED_FILE).exists()]
        room, used = min(max_bytes, max_files * max_file) - max_files * 65536, 0  # manifests, end blocks
        for folder in fresh:
            if used + folder.size <= room:
                chosen.append(folder)
                used += folder.size
        notes = [f"{len(fresh) - len(chosen)} DDPM folders' sets left out: no room"] if len(chosen) < len(fresh) else []
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as work:
        while chosen:
            view, packed = Path(work) / f"view{len(chosen)}", Path(work) / f"out{len(chosen)}"
            for folder in chosen:
                (view / folder.name).mkdir(parents=True)
                for name, path in folder.files.items():
                    link_or_copy(path, view / folder.name / name)
            written, _ = pack(view, packed, SETS, max_file, "ddpm")
            if len(written) <= max_files and sum(p.stat().st_size for p in written) <= max_bytes:
                break
            chosen.pop()
            notes = [f"{len(fresh) - len(chosen)} DDPM folders' sets left out: no room"]
        for path in written:
            shutil.move(path, out / path.name)
    for old in out.glob(f"{SETS}*.tar"):  # only what pack writes: SETS.tar, SETS-<k>.tar
        if old.name not in {p.name for p in written} and re.fullmatch(rf"{re.escape(SETS)}(-[0-9]+)?\.tar", old.name):
            old.unlink()
    return [out / p.name for p in written], notes


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def pack(status: dict | None, store: Path, out: Path) -> Packed:
    """Everything that comes back, into ``out``: the records, the DDPM sets, the unfinished runs' state by priority,
    within :func:`limits`."""
    limit = limits()
    groups = records(store)
    written, left = write_archives(
        groups, out, RECORDS, limit["max_file"], limit["max_files"], limit["max_total"], compress=True
    )
    notes = [f"{len(left)} records groups did not fit"] if left else []
    files_left = limit["max_files"] - len(written)
    bytes_left = limit["max_total"] - sum(p.stat().st_size for p in written)
    sets, more = pack_sets(store, out, files_left, bytes_left, limit["max_file"])
    written, notes = written + sets, notes + more
    files_left -= len(sets)
    bytes_left -= sum(p.stat().st_size for p in sets)
    if status is None:
        return Packed(written, [], {}, notes)
    run_groups, restart = states(status, store)
    lease = [(LEASE_FILE, json.dumps({"store": str(store), "packed": time.time()}).encode())]
    state_files, left = write_archives(
        [group for _, group in run_groups], out, STATE, limit["max_file"], max(0, files_left),
        min(limit["state"], bytes_left), every=lease,
    )  # fmt: skip
    for k in left:
        restart[run_groups[k][0]] = "no room in what comes back: starts over (or from the state that came back before)"
    resumable = [name for k, (name, _) in enumerate(run_groups) if k not in left]
    return Packed(written + state_files, resumable, restart, notes)


def summary(status: dict | None, store: Path, packed: Packed, started: float) -> list[str]:
    """The one-screen summary at the end of a call: finished, will resume, restart, not started, failed; the files."""
    if status is None:
        return ["== summary: no campaign"]
    now, rows = time.time(), status["tasks"]
    finished = [f"{r['name']} {seconds(r, now):.0f} s" for r in rows if r["state"] == "done" and not r.get("note")]
    before = [r["name"] for r in rows if r["state"] == "done" and r.get("note")]
    unfinished = [r for r in rows if r["state"] not in ("done", "blocked") and r["name"] in packed.resumable]
    resume = [f"{r['name']} ({progress(r, store)}, {seconds(r, now):.0f} s)" for r in unfinished]
    restart = [f"{name} ({why})" for name, why in packed.restart.items()]
    waiting = [r["name"] for r in rows if r["state"] == "waiting" and r["name"] not in packed.resumable]
    failed = [f"{r['name']} (exit {r.get('rc')}: {log_tail(store, r['name'])})" for r in rows if r["state"] == "failed"]
    blocked = [f"{r['name']} ({r.get('note')})" for r in rows if r["state"] == "blocked"]
    sizes = ", ".join(f"{p.name} {p.stat().st_size / MiB:.2f} MiB" for p in packed.files)
    total = sum(p.stat().st_size for p in packed.files) / MiB
    lines = [
        f"== summary after {now - started:.0f} s of this call ({len(rows)} tasks, limit {status['limit']}: "
        f"{status['limit_why']}; {'scheduler ended' if status.get('ended') else 'scheduler still running'})"
    ]
    for label, items in (
        ("finished", finished), ("finished before", before), ("will resume", resume), ("restart", restart),
        ("not started", waiting), ("failed", failed), ("blocked", blocked),
    ):  # fmt: skip
        if items or label != "blocked":
            lines.append(
                textwrap.fill(f"{label} ({len(items)}): {', '.join(items) or '-'}", 120, subsequent_indent="    ")
            )
    lines += [f"back ({len(packed.files)} files, {total:.2f} MiB): {sizes}", *packed.notes]
    return lines


def watch(seconds_left: float) -> int:
    """Report and pack every CAMPAIGN_REPORT_SECONDS until ``seconds_left`` have passed or the scheduler ended."""
    store, out = store_path(), Path(os.environ.get("OUT") or "/tmp/gpu-campaign-out")
    interval = float(os.environ.get("CAMPAIGN_REPORT_SECONDS") or 60)
    started = time.time()
    end = started + seconds_left
    while True:
        status = read_status(store)
        last = status is None or status.get("ended") is not None or not alive(status.get("pid"))
        last = last or time.time() >= end
        print("\n".join(report(status, store)), flush=True)
        packed = pack(status, store, out)
        if last:
            break
        time.sleep(max(0.0, min(interval, end - time.time())))
    print("\n".join(summary(status, store, packed, started)), flush=True)
    return 0


def unpack(files: list[Path]) -> int:
    """A previous lease's files into the store: the state archives' runs, the DDPM sets into ``synthetic/``, and
    from the records the tasks that finished there (``campaign/previous.json``: not run again)."""
    store = store_path()
    kinds = lease_files(files)
    done = finished_earlier(store)
    for archive in kinds["records"]:
        status = campaign_status(read_archive(archive), archive)
        done |= {str(row.get("name")) for row in status.get("tasks", []) if row.get("state") == "done"}
    (store / "campaign").mkdir(parents=True, exist_ok=True)
    (store / "campaign" / "previous.json").write_text(json.dumps({"done": sorted(done)}))
    print(f"{len(done)} tasks finished in earlier leases")
    for archive in kinds["state"]:
        print("\n".join(extract_state(archive, store)))
    if kinds["sets"]:
        from fl.synthesis.pack import unpack as unpack_sets

        folders = unpack_sets(kinds["sets"], store / "synthetic")
        print(f"{len(folders)} generator folders unpacked into {store / 'synthetic'}")
    for path in kinds["other"]:
        print(f"{path}: not a lease archive; left alone")
    return 0


def task_config(task: Task):
    """The RunConfig of an fl.run or DDPM-sets task (its --config and --set arguments), and the round it starts
    from (an --init-from checkpoint_roundR.pt: R)."""
    from fl.config import load_config

    args = list(task.command)
    config = Path(args[args.index("--config") + 1])
    sets = [args[k + 1] for k, a in enumerate(args) if a == "--set"]
    start = 0
    if "--init-from" in args:
        found = re.search(r"checkpoint_round(\d+)\.pt$", args[args.index("--init-from") + 1])
        start = int(found.group(1)) if found else 0
    return load_config(ROOT / config, sets), start


def predict(task: Task, rates: dict) -> tuple[float, float, str]:
    """(FLOPs, minutes on one H100 at ``rates``, what is counted) of a task: its clients' training and evaluation
    at the rate of "fl", DynaFed's synthesis at "dynafed"'s, DDPM training at "ddpm"'s (fl/cost.py); a task that
    is no fl.run nor DDPM training (the benchmark): (0, its cap, ...)."""
    from dataclasses import replace as change

    from fl.cost import ddpm_cost, minutes, run_cost
    from fl.synthesis.generators.ddpm import DDPMConfig, UNet

    if "--config" not in task.command:
        return 0.0, 3.0, "the benchmark: at most 3 minutes (scripts/gpu-bench.sh)"
    config, start = task_config(task)
    if "scripts/ddpm_sets.py" in task.command:
        options = dict(config.method.get("generator_config", {}))
        ddpm = DDPMConfig(**{k: v for k, v in options.items() if k in DDPMConfig.__dataclass_fields__})
        shape = (1, 28, 28) if config.data.dataset in ("fmnist", "fashion-mnist", "mnist") else (3, 32, 32)
        flop = ddpm_cost(UNet(shape[0], 10, ddpm), shape, DDPM_STEPS, ddpm.batch_size, config.data.clients)
        said = f"{config.data.clients} DDPMs x {DDPM_STEPS} steps x {ddpm.batch_size} (at least; method.min_steps)"
        return flop, minutes(flop, rates["ddpm"]), said
    cost = run_cost(change(config, train=change(config.train, rounds=config.train.rounds - start)))
    if start >= int(config.method.get("trajectory_rounds", 20)):
        cost = change(cost, method=0.0)  # a DynaFed arm started past its synthesis (its source made D_syn)
    said = f"rounds {start + 1}-{config.train.rounds}" + (", DynaFed's synthesis" if cost.method else "")
    said += ", HFMDs' syntheses not counted" if config.method.get("name") in ("hfmds", "fmds") else ""
    spent = minutes(cost.train + cost.eval, rates["fl"]) + (
        minutes(cost.method, rates["dynafed"]) if cost.method else 0
    )
    return cost.total, spent, said


def rates_from(rates_file: Path | None) -> dict[str, float]:
    """FLOP/s by kind of work: the planned rates (fl/cost.py), those of ``rates_file`` (``{"rates": {kind: FLOP/s}}``,
    e.g. gpu-bench's JSON) in their place where given."""
    from fl.cost import PLANNED

    planned = {kind: rate.flop_s for kind, rate in PLANNED.items()}
    if rates_file is not None:
        try:
            given = json.loads(rates_file.read_text())["rates"]
            planned |= {k: float(given[k]) for k in planned if k in given}
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(f"{rates_file}: not a rates file ({{'rates': {{kind: FLOP/s}}}}): {error}") from None
    return planned


def plan_table(group: str, rates_file: Path | None, ledger: Path = ROOT / "results" / "ledger") -> int:
    """Each open task of ``group`` (those finished in the run ledger left out, as ``start`` leaves them): its
    predicted minutes on one H100 at the planned rates (``rates_file``: a JSON ``{"rates": {kind: FLOP/s}}``, e.g.
    gpu-bench's, replaces them) and at the last lease's measured ones; the totals."""
    from fl.cost import MEASURED, PLANNED

    planned = rates_from(rates_file)
    tasks, skipped = open_tasks([t for t in plan(Path("STORE")) if group in t.groups], ledger)
    measured = {k: r.flop_s for k, r in MEASURED.items()} | {"ddpm": measured_ddpm_rate()}
    print(f"{len(tasks)} open tasks of group {group} ({len(skipped)} finished in the ledger left out)")
    print(f"{'task':52} {'PFLOP':>7} {'min plan':>8} {'min lease':>9}  counted")
    total = total_measured = 0.0
    for task in tasks:
        flop, minutes_planned, said = predict(task, planned)
        minutes_measured = predict(task, measured)[1]
        total, total_measured = total + minutes_planned, total_measured + minutes_measured
        print(f"{task.name:52} {flop / 1e15:7.3f} {minutes_planned:8.2f} {minutes_measured:9.1f}  {said}")
    print(f"{'total (one H100, minutes)':52} {'':7} {total:8.1f} {total_measured:9.1f}")
    print("rates in FLOP/s, planned; measured on the last lease:")
    for kind, rate in PLANNED.items():
        source = f"from {rates_file}" if planned[kind] != rate.flop_s else rate.source
        print(f"  {kind}: {planned[kind]:.3g} ({source}); {measured[kind]:.3g} ({MEASURED[kind].source})")
    print("How: fl/cost.py counts each task's FLOPs (forward FLOPs by torch's FlopCounterMode, x3 for training); its "
          "minutes are those FLOPs over the rate of each kind of work, as if it had the chip alone")  # fmt: skip
    return 0


def measured_ddpm_rate() -> float:
    """FLOP/s of the lease's DDPM sets: 10 clients' DDPMs over 60,000 images x 20 epochs in ~320 s."""
    from fl.config import load_config
    from fl.cost import forward_flops
    from fl.synthesis.generators.ddpm import DDPMConfig, UNet

    config = load_config(ROOT / "configs" / "fedssyn_fmnist_ddpm.toml", [])
    options = dict(config.method.get("generator_config", {}))
    unet = UNet(1, 10, DDPMConfig(**{k: v for k, v in options.items() if k in DDPMConfig.__dataclass_fields__}))
    import torch

    forward = forward_flops(lambda: unet(torch.zeros(1, 1, 28, 28), torch.zeros(1, dtype=torch.long),
                                         torch.zeros(1, dtype=torch.long)))  # fmt: skip
    return 3.0 * forward * 60_000 * int(config.method.get("epochs", 20)) / 320.0


def main(argv: list[str]) -> int:
    """The commands, each refusing bad input (a damaged status or record included) in one line, exit 2."""
    try:
        return command(argv)
    except InputError as error:
        print(f"campaign.py: error: {error}", file=sys.stderr)
        return 2


def command(argv: list[str]) -> int:
    name = argv[0] if argv else ""
    if name == "start" and len(argv) == 2 and argv[1] in GROUPS:
        return start(argv[1])
    if name == "watch" and len(argv) == 2 and argv[1].isdigit():
        return watch(float(argv[1]))
    if name == "unpack" and len(argv) >= 2:
        return unpack([Path(a) for a in argv[1:]])
    if name == "schedule" and len(argv) == 1:
        return schedule()
    if name == "plan":
        rest = argv[1:]
        group = rest.pop(0) if rest and rest[0] in GROUPS else "all"
        if not rest or (len(rest) == 2 and rest[0] == "--rates"):
            return plan_table(group, Path(rest[1]) if rest else None)
    print(f"usage: python scripts/campaign.py start {'|'.join(GROUPS)} | watch SECONDS | unpack FILE... | "
          "plan [GROUP] [--rates FILE]",
          file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
