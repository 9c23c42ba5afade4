"""The device's measured rates (``scripts/gpu-bench.sh`` on an H100, kept in the ledger's ``bench/``) and what they
make of the lease plan: the report's ``gpu-bench`` block.

Per part of the bench, from the newest H100 record that measured it (a lease may bench some parts only): the
matrix-product peaks; fleets of FedAvg runs and HFMDs arms (20 clients of the
HFMDs CNN each, batch 10) in run-rounds per second, replayed as a graph and eagerly, in FLOP/s (one client's FLOPs
times runs × clients) and as a share of the peak of their precision, with CUDA's allocated and reserved peaks;
DynaFed's synthesis at the paper's settings in seed-iterations per second and seconds a synthesis of
``method.iterations`` (1000) iterations; DDPM training steps. The claim is #49's goals as bounds (:func:`bound`):
the target set of the lease plan (:func:`lab.campaign.predict.target_minutes` at the records' rates) within
12 minutes, a DynaFed synthesis within 60 s a seed, and DDPM sets of at least DDPM_STEPS steps a client with at
most 5 % noise whose classifier reaches at least 82 % on real test (the ledger's ``quality/`` reports of such sets,
:mod:`fl.quality`, made on any machine: their numbers do not depend on it).
"""

from __future__ import annotations

import json
from pathlib import Path

from figures.artefacts import Artefact, Build, Built, Claim
from figures.verdict import NOT_MEASURED, bound, combine
from lab.campaign.predict import GOAL_MINUTES, bench_records, rates_from, target_minutes
from lab.campaign.tasks import DDPM_STEPS
from lab.records.check import BENCH, QUALITY
from plots.gpu import plot_fleet
from theory.errors import InputError

NAME = "gpu-bench"
SYNTHESIS_ITERATIONS = 1000  # DynaFed's method.iterations at the paper's settings (configs/dynafed_*_paper_*.toml)
SYNTHESIS_GOAL_SECONDS = 60.0  # #49: a seed's synthesis within 60 s on an H100
DDPM_NOISE_GOAL = 0.05  # #49: DDPM sets at DDPM_STEPS steps a client: at most this share of noise images,
DDPM_ACCURACY_GOAL = 0.82  # and a classifier trained on them at least this accurate on real test
HEADERS = ["part", "work", "precision", "steps ran", "speed", "TFLOP/s", "share of peak", "GiB allocated / reserved"]


PART_ORDER = ("peak", "fleet", "conv", "convnet3", "dynafed", "ddpm")  # benchmarks/gpu_bench.py's parts, in its order


def records(folder: Path, device: str = "H100") -> tuple[list[Path], str, list[dict]]:
    """The ledger's records whose device names ``device`` (:func:`lab.campaign.predict.bench_records`): the ones read,
    the newest one's device, and each part's rows from the newest record that measured it (a lease may bench some
    parts only: ``gpu-bench.sh --parts``), in the bench's order of parts."""
    paths = bench_records(folder, device)
    if not paths:
        raise InputError(f"no gpu-bench record of an {device} under {folder}: bash scripts/gpu-bench.sh on a lease")
    rows: list[dict] = []
    read: list[Path] = []
    for path in reversed(paths):
        measured = json.loads(path.read_text())["rows"]
        fresh = {r["part"] for r in measured} - {r["part"] for r in rows}
        if fresh:
            rows += [r for r in measured if r["part"] in fresh]
            read.append(path)
    rank = {part: k for k, part in enumerate(PART_ORDER)}
    rows.sort(key=lambda r: rank.get(r["part"], len(rank)))  # stable: a part's rows keep their order
    return read[::-1], json.loads(paths[-1].read_text())["device"], rows


def gib(row: dict) -> str:
    return f"{row['cuda_peak_gib']:.1f} / {row['cuda_reserved_peak_gib']:.1f}" if "cuda_peak_gib" in row else "-"


def share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2g} %"


def replayed(row: dict) -> str:
    """How a fleet row's steps ran: replayed as a CUDA graph or eagerly (a record without the field: its setting)."""
    if "replayed" in row:
        return "graph" if row["replayed"] else "eager"
    return "graph" if row["graphs"] != "off" else "eager"


def table_rows(rows: list[dict]) -> list[list]:
    """One line per measured row (a failure or out-of-memory row says so)."""
    out = []
    for r in rows:
        part = r["part"]
        if part == "peak":
            out.append([part, f"{r['n']}³ matrix product", r["precision"], "-", "-", r["tflops"], "100 %", "-"])
            continue
        if part in ("fleet", "conv", "convnet3"):
            model = "ConvNet-3 " if part == "convnet3" else ""
            extra = f", conv {r['conv']}" if "conv" in r else ""
            work = f"{r['runs']} x {model}{r['arm']} ({r['steps']} steps{extra})"
            speed = f"{r['run_rounds_per_s']:.3g} run-rounds/s" if "seconds" in r else r["outcome"]
            out.append([part, work, r["precision"], replayed(r), speed, r.get("tflops"), share(r.get("share_of_peak")),
                        gib(r)])  # fmt: skip
        elif part == "dynafed":
            work = f"{r['seeds']} seed(s): {r.get('path', '-')}"
            speed = (f"{r['seed_iterations_per_s']:.3g} seed-it/s, {synthesis_seconds(r):.0f} s a synthesis"
                     if "seed_iterations_per_s" in r else r["outcome"][:80])  # fmt: skip
            out.append([part, work, r["precision"], "-", speed, r.get("tflops"), None, gib(r)])
        elif part == "ddpm":
            speed = f"{r['steps_per_s']:.3g} client-steps/s" if "steps_per_s" in r else r["outcome"]
            out.append([part, f"{r['clients']} client(s), batch {r.get('batch', '-')}", "default", "-", speed,
                        r.get("tflops"), None, "-"])  # fmt: skip
    return out


def synthesis_seconds(row: dict) -> float:
    return SYNTHESIS_ITERATIONS / row["seed_iterations_per_s"]


def graph_gains(rows: list[dict]) -> dict[str, float]:
    """Replayed over eager run-rounds per second, per fleet arm, runs and steps (default precision)."""
    speed = {(r["arm"], r["runs"], r["steps"], replayed(r) == "graph"): r["run_rounds_per_s"]
             for r in rows if r["part"] == "fleet" and r["precision"] == "default" and "seconds" in r}  # fmt: skip
    return {f"{arm} x{runs} ({steps} steps)": speed[arm, runs, steps, True] / speed[arm, runs, steps, False]
            for (arm, runs, steps, graphs) in speed if graphs and (arm, runs, steps, False) in speed}  # fmt: skip


def ddpm_reports(ctx: Build) -> list[dict]:
    """The ledger's (the build's run store's) quality reports of DDPM sets trained at least DDPM_STEPS steps a
    client, by seed."""
    paths = sorted((ctx.store / QUALITY).glob(f"ddpm-fmnist-seed*-steps{DDPM_STEPS}.json"))
    ctx.use(paths)
    return sorted((json.loads(path.read_text()) for path in paths), key=lambda report: report["seed"])


def ddpm_part(reports: list[dict]) -> tuple[str, str]:
    """(verdict, sentence) of the DDPM goal: every seed's noise share and synthetic-trained accuracy within their
    bounds; not measured without a report."""
    if not reports:
        missing = f"no quality report of DDPM sets at {DDPM_STEPS:,} steps a client in the ledger"
        return bound([]), f"the DDPM goal {NOT_MEASURED}: {missing}"
    noise = [r["noise_fraction"] for r in reports]
    accuracy = [r["synthetic_trained_accuracy"] for r in reports]
    verdict = bound([n / DDPM_NOISE_GOAL - 1 for n in noise] + [DDPM_ACCURACY_GOAL / a - 1 for a in accuracy])
    seeds = ", ".join(str(r["seed"]) for r in reports)
    real = [r.get("real_trained_accuracy") for r in reports]
    listed = ", ".join(f"{100 * n:.1f} %" for n in noise), ", ".join(f"{100 * a:.1f} %" for a in accuracy)
    beside = ", ".join("-" if a is None else f"{100 * a:.1f} %" for a in real)
    return verdict, (
        f"DDPM sets at ≥ {DDPM_STEPS:,} steps a client (seed {seeds}) hold {listed[0]} noise images and train a "
        f"classifier to {listed[1]} on real test (goals ≤ {100 * DDPM_NOISE_GOAL:.0f} % and "
        f"≥ {100 * DDPM_ACCURACY_GOAL:.0f} %; {verdict}; the same classifier trained on as many real images of the "
        f"same clients: {beside})"
    )


def claim(minutes: float, seconds: float, rates: dict, ddpm: tuple[str, str]) -> Claim:
    parts = [bound([minutes / GOAL_MINUTES - 1]), bound([seconds / SYNTHESIS_GOAL_SECONDS - 1]), ddpm[0]]
    verdict = combine(parts)
    convnet3 = f"{rates['fl:convnet3'] / 1e12:.3g}" if "fl:convnet3" in rates else "not measured: FL's"
    text = (
        f"#49's goals on one H100 (a bound each: within it or exceeded): {verdict}: the lease plan's target set "
        f"(DDPM sets of seeds 0-1, DynaFed seeds 0-2 and seed 0's controls, HFMDs; what the ledger holds left out) "
        f"takes "
        f"{minutes:.1f} minutes at the measured rates (goal ≤ {GOAL_MINUTES}; {parts[0]}), a DynaFed "
        f"synthesis {seconds:.0f} s a seed on the fast path (goal ≤ {SYNTHESIS_GOAL_SECONDS:.0f} s; {parts[1]}), "
        f"and {ddpm[1]}. Rates: FL {rates['fl'] / 1e12:.3g} (ConvNet-3's {convnet3}), DynaFed "
        f"{rates['dynafed'] / 1e12:.3g}, DDPM {rates['ddpm'] / 1e12:.3g} TFLOP/s."
    )
    return Claim(verdict, text)


def build(ctx: Build) -> Built:
    root = ctx.store
    paths, device, rows = records(root / BENCH)
    ctx.use([path.parent for path in paths])
    rates = rates_from(None, root / BENCH)  # every kind its newest measurement; one not measured: the plan's assumed
    minutes = target_minutes(rates, root)[1]
    fast = [r for r in rows if r["part"] == "dynafed" and r.get("seeds") == 1 and r.get("precision") == "auto"
            and "seed_iterations_per_s" in r]  # fmt: skip
    seconds = synthesis_seconds(fast[0]) if fast else float("nan")
    curves: dict[str, tuple[list[int], list[float]]] = {}
    for r in rows:
        if r["part"] == "fleet" and r["precision"] == "default" and "seconds" in r and r["steps"] == 10:
            label = f"{r['arm']}, {replayed(r)}"
            curves.setdefault(label, ([], []))
            curves[label][0].append(r["runs"])
            curves[label][1].append(r["run_rounds_per_s"])
    if ctx.draw:
        plot_fleet(curves, ctx.folder / "fleet.png", f"{device}: fleets of 20-client runs, 10 steps a round")
    reports = ddpm_reports(ctx)
    names = [f"{BENCH}/{path.parent.name}" for path in paths]
    numbers = {"records": [f"{name}/gpu.json" for name in names], "device": device, "rates": rates,
               "target_minutes": minutes, "synthesis_seconds": seconds, "graph_gains": graph_gains(rows),
               "ddpm_sets": {r["seed"]: {k: r[k] for k in ("noise_fraction", "synthetic_trained_accuracy")}
                             for r in reports}}  # fmt: skip
    note = (f"Device: {device} (records {', '.join(names)}, each part from the newest that measured it; their "
            "READMEs say which commit ran).")  # fmt: skip
    built_claim = claim(minutes, seconds, rates, ddpm_part(reports))
    return Built(HEADERS, table_rows(rows), built_claim, ["fleet.png"], numbers, (note,))


ARTEFACT = Artefact(
    NAME,
    "The device's measured rates (gpu-bench on an H100) and the lease plan they give",
    {"paper": f"each part's newest H100 record ({BENCH}/DATE-h100/gpu.json of `bash scripts/gpu-bench.sh`)"},
    build,
)
