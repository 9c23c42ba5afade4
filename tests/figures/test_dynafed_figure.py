"""The dynafed-table1 artefact on run folders the test writes: arms, the comparison at the common round, the
synthesis columns, δ² from the post-hoc file, the D_syn grid from the checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from figures import dynafed
from figures.artefacts import Build
from theory.errors import InputError


def write_run(folder, accuracies, method=None, synthesis_round=None, width=None, rounds=200, seed=None):
    folder.mkdir(parents=True)
    config = {"train": {"rounds": rounds, "target_accuracy": 0.7}, "method": method or {"name": "none"}}
    if seed is not None:
        config["train"]["seed"] = seed
    if width is not None:
        config["model"] = {"name": "convnet3", "width": width}
    (folder / "config.json").write_text(json.dumps(config))
    rows = []
    for t, a in enumerate(accuracies, start=1):
        row = {"round": t, "test_accuracy": a, "seconds_local": 2.0}
        if t == synthesis_round:
            row["method"] = {"synthesis": {"seconds": 30.0, "loss": [[0, 0.9], [299, 0.4]], "alpha": 0.01}}
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store" / "runs"


def build(scale, folder):
    """The artefact at ``scale`` into ``folder`` (tmp_path/figs/NAME/SCALE), the run store tmp_path/store."""
    return dynafed.build(Build(scale, folder, runs=folder.parents[2] / "store"))


def test_arms_compared_at_the_common_round(tmp_path, store):
    folder = tmp_path / "figs" / "dynafed-table1" / "paper"
    folder.mkdir(parents=True)
    wobble = [0.60, 0.62] * 20  # FedAvg alternates 60/62%: sd over 10 rounds 1.05 points
    write_run(store / "dynafed_fmnist_a001_fedavg_from23", [0.5] * 24 + wobble)  # 64 rounds
    dsa = store / "dynafed_fmnist_a001_code_n300_dsa"
    method = {"name": "dynafed", "iterations": 300, "augment": "dsa"}
    write_run(dsa, [0.5] * 24 + [0.7] * 36, method, synthesis_round=24)  # 60 rounds
    (dsa / "estimates_posthoc.jsonl").write_text(json.dumps({"round": 30, "estimates": {"delta2": 1.5}}) + "\n")
    torch.save({"round": 61, "x": torch.zeros(3), "method": {"server": {
        "x_syn": torch.randn(20, 1, 4, 4), "y_syn": torch.randn(20, 10)}}}, dsa / "checkpoint.pt")  # fmt: skip
    built = build("paper", folder)
    assert built.numbers["common"] == 60
    fedavg, arm = built.rows
    assert fedavg[:3] == ["FedAvg (from round 23)", 0, "64 of 200"] and fedavg[7] == "61.20"
    assert arm[:2] == ["DynaFed code settings, N = 300, dsa", 0] and arm[4] == "70.00 (87.52)" and arm[6] == 25
    assert arm[9] == "30 (after round 24)" and arm[10] == "0.900 → 0.400"
    assert built.numbers["arms"][1]["delta2"] == [(30, 1.5)]
    # one seed: no seed spread, so not resolved, whatever its standard error says
    assert built.claim.verdict == "not resolved" and "+8.80 points over FedAvg on the mean of rounds 56-60" in (
        built.claim.text
    )
    text = built.claim.text  # each run that stopped short, with its seed and its own round
    assert "stopped short of round 200: FedAvg (from round 23) at round 64 (seed 0); DynaFed code settings" in text
    assert "dsa at round 60 (seed 0); compared at round" in text
    assert "60, the last every arm reached; not resumable" in built.claim.text
    # standard error: FedAvg's sd over rounds 51-60 is 0.01054 (five 60s, five 62s), DynaFed's 0: 1.054 / sqrt(5)
    assert "more than twice its standard error, 0.47" in built.claim.text
    assert "above FedAvg in 36 of the 36 rounds both recorded in rounds 25-60 (after its synthesis in round 24" in (
        built.claim.text
    )  # the window counted, named
    assert "stopped short of round 200" in built.claim.text
    assert "dsyn_code_n300_dsa.png" in built.figures and (folder / "dsyn_code_n300_dsa.png").stat().st_size > 0


def test_no_fedavg_arm_and_no_runs(tmp_path, store):
    folder = tmp_path / "figs" / "dynafed-table1" / "paper"
    folder.mkdir(parents=True)
    with pytest.raises(InputError, match=r"dynafed-experiments\.sh"):
        build("paper", folder)
    method = {"name": "dynafed", "iterations": 300, "augment": "none"}
    write_run(store / "dynafed_fmnist_a001_code_n300_none", [0.5] * 30, method, synthesis_round=24)
    built = build("paper", folder)
    assert not built.claim.held and "no FedAvg arm" in built.claim.text


def test_the_cpu_scale_reads_the_reduced_protocol_only(tmp_path, store):
    """The cpu scale takes the runs of WIDTH=32 ROUNDS=50 (their names and their configs), the paper scale never
    does, and the claim says the protocol is reduced."""
    folder = tmp_path / "figs" / "dynafed-table1" / "cpu"
    folder.mkdir(parents=True)
    method = {"name": "dynafed", "iterations": 300, "augment": "dsa"}
    write_run(store / "dynafed_fmnist_a001_fedavg_w32_r50_from23", [0.5] * 50, width=32, rounds=50)
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n300_dsa", [0.5] * 50, method, 24, width=32, rounds=50)
    # an arm stopped in its synthesis (no synthesis row yet) is left out
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n300_none", [0.5] * 23, method, width=32, rounds=50)
    # the same names at another width are not this protocol's
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n100_dsa", [0.9] * 50, method, 24, width=64, rounds=50)
    built = build("cpu", folder)
    assert [row[0] for row in built.rows] == ["FedAvg (from round 23)", "DynaFed code settings, N = 300, dsa"]
    assert "+0.00 points over FedAvg" in built.claim.text  # paired: FedAvg from 23 with the synthesis after 24
    assert "reduced CPU protocol (ConvNet-3 width 32, not 128; 50 rounds)" in built.claim.text
    assert not built.claim.held and "round 50 (one seed)" in built.claim.text
    paper = tmp_path / "figs" / "dynafed-table1" / "paper"
    paper.mkdir(parents=True)
    with pytest.raises(InputError, match="paper scale"):
        build("paper", paper)


def test_seeds_pair_with_fedavg_of_the_same_seed_and_start(tmp_path, store):
    """Runs of scripts/dynafed-experiments.sh with SEED=k (names ending in _seed{k}): each DynaFed run is compared
    with the FedAvg run of its seed that started from its round L - 1 (never with another setting's), the verdict
    is the mean gain against the seed spread, and D_syn is drawn from the saved synthesis where no checkpoint
    came back (a GPU campaign's archives)."""
    folder = tmp_path / "figs" / "dynafed-table1" / "paper"
    folder.mkdir(parents=True)
    method = {"name": "dynafed", "iterations": 1000, "augment": "dsa"}
    gains = {0: 0.10, 1: 0.12, 2: 0.08}
    for seed, gain in gains.items():
        suffix = "" if seed == 0 else f"_seed{seed}"
        level = 0.70 + seed / 100
        write_run(store / f"dynafed_fmnist_a001_fedavg_from19{suffix}", [level] * 200, seed=seed)
        run = store / f"dynafed_fmnist_a001_paper_n1000_dsa{suffix}"
        write_run(run, [level] * 20 + [level + gain] * 180, method, synthesis_round=20, seed=seed)
        torch.save({"inputs": torch.randn(20, 1, 4, 4), "label_logits": torch.randn(20, 10)},
                   run / "dynafed_synthesis.pt")  # fmt: skip
    # the code setting's FedAvg (from round 23) is another arm's baseline: seed 1 of it must not pair with paper
    write_run(store / "dynafed_fmnist_a001_fedavg_from23_seed1", [0.2] * 200, seed=1)
    built = build("paper", folder)
    assert [row[:2] for row in built.rows] == [
        ["FedAvg (from round 19)", 0], ["FedAvg (from round 19)", 1], ["FedAvg (from round 19)", 2],
        ["FedAvg (from round 23)", 1], ["DynaFed paper settings, N = 1000, dsa", 0],
        ["DynaFed paper settings, N = 1000, dsa", 1], ["DynaFed paper settings, N = 1000, dsa", 2],
    ]  # fmt: skip
    text = built.claim.text
    assert "DynaFed paper settings, N = 1000, dsa, 3 seeds: 10.00 ± 2.00 points over FedAvg" in text
    assert "+10.00 (seed 0), +12.00 (seed 1), +8.00 (seed 2)" in text
    # seed spread: DynaFed's last-5 means 0.80, 0.83, 0.80 (sd 1.73), FedAvg's 0.70, 0.71, 0.72 (sd 1.00): ±2.00
    assert "beyond the seed spread (+10.00 points against ±2.00)" in text
    assert (
        "above FedAvg in 540 of the 540 rounds both recorded in rounds 21-200" in text and "summed over 3 seeds" in text
    )
    assert built.claim.held and "(seeds 0, 1, 2)" in text
    for suffix in ("", "_seed1", "_seed2"):
        assert (folder / f"dsyn_paper_n1000_dsa{suffix}.png").stat().st_size > 0


def test_an_arm_without_its_fedavg_says_so(tmp_path, store):
    folder = tmp_path / "figs" / "dynafed-table1" / "paper"
    folder.mkdir(parents=True)
    method = {"name": "dynafed", "iterations": 1000, "augment": "dsa"}
    write_run(store / "dynafed_fmnist_a001_fedavg_from19", [0.7] * 200)
    write_run(store / "dynafed_fmnist_a001_paper_n1000_dsa_seed1", [0.8] * 200, method, synthesis_round=20, seed=1)
    built = build("paper", folder)
    assert not built.claim.held
    assert "no FedAvg arm from round 19 of the same seed to compare with yet" in built.claim.text


def test_the_n0_control_never_carries_the_claim(tmp_path, store):
    """An N = 0 arm (D_syn never matched, the same fine-tuning) is compared with FedAvg and named a control; its gain
    alone does not make DynaFed's claim hold."""
    folder = tmp_path / "figs" / "dynafed-table1" / "cpu"
    folder.mkdir(parents=True)
    wobble = [0.60, 0.62] * 13  # rounds 25-50
    write_run(store / "dynafed_fmnist_a001_fedavg_w32_r50_from23", [0.5] * 24 + wobble, width=32, rounds=50)
    learned = {"name": "dynafed", "iterations": 300, "augment": "dsa"}
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n300_dsa", [0.5] * 24 + wobble, learned, 24, 32, 50)
    control = {"name": "dynafed", "iterations": 0, "augment": "dsa"}
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n0_dsa", [0.5] * 24 + [0.75] * 26, control, 24, 32, 50)
    built = build("cpu", folder)
    text = built.claim.text
    assert "control, D_syn never matched: DynaFed code settings, N = 0, dsa: +13.80 points over FedAvg" in text
    assert "DynaFed code settings, N = 300, dsa: +0.00 points over FedAvg" in text
    assert (
        built.claim.verdict == "not resolved"
        and "N = 300, dsa: +0.00 ± 0.00 (both at rounds 46-50)" in built.claim.size
    )
    assert "what the matching adds (DynaFed code settings, N = 300, dsa minus the N = 0 control" in text


def test_an_arm_matched_in_another_precision_is_left_to_the_precision_study(tmp_path, store):
    folder = tmp_path / "figs" / "dynafed-table1" / "cpu"
    folder.mkdir(parents=True)
    write_run(store / "dynafed_fmnist_a001_fedavg_w32_r50_from23", [0.5] * 50, width=32, rounds=50)
    learned = {"name": "dynafed", "iterations": 300, "augment": "dsa"}
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n300_dsa", [0.5] * 24 + [0.6] * 26, learned, 24, 32, 50)
    bf16 = learned | {"precision": "bf16"}
    write_run(store / "dynafed_fmnist_a001_code_w32_r50_n300_dsa_bf16", [0.5] * 24 + [0.9] * 26, bf16, 24, 32, 50)
    built = build("cpu", folder)
    assert len(built.rows) == 2 and "+10.00 points over FedAvg" in built.claim.text


def test_judged_at_its_end_the_smaller_gain_decides_and_a_lower_bound_never_gives_a_size(tmp_path, store):
    """DynaFed stopped at round 153 of 200, FedAvg ran to 200 and dips over rounds 149-153: the gain at the common
    rounds is large, DynaFed's own last 5 against FedAvg's rounds 196-200 smaller; the verdict and the size come
    from the smaller one, marked a lower bound (DynaFed stopped short)."""
    folder = tmp_path / "figs" / "dynafed-table1" / "paper"
    folder.mkdir(parents=True)
    method = {"name": "dynafed", "iterations": 1000, "augment": "dsa"}
    for seed, (dip, end, ours) in enumerate([(0.50, 0.80, 0.86), (0.52, 0.81, 0.88)]):
        suffix = f"_seed{seed}" if seed else ""
        fedavg = [0.7] * 148 + [dip] * 5 + [end] * 47  # 200 rounds, a dip over 149-153
        write_run(store / f"dynafed_fmnist_a001_fedavg_from19{suffix}", fedavg, seed=seed)
        write_run(store / f"dynafed_fmnist_a001_paper_n1000_dsa{suffix}", [0.7] * 19 + [ours] * 134, method,
                  synthesis_round=20, seed=seed)  # fmt: skip
    built = build("paper", folder)
    text = built.claim.text
    # common rounds 149-153: +36.00 (seed 0), +36.00 (seed 1); the end: +6.00, +7.00
    assert "36.00 ± 0.00 points over FedAvg, both at rounds 149-153" in text
    assert (
        "≥ 6.50 ± 0.71 points over FedAvg, DynaFed's last 5 rounds (to round 153 (seed 0), 153 (seed 1)) against "
        "FedAvg's last 5 (to round 200 (seed 0), 200 (seed 1))" in text
    )
    assert "a lower bound: DynaFed stopped before 200" in text
    assert "the verdict is the smaller gain's (the end): held" in text and built.claim.verdict == "held"
    assert "≥ +6.50 ± 0.71" in built.claim.size and "not resolved (a lower bound" in built.claim.size
    assert "as the paper's" not in built.claim.size and "smaller than" not in built.claim.size


def test_the_conservative_comparison_is_the_smaller_mean_gain():
    found = [{"name": "common", "mean": 0.3}, {"name": "end", "mean": 0.1}]
    assert dynafed.conservative(found)["name"] == "end"
    assert dynafed.conservative(found[:1])["name"] == "common"
