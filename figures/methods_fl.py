"""The method comparison: Fedssyn, FedCOG, DynaFed, FMDS and HFMDs against FedAvg on the same clients (the same
partition, model, local training and seeds as :mod:`figures.fedssyn_fl`'s protocol, so its FedAvg and Fedssyn runs
are shared): accuracy, rounds to the target, ζ̂²_p/ζ², σ̂²_p, δ², communication and compute.

Each paper measured its gain over FedAvg in its own setting; those gains sit beside ours, not as targets. At cpu
scale the methods run reduced (said in the scale's line): DynaFed learns D_syn after L = 10 of the 20 rounds with
N = 300 matching iterations (paper L = 20, N = 1000), FMDS/HFMDs invert every 10 rounds with T_g = 200 steps
(paper T_d = 20, T_g = 500), FedCOG generates in rounds 11-20 after 10 FedAvg rounds (the paper: 20 rounds after
50 FedAvg rounds).
"""

from __future__ import annotations

import numpy as np

from figures.artefacts import Artefact, Build, Built, Claim
from figures.fedssyn_fl import FMNIST, accuracy
from figures.flruns import Arm, Result, plt, run_arms, save, seeds_text, show, show_rounds
from figures.verdict import combine, direction
from fl.sweep import mean_sd

METHOD_KEYS = {
    "quick": {
        "fedcog": ("n_generate=16", "generate_steps=2"),
        "dynafed": ("trajectory_rounds=2", "segment=1", "iterations=2", "per_class=1", "inner_steps=2",
                    "finetune_steps=2"),
        "fmds": ("period=2", "steps=2", "n_synthetic=10"),
        "hfmds": ("period=2", "steps=2", "n_synthetic=10"),
    },
    "cpu": {
        "fedcog": ("start_round=11",),
        "dynafed": ("trajectory_rounds=10", "iterations=300"),
        "fmds": ("period=10", "steps=200"),
        "hfmds": ("period=10", "steps=200"),
    },
    "paper": {"fedcog": (), "dynafed": (), "fmds": (), "hfmds": ()},
}  # fmt: skip
# Each paper's own FedAvg -> method accuracy (%), in its own setting (../shared/SPEC.md Sec. 4, notes/hfmds.md).
PAPER_GAIN = {
    "fedssyn": "CIFAR-10 Dir(0.1), N = 10: 8.5x fewer rounds to the target (Table 1, α = 0.1 as ours)",
    "fedcog": "FMNIST Dir(0.1): 73.07 -> 77.34 (Table 1)",
    "dynafed": "FMNIST Dir(0.01), 80 clients: 74.50 -> 87.52 (Table 1)",
    "fmds": "CIFAR-10 Dir(0.01): 28.53 -> 33.67 (Table 2)",
    "hfmds": "CIFAR-10 Dir(0.01): 28.53 -> 36.05 (Table 2)",
}
METHODS = ("fedssyn", "fedcog", "dynafed", "fmds", "hfmds")


def method_arms(scale: str) -> list[Arm]:
    arms = [Arm("FedAvg", ("method.name=none",)), Arm("fedssyn", ("method.name=fedssyn",))]
    for name, keys in METHOD_KEYS[scale].items():
        arms.append(Arm(name, (f"method.name={name}", *(f"method.{k}" for k in keys))))
    return arms


def methods_claim(results: list[Result]) -> Claim:
    """Every paper's headline: its method ends above FedAvg. Here: final accuracy against FedAvg's, per method, by
    :func:`figures.verdict.direction`; the claim is the methods' together (:func:`figures.verdict.combine`)."""
    fedavg = accuracy(results[0])
    verdicts = {r.arm.label: direction(accuracy(r), fedavg) for r in results[1:]}
    gains = {r.arm.label: mean_sd(accuracy(r))[0] - mean_sd(fedavg)[0] for r in results[1:]}
    verdict = combine(verdicts.values())
    text = (
        f"The methods' common claim that they end above FedAvg on the same clients: {verdict}: "
        + ", ".join(f"{name} {gains[name]:+.3f} ({word})" for name, word in verdicts.items())
        + f" against FedAvg's {mean_sd(fedavg)[0]:.3f} (each method's paper claims its gain in its own setting:"
        " the size column of its own row)."
    )
    return Claim(verdict, text)


def build_methods(ctx: Build) -> Built | None:
    scale = ctx.scale
    results = run_arms(ctx, "methods", FMNIST[scale], method_arms(scale))
    if results is None:  # planning (python -m figures status): the runs are recorded, nothing to build
        return None
    target = results[0].summaries[0]["target_accuracy"]

    def millions(values):
        return [None if v is None else v / 1e6 for v in values]

    rows = [
        [r.arm.label, show(accuracy(r)), show_rounds(r), show(r.estimate("zeta2_ratio")),
         show(r.estimate("sigma2_hat")), show(r.estimate("delta2")),
         show(millions(r.values("communication_to_target"))), show(millions(r.values("synthetic_numbers_sent_once"))),
         show(r.values("seconds")),
         show(r.values("seconds_method")), PAPER_GAIN.get(r.arm.label, "-")]
        for r in results
    ]  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for r in results:
        rounds, values = r.curve("test_accuracy")
        mean, sd = np.nanmean(values, 0), np.nanstd(values, 0)
        axes[0].plot(rounds, mean, label=r.arm.label)
        axes[0].fill_between(rounds, mean - sd, mean + sd, alpha=0.15)
    axes[0].set(xlabel="communication round", ylabel="test accuracy (fraction)")
    axes[0].legend(fontsize=7)
    stats = [mean_sd(r.values("seconds")) for r in results]
    axes[1].bar(range(len(results)), [s[0] for s in stats], yerr=[s[1] for s in stats], capsize=3)
    axes[1].set_xticks(range(len(results)), [r.arm.label for r in results], rotation=30, ha="right", fontsize=8)
    axes[1].set_ylabel("wall-clock seconds per run (FL rounds)")
    fig.suptitle(f"Methods on the same clients ({seeds_text(FMNIST[scale])})", fontsize=9)
    return Built(
        ["method", "final accuracy", f"rounds to {target:g}", "ζ̂²_p/ζ²", "σ̂²_p", "δ²", "numbers sent to target (M)",
         "synthetic numbers sent once (M)", "seconds", "seconds in method hooks", "paper: its own gain over FedAvg"],
        rows,
        methods_claim(results),
        save(ctx, fig, "methods"),
        {"seeds": list(FMNIST[scale].seeds), "method_keys": {k: list(v) for k, v in METHOD_KEYS[scale].items()}},
    )  # fmt: skip


ARTEFACT = Artefact(
    "methods",
    "Method comparison: Fedssyn, FedCOG, DynaFed, FMDS, HFMDs against FedAvg on the same clients",
    {
        "quick": "the quick Fedssyn protocol, every method cut to a few steps (seconds)",
        "cpu": "the cpu Fedssyn protocol (FMNIST, 10 clients Dir(0.1), 20 rounds, seeds 0 and 1); DynaFed L = 10, "
        "N = 300; FMDS/HFMDs T_d = 10, T_g = 200; FedCOG in rounds 11-20 after 10 FedAvg rounds",
        "paper": "the paper Fedssyn protocol (CIFAR-10, VGG-11) with each method's paper defaults (GPU)",
    },
    build_methods,
)
