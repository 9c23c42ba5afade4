"""Collect what scripts/gpu-check.sh measured into OUT/summary.json and OUT/summary.md (device, torch, each part's
seconds and exit code, the benchmark table, the FL runs' accuracy and timings). Exit code: 1 if a part failed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from theory.output import write_text_atomically  # noqa: E402 (each file replaced whole, never through a link)


def run_numbers(folder: Path) -> dict | None:
    path = folder / "summary.json"
    if not path.exists():
        return None
    s = json.loads(path.read_text())
    keys = ("rounds", "final_test_accuracy", "best_test_accuracy", "rounds_to_target", "seconds", "seconds_local")
    out = {k: s.get(k) for k in keys}
    generators = s.get("generators") or []
    if generators:
        out["generator_seconds_train"] = sum(g.get("seconds_train", 0.0) for g in generators)
        out["generator_seconds_sample"] = sum(g.get("seconds_sample", 0.0) for g in generators)
    return out


def main(out: Path) -> int:
    parts = [json.loads(line) for line in (out / "parts.jsonl").read_text().splitlines() if line.strip()]
    cuda = torch.cuda.is_available()
    summary = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (no CUDA device)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "parts": parts,
        "total_seconds": sum(p["seconds"] for p in parts),
        "fmnist_fedavg": run_numbers(out / "fmnist_fedavg"),
        "fedssyn_ddpm": run_numbers(out / "fedssyn_ddpm"),
    }
    bench = out / "bench.json"
    summary["benchmark"] = json.loads(bench.read_text()) if bench.exists() else None
    write_text_atomically(out / "summary.json", json.dumps(summary, indent=2))
    lines = [
        f"# GPU check: {summary['device']}, torch {summary['torch']} (CUDA {summary['cuda']})",
        "",
        "| part | seconds | exit |",
        "|---|---|---|",
        *(f"| {p['part']} | {p['seconds']:.1f} | {p['rc']} |" for p in parts),
        f"| total | {summary['total_seconds']:.1f} | |",
        "",
    ]
    for name in ("fmnist_fedavg", "fedssyn_ddpm"):
        if summary[name]:
            lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in summary[name].items()))
    if summary["benchmark"]:
        from clients_bench import table

        lines += ["", table(summary["benchmark"]["rows"])]
    write_text_atomically(out / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return int(any(p["rc"] != 0 for p in parts))


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
