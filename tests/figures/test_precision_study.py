"""``python -m figures.precision`` on run folders written here: D_syn's and the accuracy's changes against the FP32
arm computed independently, and the folders it refuses (another setting than the precision, a reference that is not
FP32, an unfinished synthesis), each in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from figures.precision import main as precision_main

ROOT = Path(__file__).resolve().parents[2]


def write_run(folder: Path, accuracy: list[float], inputs: torch.Tensor, logits: torch.Tensor, precision: str = "",
              seed: int = 0, device: str = "cpu", iteration: int = 3, lr: float = 0.1) -> Path:  # fmt: skip
    folder.mkdir(parents=True)
    method = {"name": "dynafed", "iterations": 3} | ({"precision": precision} if precision else {})
    config = {"data": {"dataset": "fmnist"}, "train": {"seed": seed, "rounds": len(accuracy)}, "method": method}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "provenance.json").write_text(json.dumps({"device": device}))
    rows = [{"round": t + 1, "test_accuracy": a} for t, a in enumerate(accuracy)]
    rows[1]["method"] = {"synthesis": {"loss": [[0, 1.0], [2, 0.5 + seed]], "seconds": 9.0, "alpha": lr}}
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    saved = {"iteration": iteration, "inputs": inputs, "label_logits": logits, "lr": torch.tensor(lr)}
    torch.save(saved, folder / "dynafed_synthesis.pt")
    return folder


def run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "figures.precision", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture
def runs(tmp_path):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 1, 3, 3, generator=generator)
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0], [0.0, 1.0]])
    moved = x.clone()
    moved[0, 0, 0, 0] += 0.5
    flipped = logits.clone()
    flipped[2] = torch.tensor([0.0, 1.0])  # one image's top class changes
    reference = write_run(tmp_path / "ref", [0.5, 0.6, 0.70, 0.72, 0.74, 0.76, 0.78], x, logits)
    tf32 = write_run(tmp_path / "tf32", [0.5, 0.6, 0.71, 0.73, 0.75, 0.77, 0.80], moved, flipped, "tf32", lr=0.2)
    other_seed = write_run(tmp_path / "seed1", [0.5, 0.6, 0.7, 0.7, 0.7, 0.7, 0.7], x, logits, seed=1)
    return tmp_path, reference, tf32, other_seed, (x, moved, logits, flipped)


def test_the_changes_against_the_fp32_twin_and_the_rule_over_seeds(runs):
    tmp_path, reference, tf32, other_seed, (x, _, logits, flipped) = runs
    tf32_seed1 = write_run(tmp_path / "tf32_seed1", [0.5, 0.6, 0.71, 0.71, 0.71, 0.71, 0.71], x, logits, "tf32", 1)
    out = tmp_path / "out"
    done = run(reference, tf32, other_seed, tf32_seed1, "--out", out)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "precision.json").read_text())
    row, row1 = result["rows"]
    assert row["precision"] == "tf32" and row["alpha"] == pytest.approx(0.2)
    assert row["dsyn_relative_difference"] == pytest.approx(0.5 / float(x.double().norm()))
    assert row["dsyn_max_pixel_difference"] == pytest.approx(0.5, rel=1e-6)
    assert row["label_top_class_agreement"] == 0.75 and row1["label_top_class_agreement"] == 1.0
    p, q = torch.softmax(flipped.double(), 1), torch.softmax(logits.double(), 1)
    assert row["label_total_variation"] == pytest.approx(float((p - q).abs().sum() / 2 / 4))
    assert row["final_change_points"] == pytest.approx(2.0)
    assert row["mean_last5_change_points"] == pytest.approx(1.2)  # 75.2 − 74.0, the last 5 rounds
    (summary,) = result["precisions"]
    assert summary["seeds"] == [0, 1] and summary["change_points"] == pytest.approx(1.1)
    assert summary["change_sd"] == pytest.approx(float(torch.tensor([1.2, 1.0], dtype=torch.float64).std()))
    # arms 75.2, 71.0 against FP32 74.0, 70.0: a difference of 1.1 within sqrt(2.97² + 2.83²)
    assert summary["above_fp32"] == "not resolved"
    assert (out / "precision.png").stat().st_size > 0
    assert "| tf32 | 0 |" in done.stdout and "tf32 (seeds 0, 1) against FP32 (seeds 0, 1)" in done.stdout


def test_what_it_refuses_in_one_line(runs, tmp_path, capsys):
    """Each refusal as the CLI gives it (the first through `python -m figures.precision`, the others in this
    process: the same parser, a second apiece less)."""
    _, reference, tf32, _, (x, _, logits, _) = runs
    alone = write_run(tmp_path / "alone", [0.5] * 7, x, logits, "bf16", seed=3)
    longer = write_run(tmp_path / "longer", [0.5] * 8, x, logits, "bf16")
    gpu = write_run(tmp_path / "gpu", [0.5] * 7, x, logits, device="cuda:0")
    unfinished = write_run(tmp_path / "unfinished", [0.5] * 7, x, logits, "tf32", iteration=2)
    cases = [((reference, alone), "alone: matched in bf16 on cpu, and no FP32 arm of seed 3 to compare it with"),
             ((reference, longer), "longer differs from ref in train.rounds, not in the precision alone"),
             ((gpu, tf32), "gpu: matched in auto on cuda:0, and no FP32 arm of seed 0"),
             ((reference, reference), "two FP32 arms of seed 0"),
             ((reference,), "no arm in another precision than FP32"),
             ((reference, unfinished), "its synthesis has not finished"),
             ((reference, tmp_path / "nothing"), "not a DynaFed run past its synthesis")]  # fmt: skip
    (args, message), *others = cases
    done = run(*args, "--out", tmp_path / "out2")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    for args, message in others:
        with pytest.raises(SystemExit) as exit_:
            precision_main([*map(str, args), "--out", str(tmp_path / "out2")])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err and err.count("error:") == 1, err
    assert not (tmp_path / "out2").exists()
