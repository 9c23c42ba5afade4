"""The lease's experiments as tasks: one command each, its priority, groups, the state it starts from, its memory."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tasks run there (configs/, scripts/)

SEEDS = (0, 1, 2)


GROUPS = ("all", "ddpm-sets", "fedcog", "hfmds", "seeds-dynafed", "seeds", "controls", "n3000", "bench")


@dataclass(frozen=True)
class Task:
    """One command of the campaign (see the module docstring)."""

    name: str
    priority: int
    command: tuple[str, ...]
    groups: tuple[str, ...] = ("all",)
    run: str = ""  # its run folder in the store (runs/NAME), for fl.run tasks
    record: str = ""  # the run ledger's file that shows it done where it has no run folder (a DDPM set's quality)
    needs: str = ""  # the file in the store it starts from
    after: str = ""  # the task that writes ``needs``
    slots: int = 1
    large_state: bool = False  # its state (clients' optimiser moments) comes back only in volumes, over calls
    gib: float = 0.0  # GPU memory it needs at its peak (0: its kind's, KIND_GIB)
    minutes: float = 0.0  # predicted minutes on the device (0: from its FLOPs at start, lab/cost.py; unknown: 0)


# Peak GPU memory by kind of task (GiB). The lease of 2026-11-27 (one H100, 80 GiB): a DynaFed arm held ~23 during its
# synthesis (19 of it CUDA-graph pools); 16 fl.run processes held 70 (~4.4 each). gpu-bench on an H100 the same day
# (results/ledger/bench/2026-11-27-h100; CUDA's allocated / reserved peaks): one seed's synthesis (fast path, TF32,
# graphs) 10.9 / 21.7, three seeds one after another in one process 11.3 / 43.4 (each seed keeps its graph pools),
# three batched 32.9 / 33.5; one run of 20 clients (HFMDs CNN) 0.7-1.4 / 1.4-5.4, as an HFMDs arm 2.0-2.5 / 7.5-8.6; a
# fleet of 16 runs eagerly 4.7 / 9.9, of 64 15.2 / 23.7 (HFMDs arms 22.5 / 41.8); a DDPM (batch 128) was not measured
# alone: 4 a worker assumed. The benchmark's own rows reach 78 reserved (64 HFMDs arms replayed as graphs; 69
# allocated where 64 runs in BF16 ran out): 64 admits it beside little else. The per-process cap
# (set_per_process_memory_fraction) makes a process release its cache before it exceeds its share, so admission by
# these peaks holds while reserved memory above the allocated peak is given back under pressure. Every fl.run on CUDA
# records its peaks in summary.json.
KIND_GIB = {"dynafed": 24.0, "fl": 4.5, "ddpm": 4.0, "bench": 64.0}


MARGIN = 0.9  # the share of the device's memory the scheduler commits


DDPM_STEPS = 2000  # #49's goal: each client's DDPM at least this many steps (method.min_steps of the DDPM sets)


def fl_run(store: Path, name: str, *args: str) -> tuple[str, ...]:
    """scripts/resumable.sh's ``run`` of ``python -m fl.run ARGS --out STORE/runs/NAME``."""
    return ("bash", "-c", 'source scripts/resumable.sh && run "$@"', "run", f"{store}/runs/{name}", *args)


def run_task(store: Path, name: str, priority: int, groups: tuple[str, ...], *args: str, **more) -> Task:
    return Task(name, priority, fl_run(store, name, *args), groups, run=f"runs/{name}", **more)


def ddpm_sets(store: Path, python: str, workers: int) -> list[Task]:
    """(1) Each client's DDPM of configs/fedssyn_fmnist_ddpm.toml for seeds 0 and 1, ``workers`` clients at once (one
    process each), each for at least DDPM_STEPS steps (``method.min_steps``: the smallest clients' 80-100 steps at 20
    epochs sampled noise on the last lease), then sampled. One client at a time in each process: on the H100 ten
    DDPMs trained together (``method.train_together``) took 47.3-47.7 client-steps a second against 45.8-61.2 for one
    alone (results/ledger/bench/2026-11-27-h100), and on 2 CPU cores ten together took 195 s for their first 4 steps
    against 0.53 s a step for one. A seed's set is done where the ledger holds its quality report (``python -m
    fl.quality --min-steps``), wherever it was made: a set the CPU makes has the same protocol and cache key (which
    name no device), its numbers those of the CPU's arithmetic."""
    tasks = []
    for seed in (0, 1):
        command = (python, "scripts/ddpm_sets.py", "--config", "configs/fedssyn_fmnist_ddpm.toml", "--set")
        command += (f"train.seed={seed}", "--set", f'method.cache_dir="{store}/synthetic"', "--set")
        command += (f"method.min_steps={DDPM_STEPS}", "--workers", str(workers))
        record = f"quality/ddpm-fmnist-seed{seed}-steps{DDPM_STEPS}.json"  # fl.quality.report_name
        tasks.append(Task(f"ddpm_sets_seed{seed}", 1, command, ("ddpm-sets", "all"), slots=workers, record=record))
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
    FedAvg from round 23. Every arm keeps its clients' Adam moments (206 MB): an unfinished arm's state comes back
    in volumes over several calls (``large_state``: :mod:`lab.campaign.volumes`)."""

    def arm(name, groups, seed, iterations=1000, augment="dsa", setting="dynafed", keep=19, source="") -> Task:
        config = f"configs/paper/dynafed_fmnist_a001_{setting}.toml"
        args = ("--config", config, "--set", f"method.iterations={iterations}", "--set", f'method.augment="{augment}"')
        args += ("--set", f"train.keep_round={keep}", "--set", "train.estimate_every=20", "--set", f"train.seed={seed}")
        if not source:
            return run_task(store, name, 4, groups, *args, large_state=True)
        kept = f"runs/{source}/checkpoint_round{keep}.pt"
        return run_task(store, name, 4, groups, *args, "--init-from", f"{store}/{kept}", needs=kept, after=source,
                        large_state=True)  # fmt: skip

    def fedavg(name, groups, seed, source, keep=19) -> Task:
        kept = f"runs/{source}/checkpoint_round{keep}.pt"
        args = ("--config", "configs/paper/dynafed_fmnist_a001.toml", "--set", "train.estimate_every=20")
        args += ("--set", f"train.seed={seed}", "--init-from", f"{store}/{kept}")
        return run_task(store, name, 4, groups, *args, needs=kept, after=source, large_state=True)

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
    """(5) scripts/gpu-bench.sh's benchmark (peaks; fleets; DynaFed for 1 and 3 seeds, fast and batched; DDPMs
    one and ten together: the rates for ``plan --rates``), then the gpu tests; the task fails when either part does
    (a part's failure is never reported as success)."""
    script = ('rc=0; "$PYTHON" benchmarks/gpu_bench.py --out "$1" || rc=$?; '
              '"$PYTHON" -m pytest -q -m gpu tests/fl/test_gpu.py -p no:cacheprovider || rc=$?; exit $rc')  # fmt: skip
    return [Task("bench", 5, ("bash", "-c", script, "bench", f"{store}/logs/gpu_bench.json"), ("bench", "all"))]


def plan(store: Path, python: str = "python3", ddpm_workers: int = 4) -> list[Task]:
    """Every task of every group in priority order; the group ``all`` holds the open ones."""
    return [*ddpm_sets(store, python, ddpm_workers), *fedcog(store), *hfmds(store), *dynafed(store), *bench(store)]


def plan_problem(entry: object) -> str | None:
    """Why a CAMPAIGN_PLAN entry is not a task (None: it is): an object with a ``name`` (no ``/``), a whole
    ``priority``, either a ``command`` (a list of strings) or ``args`` of fl.run (a list of strings) with its
    ``run`` (``runs/NAME``), and of :class:`Task`'s other fields only, each of its type."""
    if not isinstance(entry, dict):
        return f"is a {type(entry).__name__}, not an object"
    fields = {f.name for f in dataclasses.fields(Task)} - {"command"}
    unknown = sorted(set(entry) - fields - {"command", "args"})
    if unknown:
        return f"has no field {unknown[0]!r} (a task's fields: {', '.join(sorted(fields | {'command', 'args'}))})"
    name = entry.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.=,+-]+", name) or name.startswith("."):
        return f"its name is {name!r}, not a name of letters, digits and _.=,+-"
    strings = lambda value: isinstance(value, list) and all(isinstance(v, str) for v in value)  # noqa: E731
    if "command" in entry:
        if not strings(entry["command"]) or not entry["command"] or "args" in entry:
            return "its command is not a non-empty list of strings (or it gives args too)"
    elif not strings(entry.get("args")):
        return "has neither a command (a list of strings) nor args of fl.run (a list of strings)"
    elif not isinstance(entry.get("run"), str) or not re.fullmatch(r"runs/[^/]+", entry["run"]):
        return f"its run is {entry.get('run')!r}, not runs/NAME (its args are fl.run's)"
    whole = lambda value: isinstance(value, int) and not isinstance(value, bool)  # noqa: E731
    number = lambda value: whole(value) or (isinstance(value, float) and math.isfinite(value))  # noqa: E731
    kinds = {
        "priority": (whole, "a whole number"), "slots": (lambda v: whole(v) and v >= 1, "a whole number >= 1"),
        "large_state": (lambda v: isinstance(v, bool), "true or false"), "groups": (strings, "a list of group names"),
        "gib": (lambda v: number(v) and v >= 0, "a number >= 0"), "minutes": (lambda v: number(v) and v >= 0,
        "a number >= 0"), "run": (lambda v: isinstance(v, str), "a string"),
        "record": (lambda v: isinstance(v, str), "a string"), "needs": (lambda v: isinstance(v, str), "a string"),
        "after": (lambda v: isinstance(v, str), "a string"),
    }  # fmt: skip
    if "priority" not in entry:
        return "has no priority"
    for key, (ok, what) in kinds.items():
        if key in entry and not ok(entry[key]):
            return f"its {key} is {entry[key]!r}, not {what}"
    return None


def custom_plan(path: Path, store: Path) -> list[Task]:
    """CAMPAIGN_PLAN's tasks: fl.run arguments ("args") or a whole "command"; every task in group all. A file that
    cannot be read, is not whole JSON, or holds something other than a list of tasks (:func:`plan_problem`; two of
    one name) is an InputError naming it and the task, before anything is started."""
    where = f"CAMPAIGN_PLAN={path}"
    try:
        entries = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as error:
        raise InputError(f"{where}: cannot be read ({error.strerror or error})") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{where}: not JSON (cut short or damaged)") from None
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{where}: not a list of tasks (a JSON list of objects, at least one)")
    tasks, names = [], set()
    for k, entry in enumerate(entries):
        problem = plan_problem(entry)
        if problem is None and entry["name"] in names:
            problem = "comes twice (a task's name is its log's and its status row's)"
        if problem:
            name = entry.get("name") if isinstance(entry, dict) else None
            raise InputError(f"{where}: task {k + 1}{f' ({name!r})' if isinstance(name, str) else ''}: {problem}")
        names.add(entry["name"])
        entry = dict(entry)
        command = entry.pop("command", None) or fl_run(store, entry["run"].removeprefix("runs/"), *entry.pop("args"))
        entry["groups"] = tuple(entry.get("groups", ("all",)))
        tasks.append(Task(command=tuple(command), **entry))
    return tasks


def open_tasks(tasks: list[Task], ledger: Path) -> tuple[list[Task], list[str]]:
    """The tasks still open: a run finished in the run ledger (``ledger/runs/NAME/summary.json``, e.g. made on the
    CPU), or a task whose ``record`` the ledger holds, is left out, unless a task still open starts from its state
    (the ledger keeps no checkpoint, so that run is made again); (open tasks, names left out)."""
    done = {t.name for t in tasks if t.run and (ledger / t.run / "summary.json").is_file()}
    done |= {t.name for t in tasks if t.record and (ledger / t.record).is_file()}
    needed = {t.after for t in tasks if t.after and t.name not in done}
    skipped = [t.name for t in tasks if t.name in done and t.name not in needed]
    return [t for t in tasks if t.name not in skipped], skipped


def task_kind(task: Task) -> str:
    return "ddpm" if "scripts/ddpm_sets.py" in task.command else "dynafed" if "dynafed" in task.name else "fl"


def needs_gib(task: Task) -> float:
    """The GPU memory a task is admitted with: its own ``gib``, else its kind's (KIND_GIB) for each of its slots."""
    if task.gib:
        return task.gib
    kind = "bench" if task.name == "bench" else task_kind(task)
    return KIND_GIB[kind] * (task.slots if kind == "ddpm" else 1)
