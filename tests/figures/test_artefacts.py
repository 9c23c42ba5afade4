"""python -m figures: every artefact at quick scale end to end, reuse without rerunning, FL runs shared between
artefacts, the claim sentences flipping with the numbers, builds leaving the report alone, and one-line errors for
bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import figures.catalogue as catalogue
import figures.flruns as flruns
from figures import fedssyn_fl, methods_fl
from figures.__main__ import main
from figures.flruns import Arm, Result
from sims.quadratic import fit as quadratic_fit
from theory.errors import InputError

# the artefacts with a quick scale (those that read the scripts' runs have the paper scale only)
QUICK = [name for name, artefact in catalogue.ARTEFACTS.items() if "quick" in artefact.scales]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every artefact at quick scale, into one temporary root (built once for the module)."""
    tmp = tmp_path_factory.mktemp("figures")
    report = tmp / "REPORT.md"
    report.write_text("# Measured results\n\nHand-written text that must survive.\n")
    threads = torch.get_num_threads()  # a module fixture starts before the autouse one_thread fixture
    torch.set_num_threads(1)
    try:
        assert main(["all", "--scale", "quick", "--root", str(tmp / "root")]) == 0
    finally:
        torch.set_num_threads(threads)
    return tmp


@pytest.mark.slow
def test_every_artefact_builds_at_quick_scale(built):
    root = built / "root"
    for name in QUICK:
        result = json.loads((root / name / "quick" / "result.json").read_text())
        assert result["command"] == f"python -m figures {name} --scale quick"
        assert result["rows"] and all(len(row) == len(result["headers"]) for row in result["rows"])
        assert result["claim"]["text"] and isinstance(result["claim"]["held"], bool)
        for figure in result["figures"]:
            path = root / name / "quick" / figure
            assert path.exists() and path.stat().st_size > 0, path
        assert {f.rsplit(".", 1)[1] for f in result["figures"]} >= {"png", "pdf"}
    assert [r[0] for r in json.loads((root / "fig2/quick/result.json").read_text())["rows"]] == [0, 0.25, 0.5]


@pytest.mark.slow
def test_a_build_leaves_the_report_alone(built):
    """The report's generated sections come from the run ledger only (figures.ledger), never from a local build."""
    assert (built / "REPORT.md").read_text() == "# Measured results\n\nHand-written text that must survive.\n"


@pytest.mark.slow
def test_a_second_invocation_reuses_everything(built, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a simulator ran again")

    monkeypatch.setattr(catalogue, "simulate", refuse)
    monkeypatch.setattr(flruns, "run_one", refuse)
    before = (built / "REPORT.md").read_text()
    assert main(["all", "--scale", "quick", "--root", str(built / "root")]) == 0
    assert capsys.readouterr().out.count("reused") == len(QUICK)
    assert (built / "REPORT.md").read_text() == before
    assert main(["--root", str(built / "root")]) == 0
    listing = capsys.readouterr().out
    assert "done" in listing and "missing" in listing


@pytest.mark.slow
def test_fl_artefacts_share_their_runs(built):
    """Fig. 5 and the theory table use Fig. 3's runs, Table 1's FedAvg arms are Fig. 3's D_i and Fedssyn arms: one
    run folder per distinct config."""
    root = built / "root"
    folders = sorted(f for f in (root / flruns.RUNS).iterdir() if f.is_dir())
    configs = [json.loads((f / "config.json").read_text()) for f in folders]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(folders)
    fig3 = fedssyn_fl.fig3_arms("quick")
    protocol = fedssyn_fl.FMNIST["quick"]
    for arm in fig3[:4]:  # also Fig. 5's arms
        assert flruns.run_folder(flruns.config_of(protocol, arm, 0, root), root) in folders
    table1 = fedssyn_fl.table1_arms("quick")
    same = flruns.config_of(protocol, table1[0], 0, root).to_dict() == flruns.config_of(
        protocol, fig3[0], 0, root
    ).to_dict()  # fmt: skip
    assert same  # FedAvg on D_i is one experiment, whichever artefact asks
    for folder in folders:  # every run finished, and its generators (if any) sit in the shared cache
        assert (folder / "summary.json").exists()
        method = json.loads((folder / "config.json").read_text())["method"]
        assert "cache_dir" not in method or method["cache_dir"] == str(root / flruns.SYNTHETIC)


def result(label: str, accuracy: list[float], rounds: list[int | None] | None = None, **estimates) -> Result:
    """A fake arm over len(accuracy) seeds: final accuracies, rounds to the target, mean estimates."""
    rounds = rounds or [5] * len(accuracy)
    summaries = [
        {"final_test_accuracy": a, "rounds_to_target": r, "rounds": 20, "target_accuracy": 0.7,
         "estimates_mean": {k: v[j] for k, v in estimates.items()}, "dp_epsilon": 3.0}
        for j, (a, r) in enumerate(zip(accuracy, rounds))
    ]  # fmt: skip
    return Result(Arm(label), summaries, [[] for _ in accuracy])


def test_fig3_claim_flips_with_the_numbers():
    labels = [a.label for a in fedssyn_fl.fig3_arms("cpu")]
    good = {label: result(label, [0.80, 0.81]) for label in labels}
    good[fedssyn_fl.FEDSSYN.label] = result("x", [0.85, 0.86])
    claim = fedssyn_fl.fig3_claim(good)
    assert claim.held and "held" in claim.text and "0.855 with D_i ∪ D̃_si" in claim.text
    close = good | {fedssyn_fl.FEDSSYN.label: result("x", [0.80, 0.82])}  # within the seed spread of D_i
    assert not fedssyn_fl.fig3_claim(close).held
    own_close = good | {fedssyn_fl.OWN.label: result("own", [0.83, 0.86])}  # the ablation: reported, not judged
    claim = fedssyn_fl.fig3_claim(own_close)
    assert claim.held and "(D_i ∪ D̃_i, 0.845) the gain is within the seed spread" in claim.text


def test_table1_claim_flips_with_the_numbers():
    fast = {a: (result("w", [0.8, 0.8], [8, 9]), result("s", [0.8, 0.8], [3, 4])) for a in ("fedavg", "scaffold")}
    claim = fedssyn_fl.table1_claim(fast)
    assert claim.held and "fedavg 2.46x" in claim.text  # mean of 8/3 and 9/4
    slow = fast | {"scaffold": (result("w", [0.8, 0.8], [8, 9]), result("s", [0.8, 0.8], [8, 8]))}
    claim = fedssyn_fl.table1_claim(slow)
    assert claim.verdict == "not resolved" and "for 1 of 2 algorithms (not for scaffold)" in claim.text
    never = {"fedavg": (result("w", [0.6, 0.6], [None, None]), result("s", [0.8, 0.8], [3, 3]))}
    assert fedssyn_fl.speedups(*never["fedavg"]) == [7.0, 7.0]  # (20 + 1) / 3: a lower bound
    claim = fedssyn_fl.table1_claim(never, paper={"fedavg": (8, 68, "8.5x")}, alpha=0.1)
    assert "fedavg ≥ 7.00x" in claim.text and "a bound: fedavg ≥" in claim.text
    # a lower bound below the paper's could still reach it: no size word from it (figures.verdict.bounded_size)
    assert (
        claim.size
        == "speed-ups fedavg ≥ 7.00x against the paper's 8.5-8.5x (CIFAR-10, α = 0.1, per algorithm): "
        + ("not resolved (a lower bound)")
    )
    over = {"fedavg": (result("w", [0.6, 0.6], [None, None]), result("s", [0.8, 0.8], [1, 1]))}  # ≥ 21x
    assert fedssyn_fl.table1_claim(over, paper={"fedavg": (8, 68, "8.5x")}, alpha=0.1).size.endswith(
        "larger than the paper's"
    )


def test_a_bound_never_decides_a_size_word_unless_it_lies_beyond_the_paper():
    from figures.verdict import bounded_size

    assert bounded_size(2.0, 0.1, 5.0) == "smaller than the paper's"
    assert bounded_size(2.0, 0.1, 5.0, "≥ ") == "not resolved (a lower bound)"
    assert bounded_size(9.0, 0.1, 5.0, "≥ ") == "larger than the paper's"
    assert bounded_size(2.0, 0.1, 5.0, "≤ ") == "smaller than the paper's"
    assert bounded_size(9.0, 0.1, 5.0, "≤ ") == "not resolved (an upper bound)"
    assert bounded_size(5.0, 0.1, 5.0, "? ") == "not resolved (a bound both ways)"


def test_fig4_claim_flips_with_the_numbers():
    def points(low, high):
        return [(0.25, result("l", low)), (0.75, result("h", high))]

    good = {"n_tilde": points([0.7, 0.71], [0.8, 0.81]), "rho": points([0.7, 0.71], [0.8, 0.81])}
    good["sample_epoch"] = points([0.7, 0.7], [0.7, 0.7])
    assert fedssyn_fl.fig4_claim(good).held
    claim = fedssyn_fl.fig4_claim(good | {"rho": points([0.7, 0.75], [0.72, 0.73])})
    assert not claim.held and "rho 0.25 -> 0.75: accuracy 0.725 -> 0.725" in claim.text


def test_fig5_claim_flips_with_the_numbers():
    def curve(label, ratios, delta):
        r = result(label, [0.8] * len(ratios), delta2=[delta] * len(ratios))
        r.rows = [[{"round": t, "estimates": {"zeta2_ratio": v}} for t, v in enumerate(seed, 1)] for seed in ratios]
        return r

    own = curve("own", [[0.95, 0.96], [0.97, 0.95]], 2.0)
    ours = curve("ours", [[0.55, 0.5], [0.57, 0.52]], 2.0)
    real = curve("real shuffle p=0.16", [[0.7, 0.7], [0.71, 0.72]], 0.01)
    results = {fedssyn_fl.FEDSSYN.label: ours, fedssyn_fl.OWN.label: own, real.arm.label: real}
    claim = fedssyn_fl.fig5_claim(results)
    assert claim.held and "at 2 of 2 measured rounds" in claim.text
    results[fedssyn_fl.FEDSSYN.label] = curve("ours", [[0.55, 0.99], [0.57, 0.97]], 2.0)
    claim = fedssyn_fl.fig5_claim(results)
    assert not claim.held and "at 1 of 2 measured rounds" in claim.text


def test_dp_claim_flips_with_the_numbers():
    fedavg, plain = result("FedAvg", [0.80, 0.81], [10, 11]), result("non-DP", [0.9, 0.9], [5, 5])
    assert fedssyn_fl.dp_claim([fedavg, plain, result("DP", [0.86, 0.87], [6, 7])]).held
    claim = fedssyn_fl.dp_claim([fedavg, plain, result("DP", [0.80, 0.81], [10, 11])])
    assert not claim.held and "ε = 3" in claim.text


def test_theory_claim_flips_with_the_numbers():
    row = {"real": True, "p": 0.3, "zeta": (0.49, 0.01), "zeta_bound": 0.49, "measured": (0.6, 0.05),
           "predicted": 0.62, "one_round": 0.1}  # fmt: skip
    assert fedssyn_fl.theory_claim([row]).held
    claim = fedssyn_fl.theory_claim([row | {"zeta": (0.6, 0.01)}])  # above (1-p)²
    assert not claim.held and "largest mean excess +22.4% at p = 0.3" in claim.text
    # Corollary I bounds the rounds: a measured ratio far below its prediction holds it (one-sided, as in fig2)
    claim = fedssyn_fl.theory_claim([row | {"predicted": 0.9}])
    assert claim.held and "predicted 0.90, measured 0.60" in claim.text
    claim = fedssyn_fl.theory_claim([row | {"predicted": 0.4}])  # above it beyond the spread and one round
    assert claim.verdict == "contradicted"


def test_fig2_and_theory_fl_judge_corollary_one_by_one_function(monkeypatch):
    from figures import catalogue, verdict

    calls = []
    original = verdict.at_or_below

    def spy(low, ceiling, allowance=1e-9):
        calls.append((list(map(float, low)), list(map(float, ceiling))))
        return original(low, ceiling, allowance)

    monkeypatch.setattr(catalogue, "at_or_below", spy)
    monkeypatch.setattr(quadratic_fit, "at_or_below", spy)
    monkeypatch.setattr(fedssyn_fl, "at_or_below", spy)
    p = np.array([0.0, 0.3, 0.5])
    catalogue.fig2_claim(p, np.array([1.0, 0.5, 0.3]), np.array([1.0, 0.8, 0.6]))
    row = {"real": True, "p": 0.3, "zeta": (0.49, 0.01), "zeta_bound": 0.49, "measured": (0.5, 0.05),
           "predicted": 0.9, "one_round": 0.1}  # fmt: skip
    assert fedssyn_fl.theory_claim([row]).held  # 0.50 measured under a bound of 0.90: never contradicted
    assert [0.5, 0.3] in [c[0] for c in calls] and [0.4] in [c[0] for c in calls]
    assert fedssyn_fl.theory_claim([row, row | {"real": False, "zeta": (0.9, 0)}]).held  # Fedssyn: not judged


def test_methods_claim_flips_with_the_numbers():
    fedavg = result("FedAvg", [0.80, 0.81])
    better = [result(m, [0.85, 0.86]) for m in methods_fl.METHODS]
    assert methods_fl.methods_claim([fedavg, *better]).held
    claim = methods_fl.methods_claim([fedavg, *better[:-1], result("hfmds", [0.80, 0.80])])
    assert claim.verdict == "not resolved" and "hfmds -0.005 (not resolved)" in claim.text
    claim = methods_fl.methods_claim([fedavg, *better[:-1], result("hfmds", [0.70, 0.71])])
    assert claim.verdict == "contradicted" and "hfmds -0.100 (contradicted)" in claim.text


def test_fig2_claim_flips_with_the_numbers():
    p = np.array([0.0, 0.2, 0.4, 0.6])
    theory = np.array([1.0, 0.75, 0.5, 0.3])
    claim = catalogue.fig2_claim(p, theory * 0.99, theory)
    assert claim.held and "at or below it" in claim.text
    claim = catalogue.fig2_claim(p, theory * 1.05, theory)
    assert claim.verdict == "contradicted" and "lies above it" in claim.text
    claim = catalogue.fig2_claim(p, theory * 1.05, theory, np.array([theory * 0.98, theory * 1.1]))  # reaches it
    assert claim.held
    square = (1 - p) ** 2  # below the bound: the saving is larger than the corollary's shape
    claim = catalogue.fig2_claim(p, square, theory)
    assert claim.held and claim.size == ""  # a curve, not a size
    wide = np.array([0.0, 0.2, 0.4, 0.6, 0.95])
    claim = catalogue.fig2_claim(wide, np.array([1.0, 0.7, 0.45, 0.3, 0.2]), np.array([1.0, 0.75, 0.5, 0.3, 0.1]))
    assert claim.held and "for 0 < p <= 0.6 the fitted ratio lies at or below it" in claim.text
    assert "beyond that range (not claimed) it lies above it, past its 95 % interval, at p = 0.95" in claim.text


def test_fig2_shape_is_judged_apart_from_the_bound():
    """The paper's "matches" (Fig. 2c) by the rule for curves: the corollary's ratio inside the fit's 95 % intervals
    at all but one point in twenty; a fit that follows (1-p)² instead is contradicted though it holds the bound."""
    p = np.array([0.0, 0.2, 0.4, 0.6])
    theory = np.array([1.0, 0.75, 0.5, 0.3])
    shape = catalogue.fig2_shape(p, theory * 0.99, theory, np.array([theory * 0.95, theory * 1.02]))
    assert shape.verdict == "held" and "follows Corollary I's ratio" in shape.text
    square = (1 - p) ** 2
    intervals = np.array([square * 0.95, square * 1.05])
    assert catalogue.fig2_claim(p, square, theory, intervals).held  # the bound holds
    shape = catalogue.fig2_shape(p, square, theory, intervals)
    assert shape.verdict == "contradicted" and "follows (1-p)²" in shape.text and "at 3 of 3 values" in shape.text
    assert catalogue.fig2_shape(p, square, theory).verdict == "not measured"  # no intervals: one seed


def test_lemma1_claim_flips_with_the_numbers():
    """Each measurement less one sd of a single shuffle's scatter against its bound, at p > 0 only (p = 0 is the
    reference); the sentence names the p beyond the scatter, and where the expectation itself lies above."""
    p = np.array([0.0, 0.5, 0.8, 1.0])
    bound = np.array([1.0, 0.3, 0.1, 0.02])
    l_bound = np.array([10.0, 9.0, 8.0, 7.0])
    none, sd = np.zeros(4), np.full(4, 0.01)

    def judge(zeta, l_p=l_bound, scatter=none, expected=None):
        return catalogue.lemma1_claim(p, (zeta, bound, scatter, bound if expected is None else expected),
                                      (l_p, l_bound, none, l_bound))  # fmt: skip

    claim = judge(bound * 0.99)
    assert claim.held and "at 3 of 3 values of p (0.5 to 1)" in claim.text  # p = 0 out, p = 1 in
    claim = judge(bound * np.array([5, 1, 1.2, 1]))  # p = 0 far above: not judged
    assert not claim.held and "beyond the scatter at p = 0.8 (largest +20.0% past it at p = 0.8)" in claim.text
    assert "at 2 of 3 values" in claim.text
    assert judge(bound + 0.015, scatter=sd).verdict == "contradicted"  # beyond one sd
    assert judge(bound + 0.005, scatter=sd).held  # within one sd of the scatter
    assert "expectation (the Monte Carlo mean" in judge(bound, expected=bound * 1.1).text
    assert not judge(bound, l_bound * 1.1).held


def test_figb2_claim_flips_with_the_numbers():
    good = {"split_E1_monotone_in_p": True, "split_E5_monotone_in_p": True}
    good |= {"split_E1_speedup_at_pmax": 1.5, "split_E5_speedup_at_pmax": 2.0}
    claim = catalogue.figb2_claim(good, [1, 5])  # means without a seed spread: never more than not resolved
    assert claim.verdict == "not resolved" and "the means agree with it" in claim.text
    claim = catalogue.figb2_claim(good | {"split_E5_speedup_at_pmax": 1.0}, [1, 5])
    assert claim.verdict == "not resolved" and "the means go against it" in claim.text
    assert "go against" in catalogue.figb2_claim(good | {"split_E1_monotone_in_p": False}, [1, 5]).text


def test_unknown_artefact_is_one_line_exit_2(tmp_path, capsys):
    assert main(["nosuch", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown artefact 'nosuch'" in err


def test_unknown_scale_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fig2", "--scale", "huge", "--root", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scale" in err


@pytest.fixture()
def tiny_runs(cifar_root):
    """Two long runs of a tiny model on the tiny CIFAR-10 (they would take minutes): configs and folders."""
    from fl.config import load_config

    def config(seed):
        overrides = [
            f"data.data_root={json.dumps(str(cifar_root))}",
            "data.dataset=cifar10",
            "data.clients=2",
            "model.name=mlp",
            "train.rounds=100000",
            "train.checkpoint_every=1",
            f"train.seed={seed}",
        ]
        return load_config(None, overrides)

    return [(config(seed), cifar_root.parent / "runs" / f"seed{seed}") for seed in (0, 1)]


@pytest.mark.slow
def test_an_interrupted_parallel_build_checkpoints_its_runs_and_stops_them(tiny_runs):
    """SIGTERM (or Ctrl-C) to `python -m figures --jobs 2`: every fl.run process gets SIGTERM, checkpoints, exits;
    the build waits for them and the interrupt goes on; their locks are free again. The signal handlers are the
    CLI's own (theory.cli.guarded installs them), so this holds where SIGINT is ignored (background jobs)."""
    import fcntl
    import os
    import signal
    import threading
    import time

    from theory.cli import signals_as_interrupts

    def interrupt_when_running():
        deadline = time.monotonic() + 600  # an overloaded machine once took > 120 s
        while time.monotonic() < deadline and not all((f / "checkpoint.pt").exists() for _, f in tiny_runs):
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    with signals_as_interrupts(), pytest.raises(KeyboardInterrupt):
        flruns.run_processes(tiny_runs, jobs=2, poll=0.1)
    for _, folder in tiny_runs:
        assert (folder / "checkpoint.pt").exists() and not (folder / "summary.json").exists()
        rounds = [json.loads(line)["round"] for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert rounds and rounds == list(range(1, len(rounds) + 1))
        with open(flruns.lock_file(folder), "w") as lock:  # no process holds it any more
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_failing_run_stops_the_parallel_build(tiny_runs, tmp_path):
    from dataclasses import replace

    config, folder = tiny_runs[0]
    broken = replace(config, data=replace(config.data, clients=150))  # 200 images, min size 10: no partition
    with pytest.raises(InputError, match=r"python -m fl\.run exited with 2"):
        flruns.run_processes([(broken, folder), (broken, tmp_path / "other")], jobs=2, poll=0.1)


def test_the_ddpm_sets_explain_a_gap_only_where_the_ddpm_arm_is_slower_than_the_vae_arm():
    report = {"seed": 0, "dataset": "fmnist", "noise_fraction": 0.33, "noise_by_client": [0.1, 1.0],
              "label_agreement": 0.42, "synthetic_trained_accuracy": 0.66, "real_trained_accuracy": 0.78}  # fmt: skip
    pairs = {"fedavg": (result("w", [0.8, 0.8], [8, 9]), result("s", [0.8, 0.8], [4, 4]))}  # 2.0x, 2.25x
    paper = {"fedavg": (8, 68, "8.5x")}
    as_fast = {"fedavg": result("d", [0.8, 0.8], [4, 4])}
    claim = fedssyn_fl.table1_claim(pairs, as_fast, paper, 0.1, [report])
    assert "the DDPM sets' quality does not explain the gap" in claim.size and "33 % noise" in claim.size
    assert "33.00 % of the images are noise" in claim.text and "(the DDPM arms: held)" in claim.text
    slower = {"fedavg": result("d", [0.8, 0.8], [8, 9])}  # 1.0x
    claim = fedssyn_fl.table1_claim(pairs, slower, paper, 0.1, [report])
    assert "the DDPM sets explain the gap for fedavg" in claim.size
    assert "quality is not measured" in fedssyn_fl.table1_claim(pairs, slower, paper, 0.1, []).text


def test_a_censored_fig_b2_speed_up_is_shown_as_the_bound_it_is():
    rows = [
        {"scheme": "iid", "epochs": 5, "p": 0.0, "rounds_to_target": 49, "speedup": 1.0},
        {"scheme": "iid", "epochs": 5, "p": 0.05, "rounds_to_target": None, "speedup": None},
        {"scheme": "split", "epochs": 5, "p": 0.0, "rounds_to_target": None, "speedup": None},
        {"scheme": "split", "epochs": 5, "p": 0.5, "rounds_to_target": 3, "speedup": None},
    ]
    assert catalogue.shown_speedup(rows[0], rows, 50) == 1.0
    assert catalogue.shown_speedup(rows[1], rows, 50) == "≤ 0.961"  # never reached: counts as round 51
    assert catalogue.shown_speedup(rows[3], rows, 50) == "≥ 17"  # its p = 0 run never reached it
    assert catalogue.shown_speedup(rows[2], rows, 50) == "-"
