"""The scheduler: ``start`` writes a group's plan and starts the loop that launches its tasks by priority."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from lab.campaign.pack import finished_earlier, limits
from lab.campaign.predict import predicted_minutes, rates_from
from lab.campaign.status import (
    FINAL,
    alive,
    gpu_query,
    log_tail,
    read_status,
    refuse_linked_folders,
    setting,
    status_file,
    store_path,
    write_status,
)
from lab.campaign.tasks import MARGIN, ROOT, custom_plan, needs_gib, open_tasks, plan
from theory.cli import OWNER
from theory.errors import InputError
from theory.output import open_unlinked, write_text_atomically


def job_limit() -> tuple[int, str]:
    """How many slots at once, and why: CAMPAIGN_JOBS, else min(CPU cores, free GPU MiB / CAMPAIGN_GIB_PER_RUN)."""
    jobs = int(setting("CAMPAIGN_JOBS", 0, whole=True, least=1) or 0)
    if jobs:
        return jobs, "CAMPAIGN_JOBS"
    cores = os.cpu_count() or 1
    free = gpu_query("memory.free")
    if not free:
        return cores, f"{cores} CPU cores, no GPU"
    per_run = setting("CAMPAIGN_GIB_PER_RUN", 4.0, above=True)
    by_memory = int(float(free[0]) / 1024 / per_run)
    return max(1, min(cores, by_memory)), f"{cores} CPU cores, {free[0]} MiB GPU memory free at {per_run:g} GiB a run"


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


def check_settings() -> None:
    """Every number the scheduler, the reports and the packing read from the environment (CAMPAIGN_JOBS and the
    other CAMPAIGN_* variables, DDPM_WORKERS), checked before anything starts: a bad one is one line naming it."""
    limits()  # a bad CAMPAIGN_MAX_FILES or _MIB is refused before the scheduler starts, not at its first pack
    setting("CAMPAIGN_JOBS", 0, whole=True, least=1)
    setting("CAMPAIGN_GIB_PER_RUN", 4.0, above=True)
    setting("CAMPAIGN_SECONDS", 0.0)
    setting("CAMPAIGN_POLL_SECONDS", 2.0)
    setting("CAMPAIGN_REPORT_SECONDS", 60.0)
    setting("CAMPAIGN_FLEET", 1, whole=True, least=1)
    setting("DDPM_WORKERS", 4, whole=True, least=1)
    if os.environ.get("CAMPAIGN_RATES"):  # read once now: a file that is none is refused, never read later
        rates_from(Path(os.environ["CAMPAIGN_RATES"]))


def start(group: str) -> int:
    """Write GROUP's plan into the status and start the scheduler in its own session."""
    store = store_path()
    check_settings()
    status = read_status(store)
    if status and status.get("ended") is None and alive(status.get("pid")):
        print(f"a campaign is running in {store} (pid {status['pid']}): follow it with `wait`", file=sys.stderr)
        return 2
    if os.environ.get("CAMPAIGN_PLAN"):
        tasks = custom_plan(Path(os.environ["CAMPAIGN_PLAN"]), store)
    else:
        python = os.environ.get("PYTHON") or "python3"
        tasks = plan(store, python, int(setting("DDPM_WORKERS", 4, whole=True, least=1)))
    ledger = Path(os.environ.get("CAMPAIGN_LEDGER") or ROOT / "results" / "ledger")
    tasks, skipped = open_tasks([t for t in tasks if group in t.groups], ledger)
    if skipped:
        print(f"{len(skipped)} task(s) already finished in the run ledger, left out: {', '.join(skipped)}")
    limit, why = job_limit()
    rows = [
        asdict(t) | {"state": "waiting", "gib": needs_gib(t), "minutes": predicted_minutes(t, store)} for t in tasks
    ]
    seconds = setting("CAMPAIGN_SECONDS", 0.0)
    (store / "logs").mkdir(parents=True, exist_ok=True)
    with open_unlinked(store / "logs" / "campaign.log", "ab") as log:  # a planted link: refused before the status
        now = time.time()
        write_status(store, {"group": group, "limit": limit, "limit_why": why, "store": str(store), "pid": None,
                             "started": now, "deadline": now + seconds if seconds else None, "ended": None,
                             "tasks": rows})  # fmt: skip
        daemon = subprocess.Popen(
            [sys.executable, "-m", "lab.campaign", "schedule"], cwd=ROOT, stdin=subprocess.DEVNULL,
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


def schedule() -> int:
    """The scheduler's loop: launch the waiting tasks whose file exists, in priority order, while slots are free;
    reap the ended ones; until every task has ended. SIGTERM stops the tasks (fl.run saves its checkpoint)."""
    store = store_path()
    status = read_status(store)
    if status is None:
        raise InputError(f"{status_file(store)}: no campaign to schedule; start one with `start GROUP`")
    status["pid"] = os.getpid()
    tasks = {row["name"]: row for row in status["tasks"]}
    order = sorted(tasks.values(), key=lambda row: row["priority"])  # stable: plan order within a priority
    earlier = finished_earlier(store)
    for row in order:
        if row["run"] and (store / row["run"] / "summary.json").exists():
            row.update(state="done", note="finished before")
        elif row["name"] in earlier:
            row.update(state="done", note="finished in an earlier lease")
    limit, poll = status["limit"], setting("CAMPAIGN_POLL_SECONDS", 2.0)
    fleet_size = int(setting("CAMPAIGN_FLEET", 1, whole=True, least=1))  # > 1: ready fl.run tasks start as fleets
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    running: dict[str, subprocess.Popen] = {}
    booked = time.time()  # when the started work ends at the latest (the chip booked by predicted minutes)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    (store / "logs").mkdir(parents=True, exist_ok=True)
    while True:
        for name, process in list(running.items()):
            if process.poll() is not None:
                rc = process.returncode
                row = tasks[name]
                if row.get("fleet"):  # a fleet's run: done when its own run finished, whatever the others did
                    rc = 0 if (store / row["run"] / "summary.json").exists() else (rc or 1)
                row.update(state="done" if rc == 0 else "failed", rc=rc, end=time.time())
                del running[name]
                if rc != 0 and out_of_memory(store, row.get("log", name)) and row.get("retries", 0) < MAX_RETRIES:
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
        processes = {process.pid: min(tasks[name]["slots"], limit) for name, process in running.items()}
        free = limit - sum(processes.values())  # a fleet is one process: one slot
        fleet: list[dict] = []  # fl.run tasks admitted this pass, to start as one fleet (CAMPAIGN_FLEET)
        now = time.time()
        booked = now if not running else max(now, booked)  # an idle chip has nothing booked
        for row in order:
            if row["state"] != "waiting" or stop:
                continue
            if row["needs"] and not (store / row["needs"]).exists():
                source = tasks.get(row["after"])
                if source is None or source["state"] in FINAL:
                    row.update(state="blocked", note=f"{row['needs']} is not there")
                continue
            left = (status["deadline"] - time.time()) / 60 if status.get("deadline") else None
            if row["large_state"] and row.get("minutes") and left is not None and row["minutes"] > left:
                row.update(state="skipped", note=f"predicted {row['minutes']:.1f} min, {left:.1f} min left, and its "
                           "state comes back only in volumes over several calls: not started")  # fmt: skip
                continue
            guarded = row["large_state"] or any(tasks[n]["large_state"] for n in running)
            guarded = guarded or any(r["large_state"] for r in fleet)
            ends = booked + 60 * (row.get("minutes") or 0)
            if guarded and status.get("deadline") and ends > status["deadline"]:
                row["note"] = (f"waits: with the work started so far it would end {(ends - now) / 60:.1f} min "
                               f"from now, {left:.1f} min left, and a task running or waiting has a large "
                               "state")  # fmt: skip
                break  # strict priority: nothing behind it starts, the chip drains, then it starts or is skipped
            slots = min(row["slots"], limit)
            joins = fleet_size > 1 and is_fl_run(row) and 0 < len(fleet) < fleet_size
            if (slots > free and not joins) or admitted(row, running | {r["name"]: None for r in fleet}, tasks):
                break  # strict priority: nothing of lower priority jumps ahead of a ready task
            booked = ends
            if fleet_size > 1 and is_fl_run(row) and len(fleet) < fleet_size:
                free -= 0 if fleet else slots  # the fleet's one slot
                fleet.append(row)
                continue
            cap = {"SHUFFLEFL_GPU_GIB": f"{row['gib']:g}"} if row.get("gib") else {}  # fl.run caps its process
            try:
                log = open_unlinked(store / "logs" / f"{row['name']}.log", "ab")
            except InputError as error:  # a link planted at its log: the task is not started, never written through
                row.update(state="failed", end=time.time(), note=str(error))
                continue
            with log:
                process = subprocess.Popen(
                    row["command"], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, env=env | cap,
                )  # fmt: skip
            running[row["name"]] = process
            row.update(state="running", pid=process.pid, start=time.time())
            free -= slots
        if fleet:
            try:
                start_fleet(fleet, store, env, running)
            except InputError as error:  # a link planted at one of its files: not started, never written through
                for row in fleet:
                    row.update(state="failed", end=time.time(), note=str(error))
        status["booked"] = booked
        if not running and (stop or not any(row["state"] == "waiting" for row in order)):
            status["ended"] = time.time()
        write_status(store, status)
        if status["ended"]:
            return 0
        time.sleep(poll)


def is_fl_run(row: dict) -> bool:
    """Whether a task is one fl.run through scripts/resumable.sh (:func:`lab.campaign.tasks.fl_run`)."""
    command = row["command"]
    return bool(row["run"]) and len(command) > 4 and command[:2] == ["bash", "-c"] and "resumable.sh" in command[2]


def made_by_fl_run(out: Path) -> bool:
    """Whether ``out`` is a folder fl.run is about to make (nothing there yet) or made (its :data:`theory.cli.OWNER`
    mark, a plain file, says so): only then may a start that finds no config.json there pass ``--overwrite`` (as
    scripts/resumable.sh's ``run`` does); a folder of a user's files is left for fl.run to refuse in one line."""
    if not os.path.lexists(out):
        return True
    mark = out / OWNER
    try:
        return mark.is_file() and not mark.is_symlink() and mark.read_text().strip() == "fl.run"
    except (OSError, UnicodeDecodeError):
        return False


def start_fleet(rows: list[dict], store: Path, env: dict, running: dict) -> None:
    """The fl.run tasks ``rows`` as one ``python -m fl.fleet`` process (:mod:`fl.fleet`), each entry as
    scripts/resumable.sh runs it (a started run continues, a new one starts), capped at their memory together; its
    log is ``logs/fleet-FIRST.log``, each task's log says so."""
    name = f"fleet-{rows[0]['name']}"
    spec = []
    for row in rows:
        out, args = row["command"][4], list(row["command"][5:])
        fresh = not (Path(out) / "config.json").exists() and made_by_fl_run(Path(out))  # never a user's folder
        spec.append([*args, "--out", out, *(["--overwrite"] if fresh else [])])
    refuse_linked_folders(store)
    (store / "campaign").mkdir(parents=True, exist_ok=True)
    path = store / "campaign" / f"{name}.json"
    gib = sum(row.get("gib") or 0 for row in rows)
    cap = {"SHUFFLEFL_GPU_GIB": f"{gib:g}"} if gib else {}
    python = env.get("PYTHON") or sys.executable
    accept = ["--accept-code-change"] if env.get("ACCEPT_CODE_CHANGE") else []
    with contextlib.ExitStack() as logs:  # every log opened (a planted link refused) before anything is written
        log = logs.enter_context(open_unlinked(store / "logs" / f"{name}.log", "ab"))
        owns = [logs.enter_context(open_unlinked(store / "logs" / f"{row['name']}.log", "a")) for row in rows]
        write_text_atomically(path, json.dumps(spec, indent=1))
        process = subprocess.Popen(
            [python, "-m", "fl.fleet", str(path), *accept], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, env=env | cap,
        )  # fmt: skip
        for row, own in zip(rows, owns):
            own.write(f"in {name} (logs/{name}.log)\n")
            running[row["name"]] = process
            row.update(state="running", pid=process.pid, start=time.time(), fleet=name, log=name)


OOM_SIGNS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA_ERROR_OUT_OF_MEMORY", "OutOfMemoryError")


MAX_RETRIES = 2  # an out-of-memory task goes back to the queue at most this often


def out_of_memory(store: Path, name: str) -> bool:
    """Whether task ``name`` ended for want of GPU memory (its log's last 20 lines say so)."""
    return any(sign in log_tail(store, name, 20) for sign in OOM_SIGNS)
