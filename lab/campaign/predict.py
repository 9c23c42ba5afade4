"""Each task's FLOPs and minutes on one H100 (lab/cost.py) at planned, measured or given rates: ``plan``."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import NamedTuple

from lab.campaign.status import rounds_done
from lab.campaign.tasks import DDPM_STEPS, ROOT, Task, open_tasks, plan
from lab.records.check import BENCH
from theory.errors import InputError
from theory.output import read_text_bounded


class Price(NamedTuple):
    """What a task costs on one H100 at given rates: its FLOPs, its minutes, and what is counted (words)."""

    flop: float
    minutes: float
    counted: str


class PlanRow(NamedTuple):
    """One task's row of a plan: the task and its :class:`Price`'s fields."""

    task: Task
    flop: float
    minutes: float
    counted: str


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


def predict(task: Task, rates: dict, done: int = 0) -> Price:
    """(FLOPs, minutes on one H100 at ``rates``, what is counted) of a task: its clients' training and evaluation
    (HFMDs' inversions too) at the rate of "fl" (of "fl:MODEL" where the rates have one for the run's model: a
    fleet of that model measured), DynaFed's synthesis at "dynafed"'s, DDPM training at "ddpm"'s (lab/cost.py),
    from round ``done`` + 1 where its run has that many rounds already (a run resumed); a task that is no fl.run
    nor DDPM training (the benchmark): (0, its cap, ...)."""

    from lab.cost import ddpm_flops, minutes, run_cost

    if "--config" not in task.command:
        return Price(0.0, 3.0, "the benchmark: at most 3 minutes (scripts/gpu-bench.sh)")
    config, start = task_config(task)
    if "scripts/ddpm_sets.py" in task.command:
        per_image, batch = ddpm_flops(config)
        flop = per_image * DDPM_STEPS * batch * config.data.clients
        said = f"{config.data.clients} DDPMs x {DDPM_STEPS} steps x {batch} (at least; method.min_steps)"
        return Price(flop, minutes(flop, rates["ddpm"]), said)
    start = max(start, done)  # a run's rows are every round it has done, those of the run it started from too
    cost = run_cost(config, start)  # a DynaFed arm started past its synthesis has none (its source made D_syn)
    dynafed = config.method.get("name") == "dynafed"
    said = f"rounds {start + 1}-{config.train.rounds}"
    if cost.method:
        said += ", DynaFed's synthesis" if dynafed else ", HFMDs' inversions and pool batches"
    fl = rates.get(f"fl:{config.model.name}") or rates["fl"]
    spent = minutes(cost.train + cost.eval, fl) + minutes(cost.method, rates["dynafed"] if dynafed else fl)
    return Price(cost.total, spent, said)


BENCHES = ROOT / "results" / "ledger" / BENCH  # gpu-bench's records, a folder a lease (named by its date)


def bench_records(folder: Path = BENCHES, device: str = "") -> list[Path]:
    """The ledger's gpu-bench JSONs whose device names ``device`` (any where ""), oldest first (their folders sort
    by date): a bench of some parts (``--parts``) adds to the records before it, it does not replace them."""
    paths = sorted(folder.glob("*/gpu.json"))
    return [p for p in paths if not device or device in json.loads(p.read_text()).get("device", "")]


def shown(path: Path) -> str:
    """``path`` relative to the checkout where it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def rates_with_sources(
    rates_file: Path | None, benches: Path = BENCHES, device: str = "H100"
) -> tuple[dict[str, float], dict[str, str]]:  # fmt: skip
    """FLOP/s by kind of work and where each comes from: the assumed rates (lab/cost.py), then those of the ledger's
    gpu-bench records of ``device`` oldest first (a bench of some parts measures the others as 0), then those of
    ``rates_file`` (``{"rates": {kind: FLOP/s}}``, e.g. a bench just run, perhaps of some parts only), each in the
    place of the one before where it has a positive rate: every kind its newest measurement. A kind ``fl:MODEL`` is
    a model's own fl rate. Each file is checked before a plan is priced with it (:func:`measured_rates`: a regular
    file under 1 MiB, every rate a plausible number), else one line naming it."""
    from lab.cost import PLANNED

    rates = {kind: rate.flop_s for kind, rate in PLANNED.items()}
    sources = {kind: rate.source for kind, rate in PLANNED.items()}
    for path in dict.fromkeys(p for p in (*bench_records(benches, device), rates_file) if p is not None):
        measured = measured_rates(Path(path), tuple(PLANNED))
        rates |= measured
        sources |= dict.fromkeys(measured, f"from {shown(path)}")
    return rates, sources


MAX_RATES_BYTES = 2**20  # a rates file (gpu-bench's JSON: its rates and rows) is a few kB
MAX_RATE = 1e18  # FLOP/s: a thousand times any chip's; past it a rate is a typo or a hostile file, not a measurement


def rates_text(path: Path) -> str:
    """The text of the rates file ``path``: a regular file of at most :data:`MAX_RATES_BYTES`, checked before it is
    read (opened without blocking, so a FIFO is refused at once; ``/dev/zero`` and any other device, a folder and a
    larger file likewise); InputError in one line naming it otherwise."""
    try:
        return read_text_bounded(path, "rates file", MAX_RATES_BYTES)
    except OSError as error:
        raise InputError(f"{path}: no readable rates file ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; not a rates file") from None


def measured_rates(path: Path, planned: tuple[str, ...]) -> dict[str, float]:
    """The FLOP/s a rates file ``path`` (``{"rates": {kind: FLOP/s}}``) gives the kinds the plan prices (those of
    ``planned`` and ``fl:MODEL``; other keys are ignored), 0 where a bench of some parts did not measure one (left
    out). Each must be a JSON number (not a bool, not a string), finite, >= 0 and at most :data:`MAX_RATE`; anything
    else is an InputError in one line naming the file and the key, before a plan is priced with it."""
    form = "not a rates file ({'rates': {kind: FLOP/s}})"
    text = rates_text(path)
    try:
        given = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InputError(f"{path}: {form}: {type(error).__name__}") from None
    if not isinstance(given, dict) or not isinstance(given.get("rates"), dict):
        raise InputError(f"{path}: {form}: no 'rates' object")
    measured = {}
    for kind, value in given["rates"].items():
        if kind not in planned and not kind.startswith("fl:"):
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and (isinstance(value, int) or math.isfinite(value)) and 0 <= value <= MAX_RATE):
            said = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."  # int: compared exactly
            raise InputError(f"{path}: its rate {kind!r} is {said}, not a number of FLOP/s (finite, > 0 and at "
                             f"most {MAX_RATE:g}; 0: not measured)")  # fmt: skip
        if value > 0:
            measured[kind] = float(value)
    return measured


def rates_from(rates_file: Path | None, benches: Path = BENCHES) -> dict[str, float]:
    """:func:`rates_with_sources`' rates."""
    return rates_with_sources(rates_file, benches)[0]


# #49's lease: DDPM sets of seeds 0-1, HFMDs (3 seeds x 2 partitions x 4 arms), DynaFed seeds 0-2 at 200 rounds
# with seed 0's FedAvg, DSA-off and N = 0 controls (not N = 3000, nor the benchmark)
TARGET_GROUPS = ("ddpm-sets", "hfmds", "seeds-dynafed", "controls")
GOAL_MINUTES = 12


def plan_minutes(tasks: list[Task], rates: dict) -> tuple[list[PlanRow], float, float]:
    """Each task's (task, FLOPs, minutes on one H100 at ``rates``, what is counted), the total minutes and those of
    #49's target set (:data:`TARGET_GROUPS`)."""
    rows = [PlanRow(task, *predict(task, rates)) for task in tasks]
    total = sum(row.minutes for row in rows)
    target = sum(row.minutes for row in rows if set(row.task.groups) & set(TARGET_GROUPS))
    return rows, total, target


def target_minutes(rates: dict, ledger: Path = ROOT / "results" / "ledger") -> tuple[float, float]:
    """(all open tasks, #49's target set): minutes on one H100 at ``rates``, the ledger's finished tasks left out."""
    tasks, _ = open_tasks([t for t in plan(Path("STORE")) if "all" in t.groups], ledger)
    return plan_minutes(tasks, rates)[1:]


def plan_table(group: str, rates_file: Path | None, ledger: Path = ROOT / "results" / "ledger") -> int:
    """Each open task of ``group`` (those finished in the run ledger left out, as ``start`` leaves them): its
    predicted minutes on one H100 at the planned rates (``rates_file``: a JSON ``{"rates": {kind: FLOP/s}}``, e.g.
    gpu-bench's, replaces them) and at the last lease's measured ones; the totals."""
    from lab.cost import MEASURED, PLANNED

    planned, sources = rates_with_sources(rates_file)
    tasks, skipped = open_tasks([t for t in plan(Path("STORE")) if group in t.groups], ledger)
    measured = {k: r.flop_s for k, r in MEASURED.items()} | {"ddpm": measured_ddpm_rate()}
    print(f"{len(tasks)} open tasks of group {group} ({len(skipped)} finished in the ledger left out)")
    print(f"{'task':52} {'PFLOP':>7} {'min plan':>8} {'min lease':>9}  counted")
    rows, sums = plan_minutes(tasks, planned), plan_minutes(tasks, measured)
    total, target = [rows[1], sums[1]], [rows[2], sums[2]]
    for (task, flop, minutes_planned, said), (_, _, minutes_measured, _) in zip(rows[0], sums[0], strict=True):
        print(f"{task.name:52} {flop / 1e15:7.3f} {minutes_planned:8.2f} {minutes_measured:9.1f}  {said}")
    print(f"{'total (one H100, minutes)':52} {'':7} {total[0]:8.1f} {total[1]:9.1f}")
    if group == "all":
        print(f"{'#49 target: groups ' + ', '.join(TARGET_GROUPS):52} {'':7} {target[0]:8.1f} {target[1]:9.1f}"
              f"  (goal: <= {GOAL_MINUTES} minutes)")  # fmt: skip
        if target[0] > GOAL_MINUTES:  # minutes are FLOPs over rates: every rate x f divides them by f
            scale = target[0] / GOAL_MINUTES
            needed = ", ".join(f"{kind} {planned[kind] * scale / 1e12:.3g}" for kind in planned)
            print(f"  the goal needs {scale:.2f}x the plan's rates: {needed} TFLOP/s")
    print("rates in FLOP/s: the plan's (gpu-bench's where one measured them); the 16-process lease's:")
    for kind in PLANNED:
        print(f"  {kind}: {planned[kind]:.3g} ({sources[kind]}); {measured[kind]:.3g} ({MEASURED[kind].source})")
    for kind in sorted(set(planned) - set(PLANNED)):  # fl:MODEL: measured for that model's fleets
        print(f"  {kind}: {planned[kind]:.3g} ({sources[kind]}: the FL rounds of {kind[3:]} runs)")
    print("How: lab/cost.py counts each task's FLOPs (forward FLOPs by torch's FlopCounterMode, x3 for training); its "
          "minutes are those FLOPs over the rate of each kind of work, as if it had the chip alone")  # fmt: skip
    return 0


def measured_ddpm_rate() -> float:
    """FLOP/s of the lease's DDPM sets: 10 clients' DDPMs over the training set x ``method.epochs`` in ~320 s."""
    from fl.config import load_config
    from lab.cost import dataset_sizes, ddpm_flops

    config = load_config(ROOT / "configs" / "fedssyn_fmnist_ddpm.toml", [])
    per_image, _ = ddpm_flops(config)
    return per_image * dataset_sizes(config)[0] * int(config.method.get("epochs", 20)) / 320.0


def predicted_minutes(task: Task, store: Path | None = None) -> float:
    """The task's own ``minutes``, else its predicted minutes on one H100 (:func:`predict` at the planned rates or
    CAMPAIGN_RATES', for the rounds its run in ``store`` has still to do: one resumed from an earlier lease's state
    costs what is left), else 0 (unknown: a command that is no fl.run nor DDPM training)."""
    if task.minutes or "--config" not in task.command:
        return task.minutes
    rates = rates_from(Path(os.environ["CAMPAIGN_RATES"]) if os.environ.get("CAMPAIGN_RATES") else None)
    done = rounds_done(store / task.run) if store is not None and task.run else 0
    return predict(task, rates, done).minutes
