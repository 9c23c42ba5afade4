"""DynaFed Table 1 on Fashion-MNIST at α = 0.01 from the runs of ``scripts/dynafed-experiments.sh``: each DynaFed
arm (``dynafed_fmnist_a001_{setting}_n{N}_{augment}``) beside FedAvg (``dynafed_fmnist_a001_fedavg_from{L}``,
started from the DynaFed arm's state after round L: rounds 1..L are FedAvg in both), ours beside the paper's.

    python -m figures dynafed-table1 --scale paper --runs ~/.cache/shufflefl --force

Per arm: rounds reached, final accuracy, the mean of the last 5 rounds (the paper's measure), best, rounds to 70%,
seconds of local training per round; for DynaFed the synthesis (seconds, N, the matching loss at the first and the
last logged iteration, the learned α). Runs of 200 rounds take hours each on CPU, so the arms are also compared at
the last round both have reached (mean of its 5 rounds). δ² of D_syn against the real clients comes from the run's
own estimates or from ``python -m fl.remeasure RUN --only delta2`` (``estimates_posthoc.jsonl``). The figure: the
accuracy curves, the matching loss over the N outer iterations, δ² over rounds; D_syn as an image grid.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from figures.artefacts import Artefact, Built, Claim
from figures.flruns import plt, save
from figures.scripted import accuracy_numbers, points, read_rows, runs_root, window_mean
from theory.errors import InputError

# DynaFed Table 1, FMNIST, α = 0.01: mean test accuracy of the last 5 of 200 rounds (%).
PAPER = {"fedavg": 74.50, "dynafed": 87.52}
ROUNDS = 200


def synthesis(rows: list[dict]) -> dict | None:
    """The synthesis log of a DynaFed run (the round it ran after, seconds, the matching-loss curve, α)."""
    for row in rows:
        if "synthesis" in row.get("method", {}):
            return row["method"]["synthesis"] | {"round": row["round"]}
    return None


def delta2_curve(run: Path, rows: list[dict]) -> list[tuple[int, float]]:
    """(round, δ²) from the run's logged estimates and its post-hoc ones (``fl.remeasure``)."""
    found = {r["round"]: r["estimates"]["delta2"] for r in rows if "delta2" in r.get("estimates", {})}
    posthoc = run / "estimates_posthoc.jsonl"
    if posthoc.exists():
        for line in posthoc.read_text().splitlines():
            entry = json.loads(line)
            if "delta2" in entry["estimates"]:
                found.setdefault(entry["round"], entry["estimates"]["delta2"])
    return sorted(found.items())


def arm_numbers(run: Path) -> dict | None:
    rows = read_rows(run)
    if not rows:
        return None
    config = json.loads((run / "config.json").read_text())
    method = config.get("method", {})
    numbers = accuracy_numbers(rows, config["train"].get("target_accuracy", 0.7))
    numbers["local_s"] = float(np.mean([r["seconds_local"] for r in rows if "seconds_local" in r]))
    numbers["total"] = config["train"]["rounds"]
    if method.get("name") == "dynafed":
        numbers["synthesis"] = synthesis(rows)
        numbers["iterations"] = method.get("iterations")
        numbers["augment"] = method.get("augment", "dsa")
        numbers["delta2"] = delta2_curve(run, rows)
    return numbers


def collect(runs: Path) -> dict[str, dict]:
    """Arm label -> numbers: FedAvg first, then the DynaFed arms."""
    arms = {}
    for run in sorted(runs.glob("dynafed_fmnist_a001_fedavg_from*")):
        numbers = arm_numbers(run)
        if numbers:
            arms[f"FedAvg (from round {run.name.rsplit('from', 1)[1]})"] = numbers
    for run in sorted(runs.glob("dynafed_fmnist_a001_*_n*_*")):
        numbers = arm_numbers(run)
        if numbers and "synthesis" in numbers:
            setting = run.name.removeprefix("dynafed_fmnist_a001_").split("_n", 1)[0]
            arms[f"DynaFed {setting} settings, N = {numbers['iterations']}, {numbers['augment']}"] = numbers
    return arms


def table_rows(arms: dict[str, dict], common: int) -> list[list]:
    rows = []
    for label, v in arms.items():
        s = v.get("synthesis")
        paper = PAPER["dynafed" if s is not None else "fedavg"]
        rows.append([
            label, f"{v['rounds']} of {v['total']}", points([v["final"]]), points([v["last5"]]) + f" ({paper})",
            points([v["best"]]), v["to_target"] if v["to_target"] is not None else "-",
            points([window_mean(v["curve"], common - 4, common)]), f"{v['local_s']:.1f}",
            "-" if s is None else f"{s['seconds']:.0f} (after round {s['round']})",
            "-" if s is None or not s["loss"] else f"{s['loss'][0][1]:.3f} → {s['loss'][-1][1]:.3f}",
            "-" if s is None else f"{s['alpha']:.3g}",
        ])  # fmt: skip
    return rows


HEADERS = [
    "arm", "rounds", "final %", "mean last 5 % (paper)", "best %", "rounds to 70%", "mean of the common last 5 %",
    "s/round local", "synthesis s", "matching loss first → last", "α",
]  # fmt: skip


def draw_dsyn(runs: Path, folder: Path) -> list[str]:
    """D_syn of each finished synthesis, from the DynaFed runs' latest checkpoints, as image grids."""
    from plots.samples import plot_soft_grid  # matplotlib grids of learned images

    drawn = []
    for run in sorted(runs.glob("dynafed_fmnist_a001_*_n*_*")):
        checkpoint = run / "checkpoint.pt"
        if not checkpoint.exists():
            continue
        server = torch.load(checkpoint, map_location="cpu", weights_only=True).get("method", {}).get("server", {})
        if "x_syn" not in server:
            continue
        name = f"dsyn_{run.name.removeprefix('dynafed_fmnist_a001_')}.png"
        inputs, probabilities = server["x_syn"].double().numpy(), F.softmax(server["y_syn"].double(), 1).numpy()
        plot_soft_grid(inputs, probabilities, folder / name, title=f"D_syn of {run.name}")
        drawn.append(name)
    return drawn


def plot(arms: dict[str, dict], path: Path) -> list[str]:
    fig, (acc, loss, delta) = plt.subplots(1, 3, figsize=(14, 3.8))
    for label, v in arms.items():
        rounds, accuracy = zip(*v["curve"])
        acc.plot(rounds, 100 * np.array(accuracy), lw=1.0, label=label)
        s = v.get("synthesis")
        if s is not None and s["loss"]:
            loss.plot(*zip(*s["loss"]), lw=1.0, label=label)
        if v.get("delta2"):
            delta.plot(*zip(*v["delta2"]), marker="o", ms=3, lw=1.0, label=label)
    for value in PAPER.values():
        acc.axhline(value, ls=":", lw=0.8, color="grey")
    acc.set(title="test accuracy (dotted: the paper's last-5 means)", xlabel="round", ylabel="%", ylim=(0, 100))
    loss.set(title="matching loss of D_syn", xlabel="outer iteration", ylabel="loss")
    delta.set(title="δ² of D_syn vs the real clients", xlabel="round", ylabel="δ²")
    for ax in (acc, loss, delta):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("DynaFed Table 1, FMNIST, α = 0.01, 80 clients")
    return save(fig, path)


def build(scale: str, folder: Path) -> Built:
    runs = runs_root(folder.parent.parent)
    arms = collect(runs)
    if not arms:
        raise InputError(f"no DynaFed runs past the synthesis under {runs}: bash scripts/dynafed-experiments.sh")
    common = min(v["rounds"] for v in arms.values())
    fedavg = next((v for label, v in arms.items() if label.startswith("FedAvg")), None)
    lines, held = [], False
    for label, v in arms.items():
        if fedavg is None or v is fedavg:
            continue
        gain = window_mean(v["curve"], common - 4, common) - window_mean(fedavg["curve"], common - 4, common)
        wobble = float(np.std([a for t, a in fedavg["curve"] if common - 9 <= t <= common], ddof=1))
        beats = gain > 2 * wobble
        held = held or beats
        lines.append(
            f"{label}: {100 * gain:+.2f} points over FedAvg on the mean of rounds {common - 4}-{common} "
            f"({'more' if beats else 'not more'} than twice FedAvg's round-to-round sd there, {100 * wobble:.2f})"
        )
    unfinished = common < ROUNDS
    text = (
        f"DynaFed's claim (Table 1: FedAvg {PAPER['fedavg']} → DynaFed {PAPER['dynafed']}, +13.02 points at 200 "
        f"rounds) {'held' if held else 'did not hold'} at round {common}"
        + (f" of {ROUNDS} (the runs have not finished; one seed)" if unfinished else " (one seed)")
        + ": "
        + ("; ".join(lines) if lines else "no FedAvg arm to compare with yet")
        + "."
    )
    figures = plot(arms, folder / "dynafed_table1") + draw_dsyn(runs, folder)
    return Built(HEADERS, table_rows(arms, common), Claim(held, text), figures, {"arms": arms, "common": common})


ARTEFACT = Artefact(
    "dynafed-table1",
    "DynaFed Table 1 (FMNIST, α = 0.01, 80 clients, 40% participation): DynaFed against FedAvg",
    {
        "paper": "reads the runs of `bash scripts/dynafed-experiments.sh` (ITERATIONS=N, AUGMENT=dsa|none) in "
        "$SHUFFLEFL_RUNS/runs; δ² from `python -m fl.remeasure RUN --only delta2`",
    },
    build,
)
