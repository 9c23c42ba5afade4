"""What the matching's precision (fl/precision.py: FP32, TF32, BF16) does to DynaFed's D_syn and to the arm's
accuracy: arms of one seed matched in each precision from the same round-L state, against the FP32 arm.

    python benchmarks/precision_effect.py REFERENCE ARM [ARM ...] [--spread RUN ...] [--out DIR]

REFERENCE: the run folder of the arm matched in FP32 (``method.precision`` "fp32", or "auto" on the CPU, which is
FP32). ARM: arms that differ from it in ``method.precision`` alone (an ``--init-from`` of its round-L checkpoint:
the same trajectory). ``--spread``: FP32 arms of other seeds, whose spread of accuracy is the yardstick for an arm's
change (one seed per arm: the numbers are shown, no verdict is drawn). Read from each folder: ``config.json``,
``metrics.jsonl`` and ``dynafed_synthesis.pt`` (what the run ledger keeps), so the table is rebuilt from the ledger.

Per arm: D_syn's images against the reference's, ‖X − X_ref‖ / ‖X_ref‖ (the largest per-pixel difference beside
it), the share of images whose soft label's top class agrees, the total-variation distance between the soft labels
(mean over images), the learned inner step α, the matching loss at its last logged iteration; the test accuracy at
the last round and its mean over the last 5, and their change from the reference in points. Writes
``precision.json`` and ``precision.png`` (accuracy by round, matching loss by iteration, the ``--spread`` seeds'
beside them for scale) into ``--out``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.config import from_dict  # noqa: E402
from fl.torchfiles import load_safely  # noqa: E402
from theory.cli import ArgumentParser, output_file_problem  # noqa: E402
from theory.errors import InputError  # noqa: E402

LAST = 5  # rounds averaged at the end


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
    rows = [json.loads(line) for line in files[1].read_text().splitlines() if line.strip()]
    curve = [(r["round"], r["test_accuracy"]) for r in rows if r.get("test_accuracy") is not None]
    synthesis = next((r["method"]["synthesis"] for r in rows if "synthesis" in r.get("method", {})), None)
    saved = load_safely(files[2], "saved DynaFed synthesis", "restore it from the run ledger")
    provenance = run / "provenance.json"
    device = json.loads(provenance.read_text()).get("device", "") if provenance.is_file() else ""
    if synthesis is None or saved.get("iteration") != config["method"].get("iterations", 1000):
        raise InputError(f"{run}: its synthesis has not finished")
    return {"run": run.name, "precision": precision_of(config), "seed": config["train"].get("seed", 0),
            "config": config, "device": device, "curve": curve, "synthesis": synthesis,
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
    final = {k: v["curve"][-1][1] for k, v in (("ref", reference), ("arm", other))}
    last = {k: float(np.mean([a for _, a in v["curve"][-LAST:]])) for k, v in (("ref", reference), ("arm", other))}
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


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="precision_effect.py", description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="the FP32 arm's run folder")
    parser.add_argument("arms", type=Path, nargs="+", help="arms matched in another precision")
    parser.add_argument("--spread", type=Path, nargs="*", default=[], help="FP32 arms of other seeds")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "precision")
    args = parser.parse_args(argv)
    for name in ("precision.json", "precision.png"):
        if (problem := output_file_problem(args.out / name, name)) is not None:
            parser.error(problem)
    try:
        reference = arm(args.reference)
        arms = [arm(run) for run in args.arms]
        spread = [arm(run) for run in args.spread]
    except InputError as error:
        parser.error(str(error))
    for run in (reference, *spread):  # "auto" is FP32 on the CPU only (on CUDA: TF32)
        if run["precision"] != "fp32" and (run["precision"] != "auto" or run["device"].startswith("cuda")):
            parser.error(f"{run['run']}: matched in {run['precision']} on {run['device'] or 'an unknown device'}, "
                         "not in FP32")  # fmt: skip
    for other in arms:
        try:
            differ = same_but_precision(reference["config"], other["config"])
        except InputError as error:
            parser.error(f"{other['run']} or {reference['run']}: {error}")
        if differ:
            parser.error(f"{other['run']} differs from {reference['run']} in {', '.join(differ)}, not in the "
                         "precision alone")  # fmt: skip
    rows = [compare(reference, other) for other in arms]
    seeds = [reference, *spread]
    lasts = [100 * float(np.mean([a for _, a in s["curve"][-LAST:]])) for s in seeds]
    yardstick = {"runs": [s["run"] for s in seeds], f"mean_last{LAST}": lasts,
                 "sd_points": float(np.std(lasts, ddof=1)) if len(lasts) > 1 else None}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"reference": reference["run"], "rows": rows, "fp32_seeds": yardstick}
    (args.out / "precision.json").write_text(json.dumps(result, indent=1))
    from plots.precision import plot_precision

    everyone = [reference, *arms, *spread]  # the other seeds' curves for scale
    labels = [f"{a['precision'] if a['precision'] != 'auto' else 'fp32'} (seed {a['seed']})" for a in everyone]
    curves = {label: tuple(map(list, zip(*a["curve"]))) for label, a in zip(labels, everyone)}
    losses = {label: tuple(map(list, zip(*a["synthesis"]["loss"]))) for label, a in zip(labels, everyone)}
    plot_precision(
        curves, losses, args.out / "precision.png", f"DynaFed, matching precision against {reference['run']}"
    )
    print(table(rows))
    if yardstick["sd_points"] is not None:
        print(f"FP32 seeds ({', '.join(yardstick['runs'])}): mean of the last {LAST} rounds "
              f"{', '.join(f'{v:.2f}' for v in lasts)} % (sd {yardstick['sd_points']:.2f} points)")  # fmt: skip
    print(f"wrote {args.out / 'precision.json'} and {args.out / 'precision.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
