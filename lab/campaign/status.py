"""The store a lease writes: the scheduler's status file, the tasks' logs and run folders; the device (nvidia-smi)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

from theory.errors import InputError
from theory.output import refuse_link, replace_durably

FINAL = ("done", "failed", "blocked", "skipped")
STATES = ("waiting", "running", *FINAL)


WRITTEN_FOLDERS = ("campaign", "logs")  # the store's folders the campaign writes its own files in


def store_path() -> Path:
    """The store (``$SHUFFLEFL_RUNS``), its campaign's folders checked (:func:`refuse_linked_folders`)."""
    store = Path(os.environ.get("SHUFFLEFL_RUNS") or "/root/store").expanduser()
    refuse_linked_folders(store)
    return store


def refuse_linked_folders(store: Path) -> None:
    """One line (InputError) when ``STORE/campaign`` or ``STORE/logs`` is a symbolic link: the status, the logs,
    packed.json, previous.json and the fleets' specs are never written through one (the store itself may be a link:
    the user's choice of SHUFFLEFL_RUNS). Checked before anything is written."""
    for name in WRITTEN_FOLDERS:
        refuse_link(store / name, "the campaign's folder")


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
    ok = ok and all(isinstance(status.get(k), (int, float, type(None))) for k in ("deadline", "booked"))
    ok = ok and isinstance(status.get("limit_why", ""), str)
    if not ok:
        raise InputError(f"{path}: not a campaign's status (its tasks, limit or times are missing or of another type)")
    for k, row in enumerate(status["tasks"]):
        problem = row_problem(row)
        if problem:
            raise InputError(f"{path}: not a campaign's status (its task {k + 1} {problem})")
    return status


def row_problem(row: dict) -> str | None:
    """Why a status row is not one the scheduler wrote (None: it is): each field a report or the scheduler reads,
    of its type (:class:`lab.campaign.tasks.Task`'s fields, its state, its process and times where given)."""
    text = lambda value: isinstance(value, str)  # noqa: E731
    whole = lambda value: isinstance(value, int) and not isinstance(value, bool)  # noqa: E731
    number = lambda value: whole(value) or (isinstance(value, float) and math.isfinite(value))  # noqa: E731
    needed = {
        "name": lambda v: text(v) and v and "/" not in v and not v.startswith("."), "state": lambda v: v in STATES,
        "run": text, "needs": text, "after": text, "priority": whole, "slots": lambda v: whole(v) and v >= 1,
        "large_state": lambda v: isinstance(v, bool), "gib": number, "minutes": number,
        "command": lambda v: isinstance(v, list) and v and all(text(c) for c in v),
    }  # fmt: skip
    optional = {"pid": whole, "rc": whole, "start": number, "end": number, "note": text, "retries": whole,
                "fleet": text, "log": lambda v: text(v) and "/" not in v}  # fmt: skip
    for key, ok in needed.items():
        if key not in row or not ok(row[key]):
            return f"has {key} = {row.get(key)!r}" if key in row else f"has no {key}"
    for key, ok in optional.items():
        if row.get(key) is not None and not ok(row[key]):
            return f"has {key} = {row[key]!r}"
    return None


def setting(name: str, default: float, whole: bool = False, least: float = 0.0, above: bool = False) -> float:
    """The number the environment variable ``name`` sets (``default`` where it is unset or empty): an InputError
    (one line naming the variable and its value) where it is no finite number (a whole one with ``whole``) of at
    least ``least`` (more than ``least`` with ``above``)."""
    text = os.environ.get(name) or ""
    if not text.strip():
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > least if above else value >= least)):
        kind = "a whole number" if whole else "a number"
        raise InputError(f"{name}={text!r}: not {kind} {'>' if above else '>='} {least:g}")
    return value


def write_status(store: Path, status: dict) -> None:
    refuse_linked_folders(store)
    path = status_file(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, lambda tmp: tmp.write_text(json.dumps(status, indent=1)))


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


def log_tail(store: Path, name: str, count: int = 1) -> str:
    """The last ``count`` lines of task ``name``'s log (the last one cut at 200 characters where ``count`` is 1)."""
    path = store / "logs" / f"{name}.log"
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    if count > 1:
        return "\n".join(lines[-count:])
    return (lines[-1][:200] + ("..." if len(lines[-1]) > 200 else "")) if lines else "(no output)"


def rounds_left(folder: Path) -> int:
    """Rounds a run still has to go (its config's rounds minus its metrics rows); a large number where unknown."""
    try:
        rounds = json.loads((folder / "config.json").read_text())["train"]["rounds"]
        done = sum(1 for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip())
        return max(0, int(rounds) - done)
    except (OSError, ValueError, KeyError, TypeError):
        return 10**9


def rounds_done(folder: Path) -> int:
    """The rounds a run has done: its metrics rows (0 without any, or where they cannot be read)."""
    try:
        return sum(1 for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip())
    except (OSError, UnicodeDecodeError):
        return 0


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
