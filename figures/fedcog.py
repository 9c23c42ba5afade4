"""FedCOG Table 1 on Fashion-MNIST from the runs of ``scripts/fedcog-experiments.sh`` and
``scripts/fedcog-code-experiments.sh``: ours beside the paper's, over seeds, with the verdict.

    python -m figures fedcog-table1 --scale paper --runs ~/.cache/shufflefl --force

For every partition and seed it reads ``fedcog_fmnist_{part}_seed{s}`` (FedAvg, 70 rounds) and ``..._fedcog``
(FedCOG from round 51, started from the FedAvg run's state after round 49), and the FedAvg runs at the authors'
code settings ``fedcog_fmnist_{part}_code[_noaug]_seed{s}`` (τ = 100, weight decay 1e-5, crop + flip or none, the
code's split, no validation split) with FedCOG at the same settings ``fedcog_fmnist_{part}_code_seed{s}_fedcog``.
Per run: final accuracy (round 70), best (what the code's log prints), the mean of the last 5 rounds, rounds to
70%, ζ̂²/σ̂² (mean over the estimates of rounds 50-70, the same server-model convention for both), seconds per round
(local training and FedCOG's generation, rounds 51-70). The gain FedCOG − FedAvg is paired by seed, in the paper
setting and at the code's settings; the verdict compares its mean with the seed spread. Missing runs are skipped; an
unfinished run is reported at the round it has reached.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from figures.artefacts import Artefact, Build, Built, Claim
from figures.flruns import plt, save
from figures.scripted import accuracy_numbers, plain, points, read_rows, runs_root, seed_list, spread_verdict
from figures.verdict import alike, censored_mark, combine, direction, mean_sd, not_comparable, size_word
from theory.errors import InputError

# FedCOG Table 1, FMNIST, FedAvg and FedAvg + FedCOG final accuracy (%).
PAPER = {("niid1", "fedavg"): 73.07, ("niid1", "fedcog"): 77.34, ("niid2", "fedavg"): 64.11, ("niid2", "fedcog"): 73.68}
PARTS = {"niid1": "NIID-1 (Dir 0.1)", "niid2": "NIID-2 (2 labels)"}
SEEDS = (0, 1, 2)
# (suffix of the run folder, label): FedAvg / FedCOG in the paper setting, FedAvg at the code's settings.
RUNS = (
    ("", "fedavg"),
    ("_fedcog", "fedcog"),
    ("code", "fedavg, code settings (crop + flip)"),
    ("code_fedcog", "fedcog, code settings (crop + flip)"),
    ("code_noaug", "fedavg, code settings, no crop + flip"),
    ("code_noaug_shards", "fedavg, code settings, no crop + flip, our shards"),
)


def run_folder(runs: Path, part: str, seed: int, suffix: str) -> Path:
    if suffix in ("", "_fedcog"):
        return runs / f"fedcog_fmnist_{part}_seed{seed}{suffix}"
    if suffix == "code_fedcog":
        return runs / f"fedcog_fmnist_{part}_code_seed{seed}_fedcog"
    return runs / f"fedcog_fmnist_{part}_{suffix}_seed{seed}"


def run_numbers(rows: list[dict], first_method_round: int = 51) -> dict:
    late = [r for r in rows if r["round"] >= first_method_round]
    estimates = [r["estimates"] for r in rows if "estimates" in r and r["round"] >= first_method_round - 1]

    def mean(values: list) -> float | None:
        return float(np.mean(values)) if values else None

    return accuracy_numbers(rows) | {
        "zeta2_hat": mean([e["zeta2_hat"] for e in estimates]),
        "sigma2_hat": mean([e["sigma2_hat"] for e in estimates]),
        "local_s": mean([r.get("seconds_local", np.nan) for r in late]),
        "method_s": mean([r.get("seconds_method", np.nan) for r in late]),
    }


def collect(ctx: Build, runs: Path, seeds: tuple[int, ...] = SEEDS) -> dict:
    """(part, label, seed) -> numbers, for the runs under ``runs`` that exist (``ctx`` names those read)."""
    out = {}
    for part in PARTS:
        for seed in seeds:
            for suffix, label in RUNS:
                rows = read_rows(ctx, run_folder(runs, part, seed, suffix))
                if rows:
                    out[part, label, seed] = run_numbers(rows)
    return out


def table_rows(numbers: dict) -> list[list]:
    rows = []
    for part, name in PARTS.items():
        for _, label in RUNS:
            found = [v for (p, m, _), v in sorted(numbers.items()) if p == part and m == label]
            if not found:
                continue
            paper = PAPER.get((part, label))
            rows.append([
                name, label, len(found), min(f["rounds"] for f in found),
                points([f["final"] for f in found]) + (f" ({paper})" if paper else ""),
                points([f["best"] for f in found]), points([f["last5"] for f in found]),
                censored_mark(any(f["to_target"] is None for f in found), False)
                + plain([f["to_target"] or f["rounds"] + 1 for f in found], 1),
                plain([f["zeta2_hat"] for f in found], 3),
                plain([f["sigma2_hat"] for f in found], 1), plain([f["local_s"] for f in found], 1),
                plain([f["method_s"] for f in found], 1),
            ])  # fmt: skip
    return rows


HEADERS = [
    "partition", "run", "seeds", "rounds", "final % (paper)", "best %", "mean last 5 %", "rounds to 70%",
    "ζ̂² r50-70", "σ̂² r50-70", "s/round local", "s/round generation",
]  # fmt: skip


# Where the gain is measured: the paper setting (key: the partition) and the authors' code's settings (key:
# "{partition}/code"), each pairing a FedCOG arm with the FedAvg run it started from.
PAIRS = {"": ("fedavg", "fedcog"), "/code": (RUNS[2][1], RUNS[3][1])}


def gains(numbers: dict) -> dict:
    """Per partition and setting: the seeds with both arms, FedCOG − FedAvg per seed (final, mean of the last 5),
    the verdict on the last-5 gain, the paper's gain."""
    out = {}
    for part, (setting, (base, arm)) in ((p, s) for p in PARTS for s in PAIRS.items()):
        seeds = [s for (p, m, s) in sorted(numbers) if p == part and m == arm and (part, base, s) in numbers]
        if not seeds:
            continue
        avg, cog = ([numbers[part, m, s] for s in seeds] for m in (base, arm))
        last5 = [c["last5"] - a["last5"] for a, c in zip(avg, cog)]
        out[part + setting] = {
            "seeds": seeds,
            "final": [c["final"] - a["final"] for a, c in zip(avg, cog)],
            "last5": last5,
            "verdict": spread_verdict(last5, [a["last5"] for a in avg], [c["last5"] for c in cog]),
            "word": direction([c["last5"] for c in cog], [a["last5"] for a in avg]),
            "rounds": min(c["rounds"] for c in cog),
            "paper": PAPER[part, "fedcog"] - PAPER[part, "fedavg"],
        }
    return out


def gain_text(key: str, gain: dict) -> str:
    part, _, code = key.partition("/")
    return (
        f"{PARTS[part]}{', the code settings' if code else ''}, {seed_list(gain['seeds'])} "
        f"(FedCOG at round {gain['rounds']}): FedCOG − "
        f"FedAvg {plain([100 * g for g in gain['final']], 2)} points final, "
        f"{plain([100 * g for g in gain['last5']], 2)} on the mean of the last 5, {gain['verdict']} "
        f"(paper {gain['paper']:+.2f})"
    )


def plot(ctx: Build, numbers: dict) -> list[str]:
    fig, axes = plt.subplots(1, len(PARTS), figsize=(11, 3.8), squeeze=False)
    colours = {label: f"C{i}" for i, (_, label) in enumerate(RUNS)}
    for ax, (part, name) in zip(axes[0], PARTS.items()):
        for (p, label, seed), v in sorted(numbers.items()):
            if p != part or not v["curve"]:
                continue
            rounds, acc = zip(*v["curve"])
            ax.plot(rounds, 100 * np.array(acc), color=colours[label], lw=1.0, label=label if seed == min(
                s for (q, m, s) in numbers if q == part and m == label) else None)  # fmt: skip
        for method in ("fedavg", "fedcog"):
            ax.axhline(PAPER[part, method], ls=":", lw=0.8, color=colours[method])
        ax.axvline(50.5, color="grey", lw=0.6)
        ax.set(title=f"FMNIST {name}", xlabel="round", ylabel="test accuracy (%)", ylim=(40, 95))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("FedCOG Table 1 (dotted: the paper's final accuracies)")
    return save(ctx, fig, "fedcog_table1")


# FedCOG Table 3, CIFAR-10, the FedAvg row: accuracy (%) after 50 FedAvg rounds and one more round of FedAvg (×)
# or of FedAvg + FedCOG (✓); Table 4, CIFAR-10 NIID-1: each client's local time (s) over 51 rounds.
PAPER_TABLE3 = {"niid1": (63.34, 64.47), "niid2": (49.30, 49.50)}
PAPER_TABLE4 = {"fedavg": 983.0, "fedcog": 1001.0}
FIRST_FEDCOG_ROUND = 51


def setting_name(key: str) -> str:
    part, _, code = key.partition("/")
    return f"{PARTS[part]}{', the code settings' if code else ''}"


def part_key(key: str) -> str:
    """A gain's key ("niid1", "niid1/code") as a claims-row part ("niid1", "niid1-code")."""
    return key.replace("/", "-")


def setting_claims(found: dict) -> dict[str, Claim]:
    """Each setting's own verdict (partition, paper or code settings), the parts the row's verdict combines."""
    out = {}
    for key, gain in found.items():
        mean, sd = 100 * np.mean(gain["last5"]), 100 * mean_sd(gain["last5"])[1]
        out[part_key(key)] = Claim(
            gain["word"],
            f"FedCOG's Table 1 claim in one setting: {gain['word']}: {gain_text(key, gain)}",
            f"{mean:+.2f} against {gain['paper']:+.2f}: {size_word(mean, sd, gain['paper'])}",
        )
    return out


def accuracy_at(curve: list[tuple[int, float]], round_: int) -> float | None:
    return next((a for t, a in curve if t == round_), None)


def arm_pairs(numbers: dict) -> dict[str, tuple[list[int], list[dict], list[dict]]]:
    """Per setting key ("niid1", "niid1/code", ...): the seeds with both arms, FedAvg's numbers, FedCOG's."""
    out = {}
    for part, (setting, (base, arm)) in ((p, s) for p in PARTS for s in PAIRS.items()):
        seeds = [s for (p, m, s) in sorted(numbers) if p == part and m == arm and (part, base, s) in numbers]
        if seeds:
            out[part + setting] = (
                seeds,
                [numbers[part, base, s] for s in seeds],
                [numbers[part, arm, s] for s in seeds],
            )
    return out


def table3_claim(numbers: dict) -> Claim:
    """FedCOG Table 3, its FedAvg row, on Fashion-MNIST: one round of FedAvg + FedCOG after 50 FedAvg rounds beats
    one more FedAvg round: the test accuracy at round 51 of the FedCOG run against the FedAvg run's, paired by seed
    (:func:`figures.verdict.direction`), per partition and setting, combined; the size is not comparable (CIFAR-10
    in the paper)."""
    words, said, sizes = [], [], []
    for key, (seeds, avg, cog) in arm_pairs(numbers).items():
        ours = [accuracy_at(c["curve"], FIRST_FEDCOG_ROUND) for c in cog]
        theirs = [accuracy_at(a["curve"], FIRST_FEDCOG_ROUND) for a in avg]
        word = direction(ours, theirs)
        words.append(word)
        gain = [None if o is None or a is None else o - a for o, a in zip(ours, theirs)]
        said.append(f"{setting_name(key)}, {seed_list(seeds)}: {points(theirs)} → {points(ours)} %, "
                    f"{points(gain)} points: {word}")  # fmt: skip
        before, after = PAPER_TABLE3[key.partition("/")[0]]
        sizes.append(f"{setting_name(key)} {100 * mean_sd(gain)[0]:+.2f} against {after - before:+.2f}")
    verdict = combine(words)
    return Claim(
        verdict,
        f"FedCOG Table 3's claim (FedAvg row) that one round of FedAvg + FedCOG after 50 FedAvg rounds beats one more "
        f"FedAvg round: {verdict}: test accuracy at round {FIRST_FEDCOG_ROUND}, FedAvg → FedAvg + FedCOG, paired by "
        "seed: " + "; ".join(said) + " (Fashion-MNIST; the paper's Table 3 is CIFAR-10).",
        not_comparable("; ".join(sizes) + " (CIFAR-10): another data set"),
    )


def cost_claim(numbers: dict) -> Claim:
    """FedCOG Table 4: FedCOG adds little local computation, its local time near FedAvg's: the seconds per round of
    local training and generation over the FedCOG rounds (51-70) against FedAvg's over the same rounds, paired by
    seed, by :func:`figures.verdict.alike` (a difference beyond the seed spread contradicts "near"), per partition and
    setting, combined. The size is not comparable: a FedCOG round here against the paper's 51 rounds of which its
    generation is a part, on a shared 2-core CPU against the paper's GPU."""
    words, said, ratios = [], [], []
    for key, (seeds, avg, cog) in arm_pairs(numbers).items():
        ours = [c["local_s"] + c["method_s"] for c in cog]
        theirs = [a["local_s"] + a["method_s"] for a in avg]
        word = alike(ours, theirs)
        words.append(word)
        ratio = [o / a for o, a in zip(ours, theirs)]
        ratios += ratio
        said.append(
            f"{setting_name(key)}, {seed_list(seeds)}: {plain(theirs, 1)} → {plain(ours, 1)} s a round "
            f"({plain(ratio, 2)}×): {word}"
        )
    verdict = combine(words)
    paper = PAPER_TABLE4["fedcog"] / PAPER_TABLE4["fedavg"]
    return Claim(
        verdict,
        f"FedCOG Table 4's claim that FedCOG's local time is near FedAvg's: {verdict}: seconds of local training and "
        f"generation per round over rounds {FIRST_FEDCOG_ROUND}-70, FedAvg → FedCOG, paired by seed: "
        + "; ".join(said)
        + " (seconds on a shared 2-core CPU; Fashion-MNIST).",
        not_comparable(
            f"{mean_sd(ratios)[0]:.2f}× per FedCOG round against the paper's {paper:.2f}× over 51 rounds (CIFAR-10, a "
            "GPU): the paper's total includes the FedAvg rounds"
        ),
    )


def build(ctx: Build) -> Built:
    runs = runs_root(ctx)
    numbers = collect(ctx, runs)
    if not numbers:
        raise InputError(f"no FedCOG runs under {runs}: bash scripts/fedcog-experiments.sh 0 1 2 makes them")
    found = gains(numbers)
    verdict = combine(g["word"] for g in found.values())
    text = (
        f"FedCOG's claim (Table 1: +4.27 points on NIID-1, +9.57 on NIID-2 over FedAvg): {verdict}: "
        + "; ".join(f"{gain_text(p, g)}: {g['word']}" for p, g in found.items())
        + "."
    )
    size = "; ".join(
        f"{PARTS[p.partition('/')[0]]}{' (code)' if '/code' in p else ''} {100 * np.mean(g['last5']):+.2f} against "
        f"{g['paper']:+.2f}: {size_word(100 * np.mean(g['last5']), 100 * mean_sd(g['last5'])[1], g['paper'])}"
        for p, g in found.items()
    )
    curves = {f"{p}/{m}/seed{s}": v for (p, m, s), v in numbers.items()}
    parts = {k: c.to_dict() for k, c in setting_claims(found).items()}
    parts |= {"table3": table3_claim(numbers).to_dict(), "cost": cost_claim(numbers).to_dict()}
    return Built(HEADERS, table_rows(numbers), Claim(verdict, text, size), plot(ctx, numbers),
                 {"runs": curves, "gains": found, "parts": parts})  # fmt: skip


ARTEFACT = Artefact(
    "fedcog-table1",
    "FedCOG Table 1 (FMNIST NIID-1/NIID-2): FedAvg and FedCOG over seeds, FedAvg at the authors' code settings",
    {
        "paper": "reads the runs of `bash scripts/fedcog-experiments.sh 0 1 2` and `bash scripts/fedcog-code-"
        "experiments.sh 0` in $SHUFFLEFL_RUNS/runs (10 clients, 50 FedAvg + 20 FedCOG rounds vs 70 FedAvg rounds)",
    },
    build,
)
