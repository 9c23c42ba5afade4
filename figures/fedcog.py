"""FedCOG Table 1 on Fashion-MNIST from the runs of ``scripts/fedcog-experiments.sh``: the table (ours beside the
paper's) and the accuracy curves.

    python -m figures.fedcog [--runs results/runs] [--out results/fedcog]

For every partition and seed it reads ``fedcog_fmnist_{part}_seed{s}`` (FedAvg, 70 rounds) and
``..._fedcog`` (FedCOG from round 51, started from the FedAvg run's state after round 49) and reports, per
method: final accuracy (round 70), best, the mean of the last 5 rounds, rounds to 70%, ζ̂²/σ̂² (mean over the
estimates of rounds 50-70, same server-model convention for both), seconds per round (local training and
FedCOG's generation, rounds 51-70) and the gain FedCOG - FedAvg. A partition or seed that is missing is skipped;
an unfinished run is reported at the round it has reached.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from theory.cli import ArgumentParser, guarded, make_dir

PAPER = {("niid1", "fedavg"): 73.07, ("niid1", "fedcog"): 77.34, ("niid2", "fedavg"): 64.11, ("niid2", "fedcog"): 73.68}
PARTS = {"niid1": "NIID-1 (Dir 0.1)", "niid2": "NIID-2 (2 labels)"}


def read_rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_numbers(rows: list[dict], first_method_round: int = 51) -> dict:
    accuracy = [(r["round"], r["test_accuracy"]) for r in rows if r.get("test_accuracy") is not None]
    late = [r for r in rows if r["round"] >= first_method_round]
    estimates = [r["estimates"] for r in rows if "estimates" in r and r["round"] >= first_method_round - 1]
    return {
        "rounds": rows[-1]["round"] if rows else 0,
        "final": accuracy[-1][1] if accuracy else None,
        "best": max(a for _, a in accuracy) if accuracy else None,
        "last5": float(np.mean([a for _, a in accuracy[-5:]])) if accuracy else None,
        "to70": next((t for t, a in accuracy if a >= 0.7), None),
        "zeta2_hat": float(np.mean([e["zeta2_hat"] for e in estimates])) if estimates else None,
        "sigma2_hat": float(np.mean([e["sigma2_hat"] for e in estimates])) if estimates else None,
        "local_s": float(np.mean([r.get("seconds_local", np.nan) for r in late])) if late else None,
        "method_s": float(np.mean([r.get("seconds_method", np.nan) for r in late])) if late else None,
        "curve": accuracy,
    }


def collect(runs: Path, seeds: Sequence[int]) -> dict:
    """(part, method, seed) -> numbers, for the runs that exist."""
    out = {}
    for part in PARTS:
        for seed in seeds:
            base = runs / f"fedcog_fmnist_{part}_seed{seed}"
            for method, run in (("fedavg", base), ("fedcog", Path(f"{base}_fedcog"))):
                rows = read_rows(run)
                if rows:
                    out[part, method, seed] = run_numbers(rows)
    return out


def _fmt(values: list, scale: float = 1.0, digits: int = 2) -> str:
    values = [v * scale for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def table(numbers: dict) -> str:
    head = (
        "| partition | method | seeds | rounds | final acc. % (paper) | best % | mean last 5 % | rounds to 70% "
        "| ζ̂² r50-70 | σ̂² r50-70 | s/round local | s/round generation |"
    )
    lines = [head, "|" + "---|" * 12]
    for part, label in PARTS.items():
        for method in ("fedavg", "fedcog"):
            found = [v for (p, m, _), v in sorted(numbers.items()) if p == part and m == method]
            if not found:
                continue

            def col(key: str, scale: float = 1.0, d: int = 2, found=found) -> str:
                return _fmt([f[key] for f in found], scale, d)

            lines.append(
                f"| {label} | {method} | {len(found)} | {min(f['rounds'] for f in found)} "
                f"| {col('final', 100)} ({PAPER[part, method]}) | {col('best', 100)} | {col('last5', 100)} "
                f"| {col('to70', 1, 0)} | {col('zeta2_hat', 1, 3)} | {col('sigma2_hat', 1, 2)} "
                f"| {col('local_s', 1, 1)} | {col('method_s', 1, 1)} |"
            )
    return "\n".join(lines)


def gains(numbers: dict) -> str:
    """FedCOG − FedAvg per partition and seed (final and mean of the last 5 rounds), in points."""
    out = []
    for part, label in PARTS.items():
        pairs = [
            (seed, numbers[part, "fedavg", seed], numbers[part, "fedcog", seed])
            for (p, m, seed) in sorted(numbers)
            if p == part and m == "fedcog" and (part, "fedavg", seed) in numbers
        ]
        for seed, avg, cog in pairs:
            if cog["final"] is None or avg["final"] is None:
                continue
            out.append(
                f"- {label}, seed {seed}: FedCOG − FedAvg = {100 * (cog['final'] - avg['final']):+.2f} points final, "
                f"{100 * (cog['last5'] - avg['last5']):+.2f} mean of the last 5 (paper: "
                f"{PAPER[part, 'fedcog'] - PAPER[part, 'fedavg']:+.2f})"
            )
    return "\n".join(out)


def plot(numbers: dict, path: Path) -> None:
    fig, axes = plt.subplots(1, len(PARTS), figsize=(11, 3.8), squeeze=False)
    for ax, (part, label) in zip(axes[0], PARTS.items()):
        for (p, method, seed), v in sorted(numbers.items()):
            if p != part or not v["curve"]:
                continue
            rounds, acc = zip(*v["curve"])
            ax.plot(rounds, 100 * np.array(acc), label=f"{method} seed {seed}", lw=1.2)
        for method in ("fedavg", "fedcog"):
            ax.axhline(PAPER[part, method], ls=":", lw=0.8, color="C0" if method == "fedavg" else "C1")
        ax.axvline(50.5, color="grey", lw=0.6)
        ax.set(title=f"FMNIST {label}", xlabel="round", ylabel="test accuracy (%)", ylim=(40, 95))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)


@guarded("figures.fedcog")
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m figures.fedcog", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("results/runs"))
    parser.add_argument("--out", type=Path, default=Path("results/fedcog"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args(argv)
    numbers = collect(args.runs, args.seeds)
    if not numbers:
        print(f"no FedCOG runs under {args.runs} (bash scripts/fedcog-experiments.sh makes them)")
        return 0
    make_dir(args.out)
    plot(numbers, args.out / "fedcog_table1.png")
    text = table(numbers) + "\n\n" + gains(numbers)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
