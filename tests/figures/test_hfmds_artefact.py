"""figures.hfmds on run folders the test writes (metrics.jsonl rows shaped as fl.run's round_row with HFMDs' method
log): the numbers against a hand computation, the paired gain and its verdict, a missing arm, no runs at all."""

from __future__ import annotations

import json

import numpy as np
import pytest

from figures.artefacts import Build
from figures.hfmds import ARTEFACT, CONTROL
from figures.hfmds import build as build_hfmds
from theory.errors import InputError

FEDAVG = {
    0: [0.5] * 19 + [0.60, 0.62, 0.64, 0.66, 0.68, 0.70],  # last 5: 0.66, r20-25: 0.65, 70% at round 25
    1: [0.5] * 19 + [0.61, 0.63, 0.65, 0.67, 0.69, 0.69],  # last 5: 0.666, r20-25: 0.6567, never 70%
}
HFMDS = {
    0: [0.5] * 18 + [0.71] + [0.72] * 6,  # last 5: 0.72, 70% at round 19
    1: [0.5] * 19 + [0.73] * 6,  # last 5: 0.73, 70% at round 20
}


def synthesis(t: int, seed: int) -> dict:
    """HFMDs' synthesis record (fl/methods/hfmds.py before_round), the keys the artefact reads and a few others."""
    return {
        "round": t, "seconds": 100.0 + 10 * seed, "loss_first": 2.3, "loss_last": 1.1, "psnr_mean": 12.0 + seed,
        "psnr_min": 10.0, "psnr_max": 14.0, "psnr_clamped_mean": 13.0 + seed, "pixels_outside": 0.02,
        "pixels_quantiles": [0.0, 0.5, 1.0], "pool_size": 40, "numbers_sent": 31360, "flops_batch": 10,
    }  # fmt: skip


def write_run(folder, accuracies, seed: int = 0, method: bool = False) -> None:
    """metrics.jsonl as fl.run writes it: with ``method``, a synthesis at round 20 and the pool's gradient share of
    both participants from round 20 on (0.8, 0.9 at the synthesis round, 0.6, 0.7 after)."""
    folder.mkdir(parents=True)
    rows = []
    for t, accuracy in enumerate(accuracies, start=1):
        row = {"round": t, "communication": 1000 * t, "clients": 2, "backend": "workers"}
        row |= {"seconds_local": 2.0 if t >= 20 else 1.0, "seconds_method": 0.0}
        if method and t == 20:
            row["method"] = {"synthesis": synthesis(t, seed), "numbers_sent": 31360, "pool_share": [0.8, 0.9],
                             "pool_cosine": [0.3, 0.2]}  # fmt: skip
        elif method and t > 20:
            row["method"] = {"pool_share": [0.6, 0.7], "pool_cosine": [0.5, 0.4]}
        row |= {"test_loss": 1.0, "test_accuracy": accuracy}
        if t % 10 == 0 or t == 1:
            row["estimates"] = {"zeta2_hat": 0.1, "sigma2_hat": 2.0}
        rows.append(row | {"seconds": 3.0 * t})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def runs(tmp_path):
    return tmp_path / "store" / "runs"


def build(scale, folder):
    """The artefact at ``scale`` into ``folder`` (tmp_path/figs/NAME/SCALE), the run store tmp_path/store."""
    return build_hfmds(Build(scale, folder, runs=folder.parents[2] / "store"))


def write_arms(runs, hfmds=HFMDS, part="dir001") -> None:
    for seed in (0, 1):
        write_run(runs / f"hfmds_fmnist_{part}_seed{seed}_fedavg", FEDAVG[seed], seed)
        write_run(runs / f"hfmds_fmnist_{part}_seed{seed}_hfmds", hfmds[seed], seed, method=True)


def folder(tmp_path):
    """The artefact's scale folder, made as Artefact.make makes it before a build."""
    path = tmp_path / "figs" / "hfmds-fmnist" / "paper"
    path.mkdir(parents=True, exist_ok=True)
    return path


def plain_types(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain_types(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(plain_types(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_numbers_gain_and_verdict(runs, tmp_path):
    write_arms(runs)
    ctx = ARTEFACT.context("paper", tmp_path / "figs", runs=tmp_path / "store")
    result, made = ARTEFACT.make(ctx)  # result.json written: the numbers are JSON
    assert made and result["figures"] == ["hfmds_fmnist.png", "hfmds_fmnist.pdf"]
    assert (folder(tmp_path) / "hfmds_fmnist.png").stat().st_size > 0
    numbers = build("paper", folder(tmp_path)).numbers
    assert plain_types(numbers)
    fedavg, hfmds = numbers["runs"]["dir001/fedavg/seed0"], numbers["runs"]["dir001/hfmds/seed1"]
    assert fedavg["rounds"] == 25 and fedavg["last5"] == pytest.approx(0.66) and fedavg["to_target"] == 25
    assert fedavg["pool_window"] == pytest.approx(0.65) and fedavg["psnr"] is None and fedavg["pool_share"] is None
    assert numbers["runs"]["dir001/fedavg/seed1"]["to_target"] is None
    assert numbers["runs"]["dir001/hfmds/seed0"]["to_target"] == 19 and hfmds["to_target"] == 20
    assert hfmds["psnr"] == 13.0 and hfmds["psnr_clamped"] == 14.0 and hfmds["pixels_outside"] == 0.02
    assert hfmds["synthesis_s"] == 110.0 and hfmds["local_s"] == 2.0 and hfmds["synthesis_rounds"] == [20]
    assert hfmds["pool_share"] == pytest.approx((0.85 + 5 * 0.65) / 6)
    gain = numbers["gains"]["dir001"]
    assert gain["seeds"] == [0, 1] and gain["last5"] == pytest.approx([0.06, 0.064])
    # spread: sd(0.66, 0.666) = 0.006/√2, sd(0.72, 0.73) = 0.01/√2; hypot = 0.00825 < the mean gain 0.062
    assert gain["verdict"] == "beyond the seed spread (+6.20 points against ±0.82)"
    assert result["claim"]["held"] and "2 classes (shards): no paired runs" in result["claim"]["text"]
    assert "CIFAR-10 Dir 0.01: 28.53 → 36.05, +7.52" in result["claim"]["text"]
    rows = {(r[0], r[1]): r for r in result["rows"]}
    assert set(rows) == {("Dir 0.01", "fedavg"), ("Dir 0.01", "hfmds"), ("Dir 0.01", "hfmds − fedavg (paired)")}
    row = rows["Dir 0.01", "fedavg"]
    assert row[2:8] == [2, 25, "69.50 ± 0.71", "66.30 ± 0.42", "65.33 ± 0.47", "25.0 (1 of 2 seeds)"]
    assert rows["Dir 0.01", "hfmds"][8:14] == ["12.50 ± 0.71", "13.50 ± 0.71", "2.00 ± 0.00", "0.683 ± 0.000",
                                               "105 ± 7", "2.0 ± 0.0"]  # fmt: skip
    assert rows["Dir 0.01", "hfmds − fedavg (paired)"][5] == "6.20 ± 0.28"


def test_gain_within_the_spread_does_not_hold(runs, tmp_path):
    # last 5: HFMDs 0.67 and 0.72, gains 0.01 and 0.054 (mean 0.032); spread hypot(0.006, 0.05)/√2 = 0.0356
    write_arms(runs, hfmds={0: [0.5] * 19 + [0.67] * 6, 1: [0.5] * 19 + [0.72] * 6})
    built = build("paper", folder(tmp_path))
    gain = built.numbers["gains"]["dir001"]
    assert gain["mean_last5"] == pytest.approx(0.032)
    spread = np.hypot(np.std([0.66, 0.666], ddof=1), np.std([0.67, 0.72], ddof=1))
    assert gain["verdict"] == f"within the seed spread (+3.20 points against ±{100 * spread:.2f})"
    assert built.claim.verdict == "not resolved" and "FMNIST, 2 seeds" not in built.claim.text
    assert ": not resolved: mean of the last" in built.claim.text


def test_missing_arm_and_unfinished_run(runs, tmp_path):
    write_arms(runs)
    for name in ("hfmds_fmnist_dir001_seed1_hfmds", "hfmds_fmnist_dir001_seed1_fedavg"):
        (runs / name / "metrics.jsonl").unlink()  # started, no round yet: skipped
    write_run(runs / "hfmds_fmnist_shards_seed0_hfmds", HFMDS[0][:22], method=True)  # at round 22
    write_run(runs / "hfmds_fmnist_shards_seed1_fedavg", FEDAVG[1])  # its HFMDs run missing
    built = build("paper", folder(tmp_path))
    assert set(built.numbers["runs"]) == {
        "dir001/fedavg/seed0", "dir001/hfmds/seed0", "shards/hfmds/seed0", "shards/fedavg/seed1"
    }  # fmt: skip
    assert [r[:4] for r in built.rows] == [
        ["Dir 0.01", "fedavg", 1, 25], ["Dir 0.01", "hfmds", 1, 25], ["Dir 0.01", "hfmds − fedavg (paired)", 1, 25],
        ["2 classes (shards)", "fedavg", 1, 25], ["2 classes (shards)", "hfmds", 1, 22],
    ]  # fmt: skip
    assert set(built.numbers["gains"]) == {"dir001"}
    assert built.numbers["gains"]["dir001"]["verdict"] == "one seed: no spread to judge by"
    # another data set than the paper's: no size word, one seed or three
    assert (
        built.claim.size.startswith("not comparable")
        and "Fashion-MNIST here, CIFAR-10 in the paper" in built.claim.size
    )
    assert not built.claim.held and "2 classes (shards): no paired runs" in built.claim.text


def test_unfinished_run_is_paired_at_the_round_both_reached(runs, tmp_path):
    write_run(runs / "hfmds_fmnist_shards_seed0_fedavg", FEDAVG[0])
    write_run(runs / "hfmds_fmnist_shards_seed0_hfmds", HFMDS[0][:22], method=True)
    gain = build("paper", folder(tmp_path)).numbers["gains"]["shards"]
    # rounds 18-22: HFMDs 0.5, 0.71, 0.72, 0.72, 0.72 (0.674), FedAvg 0.5, 0.5, 0.60, 0.62, 0.64 (0.572)
    assert gain["rounds"] == 22 and gain["last5"] == pytest.approx([0.102])
    assert gain["final"] == pytest.approx([0.08]) and gain["pool_window"] == pytest.approx([0.72 - 0.62])


def test_no_runs_is_an_input_error(runs, tmp_path):
    with pytest.raises(InputError, match=r"bash scripts/hfmds-experiments\.sh \[dir001\|shards\] 0 1 2"):
        build("paper", folder(tmp_path))


def test_the_lr10_control_is_read_and_paired_by_seed(runs, tmp_path):
    write_arms(runs)
    control = {0: [0.5] * 19 + [0.70] * 6, 1: [0.5] * 19 + [0.71] * 6}  # last 5: 0.70, 0.71
    for seed in (0, 1):
        write_run(runs / f"hfmds_fmnist_dir001_seed{seed}_fedavg_alpha01", control[seed], seed)
    built = build("paper", folder(tmp_path))
    gain = built.numbers["gains"]["dir001/fedavg_alpha01"]
    assert gain["seeds"] == [0, 1] and gain["last5"] == pytest.approx([0.02, 0.02]) and gain["against"] == CONTROL
    assert built.numbers["gains"]["dir001"]["last5"] == pytest.approx([0.06, 0.064])  # FedAvg's pairing unchanged
    rows = {(r[0], r[1]): r for r in built.rows}
    assert rows["Dir 0.01", "fedavg_alpha01"][2:6] == [2, 25, "70.50 ± 0.71", "70.50 ± 0.71"]
    assert rows["Dir 0.01", "hfmds − lr/10 control (paired)"][5] == "2.00 ± 0.00"
    assert "Against the lr/10 control" in built.claim.text and "control 70.50 ± 0.71 → HFMDs" in built.claim.text
    assert built.claim.verdict == "held"  # the FedAvg comparison decides; the control is reported beside it
