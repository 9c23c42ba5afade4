"""The fedcog-table1 artefact on run folders the test writes: a row per run kind, paired gains and the verdict."""

from __future__ import annotations

import json

import pytest

from figures import fedcog
from figures.artefacts import Build
from theory.errors import InputError


def write_run(folder, accuracies, generation=0.0):
    folder.mkdir(parents=True)
    rows = [
        {"round": t, "test_accuracy": a, "seconds_local": 1.0, "seconds_method": generation if t > 50 else 0.0}
        | ({"estimates": {"zeta2_hat": 0.1 * t, "sigma2_hat": 2.0}} if t % 10 == 0 else {})
        for t, a in enumerate(accuracies, start=1)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store" / "runs"


def build(tmp_path):
    return fedcog.build(Build("paper", tmp_path / "figs" / "fedcog-table1" / "paper", runs=tmp_path / "store"))


def test_table_gain_and_verdict(tmp_path, store):
    (tmp_path / "figs" / "fedcog-table1" / "paper").mkdir(parents=True)
    for seed, (avg, cog) in enumerate([(0.70, 0.75), (0.71, 0.77), (0.72, 0.76)]):
        write_run(store / f"fedcog_fmnist_niid1_seed{seed}", [0.5] * 60 + [avg] * 10)
        write_run(store / f"fedcog_fmnist_niid1_seed{seed}_fedcog", [0.5] * 60 + [cog] * 10, generation=4.0)
    write_run(store / "fedcog_fmnist_niid1_code_seed0", [0.5] * 60 + [0.6] * 10)
    write_run(store / "fedcog_fmnist_niid1_code_seed0_fedcog", [0.5] * 60 + [0.63] * 10, generation=3.0)
    built = build(tmp_path)
    rows = {(r[0], r[1]): r for r in built.rows}
    assert rows["NIID-1 (Dir 0.1)", "fedavg"][2:5] == [3, 70, "71.00 ± 1.00 (73.07)"]
    assert (
        rows["NIID-1 (Dir 0.1)", "fedcog"][4] == "76.00 ± 1.00 (77.34)"
        and rows["NIID-1 (Dir 0.1)", "fedcog"][-1] == "4.0 ± 0.0"
    )
    assert rows["NIID-1 (Dir 0.1)", "fedavg, code settings (crop + flip)"][4] == "60.00"
    assert rows["NIID-1 (Dir 0.1)", "fedavg"][7] == "61.0 ± 0.0"
    gain = built.numbers["gains"]["niid1"]
    assert gain["last5"] == pytest.approx([0.05, 0.06, 0.04])
    # mean gain 5 points against the spread sqrt(1² + 1²) = 1.41 points: beyond it
    assert gain["verdict"].startswith("beyond the seed spread (+5.00 points against ±1.41)")
    code = built.numbers["gains"]["niid1/code"]  # FedCOG at the code's settings, paired with its own FedAvg run
    assert code["seeds"] == [0] and code["last5"] == pytest.approx([0.03]) and code["verdict"].startswith("one seed")
    assert rows["NIID-1 (Dir 0.1)", "fedcog, code settings (crop + flip)"][4] == "63.00"
    assert "NIID-1 (Dir 0.1), the code settings, seed 0" in built.claim.text
    assert not built.claim.held  # one seed at the code's settings: no verdict there
    assert "NIID-2 (2 labels)" not in built.claim.text
    assert (tmp_path / "figs" / "fedcog-table1" / "paper" / "fedcog_table1.png").stat().st_size > 0


def test_within_spread_and_one_seed(tmp_path, store):
    (tmp_path / "figs" / "fedcog-table1" / "paper").mkdir(parents=True)
    for seed, (avg, cog) in enumerate([(0.70, 0.74), (0.78, 0.74)]):
        write_run(store / f"fedcog_fmnist_niid2_seed{seed}", [0.5] * 60 + [avg] * 10)
        write_run(store / f"fedcog_fmnist_niid2_seed{seed}_fedcog", [0.5] * 60 + [cog] * 10)
    write_run(store / "fedcog_fmnist_niid1_seed0", [0.5] * 70)
    write_run(store / "fedcog_fmnist_niid1_seed0_fedcog", [0.5] * 60 + [0.6] * 5)  # unfinished: round 65
    built = build(tmp_path)
    assert built.numbers["gains"]["niid2"]["verdict"].startswith("within")
    assert built.numbers["gains"]["niid1"]["verdict"] == "one seed: no spread to judge by"
    assert built.numbers["gains"]["niid1"]["rounds"] == 65 and not built.claim.held


def test_no_runs(tmp_path, store):
    with pytest.raises(InputError, match=r"fedcog-experiments\.sh"):
        build(tmp_path)
