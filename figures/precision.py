"""What the matching's precision (fl/precision.py: FP32, TF32, BF16) does to DynaFed's D_syn and to the arm's
accuracy: arms matched in each precision from the same round-L state as an FP32 arm of their seed.

    python -m figures.precision RUN [RUN ...] [--out DIR]

RUN: DynaFed run folders, grouped by seed. In each seed one is the FP32 arm (``method.precision`` "fp32", or
"auto" on the CPU, which is FP32); the others differ from it in ``method.precision`` alone (an ``--init-from`` of
its round-L checkpoint: the same trajectory). A seed with its FP32 arm alone adds to the seed spread only. Read
from each folder: ``config.json``, ``metrics.jsonl``, ``provenance.json`` and ``dynafed_synthesis.pt`` (what the
run ledger keeps), so the table is rebuilt from the ledger.

Per arm: D_syn's images against its FP32 twin's, ‖X − X_fp32‖ / ‖X_fp32‖ (the largest per-pixel difference
beside it), the share of images whose soft label's top class agrees, the total-variation distance between the soft
labels (mean over images), the learned inner step α, the matching loss at its last logged iteration; the test
accuracy at the last round and its mean over the last 5, and their change from the twin in points. Per precision,
its arms' mean of the last 5 rounds against the FP32 arms' over the seeds, by the one rule of
:mod:`figures.verdict` ("P above FP32": held / contradicted beyond the seed spread, not resolved within it or with
one seed). Writes ``precision.json`` and ``precision.png`` (accuracy by round, matching loss by iteration) into
``--out``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from figures.dynafed import synthesis
from figures.scripted import accuracy_numbers, rows_of, seed_list
from figures.verdict import direction, mean_sd
from fl.config import from_dict
from fl.torchfiles import load_safely
from plots.precision import plot_precision
from theory.cli import ArgumentParser, make_dir
from theory.errors import InputError
from theory.output import write_text_atomically

ROOT = Path(__file__).resolve().parents[1]

OUTPUTS = ("precision.json", "precision.png")  # what it writes into --out
LAST = 5  # rounds averaged at the end (accuracy_numbers' "last5")


def precision_of(config: dict) -> str:
    """The matching's precision of a run's config ("auto" where the config predates the option)."""
    return config.get("method", {}).get("precision", "auto")


def arm(run: Path) -> dict:
    """A DynaFed run's numbers: config, accuracy curve, synthesis log, and its D_syn (images, soft labels, α)."""
    files = [run / name for name in ("config.json", "metrics.jsonl", "dynafed_synthesis.pt")]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise InputError(f"{run}: not a DynaFed run past its synthesis (no {', '.join(missing)})")
    config = json.loads(files[0].read_text())
    if config.get("method", {}).get("name") != "dynafed":
        raise InputError(f"{run}: method {config.get('method', {}).get('name')!r}, not dynafed")
    rows = rows_of(run)
    numbers, logged = accuracy_numbers(rows, last=LAST), synthesis(rows)
    saved = load_safely(files[2], "saved DynaFed synthesis", "restore it from the run ledger")
    provenance = run / "provenance.json"
    device = json.loads(provenance.read_text()).get("device", "") if provenance.is_file() else ""
    if logged is None or saved.get("iteration") != config["method"].get("iterations", 1000):
        raise InputError(f"{run}: its synthesis has not finished")
    return {"run": run.name, "precision": precision_of(config), "seed": config["train"].get("seed", 0),
            "config": config, "device": device, "numbers": numbers, "synthesis": logged,
            "inputs": saved["inputs"].double(), "labels": torch.softmax(saved["label_logits"].double(), 1),
            "alpha": float(saved["lr"])}  # fmt: skip


def same_but_precision(a: dict, b: dict) -> list[str]:
    """The config keys (section.key) in which two runs differ, the precision aside; each config read as fl.run
    reads it (keys added since a run was made take their defaults)."""
    a, b = from_dict(a).to_dict(), from_dict(b).to_dict()
    keys = []
    for section in sorted(set(a) | set(b)):
        left, right = a.get(section, {}), b.get(section, {})
        if not isinstance(left, dict) or not isinstance(right, dict):
            keys += [section] if left != right else []
            continue
        for key in sorted(set(left) | set(right)):
            if key != "precision" and left.get(key) != right.get(key):
                keys.append(f"{section}.{key}")
    return keys


def compare(reference: dict, other: dict) -> dict:
    """``other``'s D_syn and accuracy against ``reference``'s (see the module docstring)."""
    x, y = other["inputs"], reference["inputs"]
    top = (other["labels"].argmax(1) == reference["labels"].argmax(1)).double().mean()
    final = {k: v["numbers"]["final"] for k, v in (("ref", reference), ("arm", other))}
    last = {k: v["numbers"]["last5"] for k, v in (("ref", reference), ("arm", other))}
    return {
        "run": other["run"], "precision": other["precision"], "seed": other["seed"],
        "dsyn_relative_difference": float((x - y).norm() / y.norm()),
        "dsyn_max_pixel_difference": float((x - y).abs().max()),
        "label_top_class_agreement": float(top),
        "label_total_variation": float(0.5 * (other["labels"] - reference["labels"]).abs().sum(1).mean()),
        "alpha": other["alpha"], "matching_loss_last": other["synthesis"]["loss"][-1][1],
        "synthesis_seconds": other["synthesis"]["seconds"],
        "final_accuracy": final["arm"], f"mean_last{LAST}": last["arm"],
        "final_change_points": 100 * (final["arm"] - final["ref"]),
        f"mean_last{LAST}_change_points": 100 * (last["arm"] - last["ref"]),
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    head = ("arm (precision)", "seed", "‖ΔX‖/‖X‖", "max abs ΔX", "top label agrees", "label TV", "α",
            "matching loss (last)", "final %", "Δ final", f"mean last {LAST} %", f"Δ last {LAST}")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (r["precision"], r["seed"], f"{r['dsyn_relative_difference']:.3g}",
                 f"{r['dsyn_max_pixel_difference']:.3g}", f"{100 * r['label_top_class_agreement']:.1f} %",
                 f"{r['label_total_variation']:.3g}", f"{r['alpha']:.4g}", f"{r['matching_loss_last']:.4f}",
                 f"{100 * r['final_accuracy']:.2f}", f"{r['final_change_points']:+.2f}",
                 f"{100 * r[f'mean_last{LAST}']:.2f}", f"{r[f'mean_last{LAST}_change_points']:+.2f}")  # fmt: skip
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def is_fp32(run: dict) -> bool:
    """Whether a run's matching ran in FP32 ("auto" is FP32 off CUDA only: on CUDA it is TF32)."""
    return run["precision"] == "fp32" or (run["precision"] == "auto" and not run["device"].startswith("cuda"))


def pair(runs: list[dict]) -> tuple[dict[int, dict], list[tuple[dict, dict]]]:
    """(the FP32 arm of each seed, [(FP32 twin, arm)] for the other runs); InputError for a seed with no or two
    FP32 arms, or an arm that differs from its twin in more than the precision."""
    twins: dict[int, dict] = {}
    for run in runs:
        if is_fp32(run):
            if run["seed"] in twins:
                raise InputError(f"{run['run']} and {twins[run['seed']]['run']}: two FP32 arms of seed {run['seed']}")
            twins[run["seed"]] = run
    pairs = []
    for run in runs:
        if is_fp32(run):
            continue
        twin = twins.get(run["seed"])
        if twin is None:
            raise InputError(f"{run['run']}: matched in {run['precision']} on {run['device'] or 'an unknown device'}, "
                             f"and no FP32 arm of seed {run['seed']} to compare it with")  # fmt: skip
        differ = same_but_precision(twin["config"], run["config"])
        if differ:
            raise InputError(f"{run['run']} differs from {twin['run']} in {', '.join(differ)}, not in the "
                             "precision alone")  # fmt: skip
        pairs.append((twin, run))
    return twins, pairs


def last_mean(run: dict) -> float:
    return run["numbers"]["last5"]


def summaries(twins: dict[int, dict], pairs: list[tuple[dict, dict]]) -> list[dict]:
    """Per precision: its arms' and the FP32 arms' means of the last rounds (points), the paired change, and the
    one rule's word on "this precision's accuracy is above FP32's"."""
    out = []
    for precision in dict.fromkeys(arm["precision"] for _, arm in pairs):
        mine = [(twin, arm) for twin, arm in pairs if arm["precision"] == precision]
        arms = [100 * last_mean(arm) for _, arm in mine]
        fp32 = [100 * last_mean(twin) for twin in twins.values()]
        change = mean_sd([100 * (last_mean(arm) - last_mean(twin)) for twin, arm in mine])
        out.append({"precision": precision, "seeds": sorted(arm["seed"] for _, arm in mine),
                    "fp32_seeds": sorted(twins), f"mean_last{LAST}": arms, f"fp32_mean_last{LAST}": fp32,
                    "change_points": change[0], "change_sd": change[1],
                    "above_fp32": direction(arms, fp32)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m figures.precision", description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="DynaFed arms: an FP32 one per seed, and the others")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "precision",
                        help="the output folder (refused when it holds files another tool made)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a non-empty --out it did not make, beside the files there (refused where one "
                        "has a name it writes, or another tool made it)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        runs = [arm(run) for run in args.runs]
        twins, pairs = pair(runs)
        if not pairs:
            raise InputError("no arm in another precision than FP32 among the runs given")
        make_dir(args.out, "output folder", tool="figures.precision", overwrite=args.overwrite, writes=OUTPUTS)
    except InputError as error:
        parser.error(str(error))
    rows = [compare(twin, other) for twin, other in pairs]
    summary = summaries(twins, pairs)
    result = {"rows": rows, "precisions": summary, "fp32_arms": {str(k): v["run"] for k, v in sorted(twins.items())}}
    write_text_atomically(args.out / OUTPUTS[0], json.dumps(result, indent=1))
    labels = [f"{'fp32' if is_fp32(a) else a['precision']} (seed {a['seed']})" for a in runs]
    curves = {label: tuple(map(list, zip(*a["numbers"]["curve"]))) for label, a in zip(labels, runs)}
    losses = {label: tuple(map(list, zip(*a["synthesis"]["loss"]))) for label, a in zip(labels, runs)}
    plot_precision(curves, losses, args.out / OUTPUTS[1], "DynaFed: the matching in FP32, TF32, BF16")
    print(table(rows))
    for entry in summary:
        print(f"{entry['precision']} ({seed_list(entry['seeds'])}) against FP32 ({seed_list(entry['fp32_seeds'])}): "
              f"mean of the last {LAST} rounds "
              f"{', '.join(f'{v:.2f}' for v in entry[f'mean_last{LAST}'])} against "
              f"{', '.join(f'{v:.2f}' for v in entry[f'fp32_mean_last{LAST}'])} %, paired change "
              f"{entry['change_points']:+.2f} ± {entry['change_sd']:.2f} points; "
              f"above FP32: {entry['above_fp32']}")  # fmt: skip
    print(f"wrote {args.out / 'precision.json'} and {args.out / 'precision.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
