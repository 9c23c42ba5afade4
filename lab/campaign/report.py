"""What a lease says while it runs and when it ends: the per-minute report, the summary, ``watch``."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

from lab.campaign.pack import Packed, limits, pack
from lab.campaign.status import alive, gpu_query, last_row, log_tail, read_status, setting, store_path
from lab.records.lease import MiB


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


def summary(status: dict | None, store: Path, packed: Packed, started: float) -> list[str]:
    """The one-screen summary at the end of a call: finished, will resume, coming in volumes (how many are back and
    what brings the rest), restart, not started, failed; the files."""
    if status is None:
        return ["== summary: no campaign"]
    now, rows = time.time(), status["tasks"]
    finished = [f"{r['name']} {seconds(r, now):.0f} s" for r in rows if r["state"] == "done" and not r.get("note")]
    before = [r["name"] for r in rows if r["state"] == "done" and r.get("note")]
    unfinished = [r for r in rows if r["state"] not in ("done", "blocked") and r["name"] in packed.resumable]
    resume = [f"{r['name']} ({progress(r, store)}, {seconds(r, now):.0f} s)" for r in unfinished]
    coming = [f"{name} ({line})" for name, line in packed.partial.items()]
    restart = [f"{name} ({why})" for name, why in packed.restart.items()]
    waiting = [r["name"] for r in rows if r["state"] == "waiting" and r["name"] not in packed.resumable]
    failed = [f"{r['name']} (exit {r.get('rc')}: {log_tail(store, r['name'])})" for r in rows if r["state"] == "failed"]
    blocked = [f"{r['name']} ({r.get('note')})" for r in rows if r["state"] == "blocked"]
    sizes = ", ".join(f"{p.name} {p.stat().st_size / MiB:.2f} MiB" for p in packed.files)
    total = sum(p.stat().st_size for p in packed.files) / MiB
    lines = [
        f"== summary after {now - started:.0f} s of this call ({len(rows)} tasks, limit {status['limit']}: "
        f"{status.get('limit_why', '?')}; {'scheduler ended' if status.get('ended') else 'scheduler still running'})"
    ]
    for label, items in (
        ("finished", finished), ("finished before", before), ("will resume", resume), ("in volumes", coming),
        ("restart", restart), ("not started", waiting), ("failed", failed), ("blocked", blocked),
    ):  # fmt: skip
        if items or label not in ("blocked", "in volumes"):
            lines.append(
                textwrap.fill(f"{label} ({len(items)}): {', '.join(items) or '-'}", 120, subsequent_indent="    ")
            )
    lines += [f"back ({len(packed.files)} files, {total:.2f} MiB): {sizes}", *packed.notes]
    return lines


def watch(seconds_left: float) -> int:
    """Report and pack every CAMPAIGN_REPORT_SECONDS until ``seconds_left`` have passed or the scheduler ended."""
    store, out = store_path(), Path(os.environ.get("OUT") or "/tmp/gpu-campaign-out")
    interval = setting("CAMPAIGN_REPORT_SECONDS", 60.0)
    limits()  # a bad CAMPAIGN_MAX_FILES or _MIB: one line before the first report, not after it
    started = time.time()
    call = f"watch-{os.getpid()}-{started:.0f}"  # one call of the device tool: its last pack is what goes out
    end = started + seconds_left
    while True:
        status = read_status(store)
        last = status is None or status.get("ended") is not None or not alive(status.get("pid"))
        last = last or time.time() >= end
        print("\n".join(report(status, store)), flush=True)
        packed = pack(status, store, out, call)
        if last:
            break
        time.sleep(max(0.0, min(interval, end - time.time())))
    print("\n".join(summary(status, store, packed, started)), flush=True)
    return 0
