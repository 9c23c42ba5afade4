"""Fedssyn Table 1 at the paper's knobs (figures/fedssyn_table1.py): the declared grid's configs carry the paper's
knobs, and the target rule and the speed-up at every target agree with hand-computed cases, censoring included."""

from __future__ import annotations

from pathlib import Path

import pytest

from figures import fedssyn_table1 as t1
from figures.flruns import Protocol, config_of


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_every_column_of_the_grid_loads_with_the_papers_knobs(scale, tmp_path):
    protocol = Protocol(t1.CONFIG, (), t1.SEEDS)
    n = t1.SUBSAMPLE[scale] or 60_000
    assert len(t1.COLUMNS) == 8 and t1.SEEDS == (0, 1, 2)
    for name, column in t1.COLUMNS.items():
        arms = t1.arms(name, t1.SUBSAMPLE[scale])
        assert len(arms) == 2 * len(t1.ALGORITHMS) == 12
        for arm in arms:
            config = config_of(protocol, arm, 2, tmp_path)
            train, data = config.train, config.data
            assert (train.rounds, train.local_epochs, train.batch_size) == (100, 10, 128)
            assert train.local_budget == "real-steps" and train.weighting == "uniform"
            assert train.lr == (0.01, 0.05, 0.1) and data.val_fraction == 0.1
            assert (data.clients, train.participation, data.alpha) == (column.clients, column.participation,
                                                                        column.alpha)  # fmt: skip
            assert data.subsample == t1.SUBSAMPLE[scale]
            assert data.partition == "dirichlet-fedssyn"  # Fedssyn's code's partition (after FedDF)
            if config.method["name"] == "fedssyn":
                assert config.method["n_tilde"] * data.clients == n  # ñ = n / N
                assert config.method["rho"] == 0.75 and config.method["generator"] == "vae"
        names = {config_of(protocol, arm, 0, tmp_path).algorithm["name"] for arm in arms}
        assert names == {"fedavg", "scaffold", "fedprox", "feddyn", "fedpvr", "fedavgm"}
        assert set(column.paper) == set(t1.PAPER_ALGORITHMS)


def test_the_plain_columns_are_the_first_five_on_plain_dirichlet(tmp_path):
    """table1-plain reads the five columns run before the paper's partition was built: plain Dirichlet shares, every
    client >= 10 samples (their identities are those in the ledger: ``figures check`` rebuilds them)."""
    protocol = Protocol(t1.CONFIG, (), t1.SEEDS)
    assert t1.PARTITIONS == {"dirichlet-fedssyn": tuple(t1.COLUMNS), "dirichlet": t1.PLAIN}
    assert t1.PLAIN == ("a01", "a001", "c04_a01", "c04_a001", "n40_a01")
    for name in t1.PLAIN:
        for arm in t1.arms(name, 3000, "dirichlet"):
            data = config_of(protocol, arm, 0, tmp_path).data
            assert (data.partition, data.min_size) == ("dirichlet", 10)


def rows(*accuracies: float) -> list[dict]:
    return [{"round": t, "test_accuracy": a} for t, a in enumerate(accuracies, 1)]


def test_a_diverged_run_never_reaches_the_target_and_leaves_the_rule_its_rounds_before():
    seed = [*rows(0.5, 0.7, 0.8, 0.8, 0.8, 0.8, 0.8), {"round": 8, "test_accuracy": 0.1, "diverged": True}]
    assert t1.target_rule([seed]) == pytest.approx(0.76)  # 0.95 x 0.80: the diverged round is no accuracy
    assert t1.rounds_to(seed, 0.9) == (101, True)  # stopped at round 8, never reaches it: > 100 rounds
    stopped = [*rows(0.2, 0.3), {"round": 3, "test_accuracy": 0.1, "diverged": True}]
    assert t1.speedup([stopped], [rows(0.2, 0.6)], 0.5).ratios == [101 / 2]
    assert t1.diverged(stopped) and not t1.diverged(rows(0.2))


def test_the_target_rule_by_hand():
    # last 5 rounds' means: 0.80 and 0.70 -> 0.75; 0.95 x 0.75 = 0.7125 -> 71 %
    seed0 = rows(0.1, 0.2, 0.8, 0.8, 0.8, 0.8, 0.8)
    seed1 = rows(0.9, 0.9, 0.6, 0.7, 0.8, 0.7, 0.7)
    assert t1.target_rule([seed0, seed1]) == pytest.approx(0.71)


def test_speedups_at_a_target_with_censoring_by_hand():
    without = [rows(0.3, 0.5, 0.6, 0.7), rows(0.4, 0.5, 0.55, 0.58)]  # seed 1 never reaches 0.6: 101
    with_ = [rows(0.6, 0.7, 0.7, 0.7), rows(0.5, 0.6, 0.6, 0.7)]
    at = t1.speedup(without, with_, 0.6)
    assert (at.without, at.with_, at.censored, at.mark) == ([3, 101], [1, 2], (True, False), "≥ ")
    assert at.ratios == [3.0, 50.5] and at.mean_sd[0] == pytest.approx(26.75)
    exact = t1.speedup(without, with_, 0.5)  # every run reaches 0.5
    assert (exact.without, exact.with_, exact.mark) == ([2, 2], [1, 1], "")
    late = t1.speedup(with_, without, 0.7)  # the other way round: the synthetic side censored
    assert (late.without, late.with_, late.mark) == ([2, 4], [4, 101], "≤ ")  # an upper bound on the speed-up
    assert t1.speedup(without, with_, 0.75).mark == "? "  # both sides censored: bounds both ways
    assert t1.speedup(without[:1], with_[1:], 0.7).mark == ""
    # targets: whole percent from 50 % to the highest every run of both arms reached (0.58)
    assert t1.targets(without, with_) == [k / 100 for k in range(50, 59)]


def test_a_column_claim_and_its_bounds(tmp_path: Path):
    from figures.flruns import Arm, Result

    def result(curves):
        return Result(Arm("x"), [{} for _ in curves], list(curves))

    slow = [rows(*([0.1] * 30 + [0.8])), rows(*([0.1] * 40 + [0.8]))]
    fast = [rows(0.1, 0.8), rows(0.1, 0.1, 0.8)]
    pairs = {a: (result(slow), result(fast)) for a in t1.ALGORITHMS}
    numbers, claim = t1.column_claim("a01", t1.COLUMNS["a01"], pairs, 0.8)
    assert claim.verdict == "held" and numbers["speedups"]["fedavg"][0] == pytest.approx((31 / 2 + 41 / 3) / 2)
    never = [rows(*([0.1] * 10)), rows(*([0.1] * 10))]
    pairs = {a: (result(never), result(fast)) for a in t1.ALGORITHMS}
    numbers, claim = t1.column_claim("a01", t1.COLUMNS["a01"], pairs, 0.8)
    assert "≥ " in claim.text  # a D_i arm that never reached m: its speed-ups are lower bounds
    assert numbers["speedups"]["fedavg"][0] == pytest.approx((101 / 2 + 101 / 3) / 2)  # lower bounds: ≥ 42x
    assert numbers["sizes"]["fedavg"] == "larger than the paper's"  # a lower bound above the paper's 8.5x decides it


def test_a_columns_sets_quality_is_found_by_the_digest_its_runs_dealt(tmp_path: Path):
    """Every algorithm's synthetic arm of a seed dealt the same sets: their report (``quality/...-sets<digest>``) is
    found by the digest in the runs' provenance; a seed without one is named with the run folder that measures it."""
    import json
    from types import SimpleNamespace

    from figures.flruns import run_folder
    from fl.quality import report_name

    protocol = Protocol(t1.CONFIG, (), t1.SEEDS)
    column_arms = t1.arms("n100_a01", 3000)
    for arm in column_arms:
        for seed in t1.SEEDS:
            folder = run_folder(config_of(protocol, arm, seed, tmp_path), tmp_path)
            folder.mkdir(parents=True)
            digest = f"{seed:012d}" if "method.name=fedssyn" in arm.overrides else None
            (folder / "provenance.json").write_text(json.dumps({"synthetic_sha256": digest}))
    (tmp_path / t1.QUALITY).mkdir()
    reports = []
    for seed, agreement in ((0, 0.2), (1, 0.3)):  # seed 2 not measured
        report = {"generator": "vae", "dataset": "fmnist-sub3000x2000", "seed": seed, "chosen_by": "run",
                  "synthetic_sha256": f"{seed:012d}", "noise_fraction": 0.05, "noise_by_client": [0.0, 0.1],
                  "label_agreement": agreement, "synthetic_trained_accuracy": 0.25,
                  "real_trained_accuracy": 0.7}  # fmt: skip
        (tmp_path / t1.QUALITY / report_name(report)).write_text(json.dumps(report))
        reports.append(report)
    (tmp_path / t1.QUALITY / "vae-fmnist-sub3000x2000-seed2-setsffffffffffff.json").write_text("{}")  # other sets
    found, missing = t1.sets_quality(SimpleNamespace(store=tmp_path), protocol, column_arms)
    assert found == reports
    fedavg_synthetic = next(arm for arm in column_arms if "method.name=fedssyn" in arm.overrides)
    assert missing == {2: run_folder(config_of(protocol, fedavg_synthetic, 2, tmp_path), tmp_path)}
    note = t1.quality_note("n100_a01", found, missing)
    assert note.startswith("n100_a01: its β-VAE sets (seed 0, 1; `python -m fl.quality`): 5.00 ± 0.00 % of the")
    assert "gives 25.00 ± 7.07 % of them their label" in note and "10 % for the noisiest client" in note
    assert note.endswith(f"Seed 2: not measured: `python -m fl.quality --run RUN --out Q.json && python -m figures "
                         f"ledger add Q.json` for RUN = `{missing[2]}` (where the generator cache is).")  # fmt: skip
    assert t1.quality_note("n100_a01", [], missing).startswith("n100_a01: its β-VAE sets' quality: not measured: `")


def test_the_numbers_sent_to_m_by_hand_with_censoring():
    """Revised Table A.2 in a column: FedAvg's numbers sent to m (1 million a round), the synthetic set (0.5 million)
    counted once in the synthetic arm; a D_i run that never reaches m counts 101 rounds (a lower bound: the saving
    is marked ≥)."""
    from figures.flruns import Arm, Result

    def sent(*accuracies):
        return [{"round": t, "test_accuracy": a, "communication": 10**6 * t} for t, a in enumerate(accuracies, 1)]

    assert t1.sent_to(sent(0.1, 0.5, 0.8), 0.8) == (3e6, False)
    assert t1.sent_to(sent(0.1, 0.5), 0.8) == (1e6 * 101, True)  # never: what a round sends x (budget + 1)

    def result(curves, once=0):
        return Result(Arm("x"), [{"synthetic_numbers_sent_once": once} for _ in curves], list(curves))

    slow, fast = [sent(*[0.1] * 9, 0.8), sent(*[0.1] * 11, 0.8)], [sent(0.1, 0.8), sent(0.1, 0.1, 0.8)]
    claim = t1.communication_claim("a01", t1.COLUMNS["a01"], {"fedavg": (result(slow), result(fast, 5 * 10**5))}, 0.8)
    # alone 10 and 12 million; with the set 2.5 and 3.5 million: savings 75 % and 70.8 %
    assert claim.verdict == "held" and "sends 11.00 ± 1.41 million numbers to m alone and 3.00 ± 0.71 million" in (
        claim.text
    )
    assert "(0.50 million of them the synthetic set), a saving of 72.9 ± 2.9 %" in claim.text
    assert claim.size.startswith("not comparable (72.9 % against the paper's 87.6 % (CIFAR-10)")
    never = [sent(0.1, 0.1), sent(0.1, 0.1)]
    claim = t1.communication_claim("a01", t1.COLUMNS["a01"], {"fedavg": (result(never), result(fast, 5 * 10**5))}, 0.8)
    assert claim.verdict == "held" and "a saving of ≥ " in claim.text  # 101 million sent alone: a lower bound
    # a synthetic arm that sends more than a D_i run that never reached m: not contradicted, the D_i count a bound
    claim = t1.communication_claim("a01", t1.COLUMNS["a01"], {"fedavg": (result(never), result(never, 5 * 10**5))}, 0.8)
    assert claim.verdict == "not resolved" and "a saving of ? " in claim.text


def test_the_sets_quality_against_the_clients_number_by_hand():
    """Per α, the column with the fewest clients against the one with the most (their seeds' label agreements);
    an α with one N measured says nothing; none at all: not measured."""

    def reports(*agreements):
        return [{"label_agreement": a} for a in agreements]

    claim = t1.quality_by_clients({"a001": reports(0.8, 0.7), "n40_a001": reports(0.5, 0.45),
                                   "n100_a001": reports(0.4, 0.3), "n100_a01": reports(0.2, 0.3)})  # fmt: skip
    assert claim.verdict == "held"
    assert claim.text.endswith("α = 0.01: held, label agreement 75.00 ± 7.07 % at N = 10 (a001) against 35.00 ± 7.07 % "
                               "at N = 100 (n100_a001)")  # fmt: skip
    close = t1.quality_by_clients({"a01": reports(0.5, 0.3), "n100_a01": reports(0.4, 0.35)})
    assert close.verdict == "not resolved"
    assert t1.quality_by_clients({"a01": reports(0.5, 0.3), "c04_a01": reports(0.5, 0.3)}).verdict == "not measured"


def test_each_arms_peak_accuracy_and_its_change_by_hand():
    from figures.flruns import Arm, Result

    def result(curves):
        return Result(Arm("x"), [{} for _ in curves], list(curves))

    stopped = [*rows(0.2, 0.9), {"round": 3, "test_accuracy": 0.1, "diverged": True}]
    assert t1.peak(stopped) == 0.9 and t1.peak(rows(0.3, 0.8, 0.7)) == 0.8 and t1.peak([]) is None
    without = [rows(0.5, 0.80), rows(0.5, 0.81), rows(0.5, 0.82)]  # peaks 80, 81, 82 %: mean 81, sd 1
    lower = [rows(0.78, 0.6), rows(0.79), rows(0.77)]  # 78, 79, 77 %: 3 points lower
    close = [rows(0.80), rows(0.82), rows(0.81)]
    pairs = {"fedavg": (result(without), result(lower)), "fedprox": (result(without), result(close))}
    peaks, text = t1.peak_note("a01", 0.75, pairs)
    assert peaks["fedavg"] == ([0.80, 0.81, 0.82], [0.78, 0.79, 0.77])
    assert "fedavg 81.0 ± 1.0 → 78.0 ± 1.0 % (lower)" in text  # 3 points against a spread of sqrt(2)
    assert "fedprox 81.0 ± 1.0 → 81.0 ± 1.0 % (within the seed spread)" in text and "m = 75%" in text
