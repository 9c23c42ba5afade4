"""HFMDs and FMDS against FedAvg on real Fashion-MNIST from the runs of ``scripts/hfmds-experiments.sh``: the table
over seeds, the paired gain with its verdict, the accuracy curves and the pool's share of the gradient.

    python -m figures hfmds-fmnist --scale paper --runs ~/.cache/shufflefl --force

For every partition (``dir001``: Dirichlet 0.01, ``shards``: 2 classes per client) and seed it reads
``hfmds_fmnist_{part}_seed{s}_{hfmds,fedavg,fmds,fedavg_alpha01}`` (20 clients, HFMDs' CNN, 50 rounds, T_d = 20;
FedAvg, FMDS and the lr/10 control start from the HFMDs run's state after round 19, so rounds 1-19 are the same in
every arm; FMDS for the first seed only). The lr/10 control (``fedavg_alpha01``) is FedAvg at lr/10 with weight
decay x10: HFMDs' real-data step (its real loss weighted α = 0.1) without the pool, so HFMDs − control is what
the pool itself adds. The synthesis runs before round t with t mod T_d = 0 (:mod:`fl.methods.hfmds`), so round 20 is the
first round trained with the pool. Per run: final accuracy, the mean of the last 5 rounds, the mean over the rounds
with the pool (20 to the last), rounds to 70%, and from the method's round log: PSNR of x̂ against its real sample
unclipped and clipped to the real pixel range, the share of x̂'s pixels outside that range, the pool's share of
the mixed step's gradient (mean over participants and rounds with the pool), seconds per synthesis and seconds per
round of local training (rounds 20 on: before them FedAvg's and FMDS's rows are HFMDs'). The gain HFMDs − FedAvg is
paired by seed, at the last round both runs of a seed reached; the verdict compares its mean with the seed spread.
Missing runs are skipped; an unfinished run is reported at the round it has reached.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from figures.artefacts import Artefact, Build, Built, Claim
from figures.flruns import plt, save
from figures.scripted import (
    accuracy_numbers,
    plain,
    points,
    read_rows,
    runs_root,
    seed_list,
    spread_verdict,
    window_mean,
)
from figures.verdict import combine, direction, not_comparable
from theory.errors import InputError

NAME = "hfmds-fmnist"
SCRIPT = "scripts/hfmds-experiments.sh"
PARTS = {"dir001": "Dir 0.01", "shards": "2 classes (shards)"}
ARMS = ("fedavg", "hfmds", "fmds", "fedavg_alpha01")
CONTROL = "fedavg_alpha01"  # FedAvg at lr/10, weight decay x10: HFMDs' real-data step without the pool
SEEDS = (0, 1, 2)
FIRST_POOL_ROUND = 20  # T_d = 20 (configs/hfmds_fmnist_dir001_*.toml): synthesis before round 20's local training
TARGET, LAST = 0.7, 5
# hfmds.txt Table 2: final accuracy (%) on CIFAR-10, K = 20, 3 trials (the paper has no FMNIST); its Dir 0.01
# column beside our dir001, its 2-classes-per-client column beside our shards.
PAPER = {
    "dir001": ("CIFAR-10 Dir 0.01", {"fedavg": 28.53, "fmds": 33.67, "hfmds": 36.05}),
    "shards": ("CIFAR-10 2 classes per client", {"fedavg": 50.44, "fmds": 52.69, "hfmds": 53.74}),
}


def run_folder(runs: Path, part: str, seed: int, arm: str) -> Path:
    return runs / f"hfmds_fmnist_{part}_seed{seed}_{arm}"


def mean(values: list) -> float | None:
    return float(np.mean(values)) if values else None


def run_numbers(rows: list[dict]) -> dict:
    """Accuracy numbers, the mean over the rounds with the pool, and the method log's syntheses and pool shares
    (``method.synthesis`` at a synthesis round, ``method.pool_share`` per participant every round with a pool)."""
    numbers = accuracy_numbers(rows, TARGET, LAST)
    logs = [(r["round"], r.get("method", {})) for r in rows]
    syntheses = [log["synthesis"] for _, log in logs if "synthesis" in log]
    shares = [(t, float(np.mean(log["pool_share"]))) for t, log in logs if log.get("pool_share")]
    own = [r["seconds_local"] for r in rows if r["round"] >= FIRST_POOL_ROUND and "seconds_local" in r]
    return numbers | {
        "pool_window": window_mean(numbers["curve"], FIRST_POOL_ROUND, numbers["rounds"]),
        "synthesis_rounds": [s["round"] for s in syntheses],
        "psnr": mean([s["psnr_mean"] for s in syntheses]),
        "psnr_clamped": mean([s["psnr_clamped_mean"] for s in syntheses]),
        "pixels_outside": mean([s["pixels_outside"] for s in syntheses]),
        "synthesis_s": mean([s["seconds"] for s in syntheses]),
        "pool_share": mean([share for _, share in shares]),
        "pool_share_curve": shares,
        "local_s": mean(own),
    }


def collect(ctx: Build, runs: Path, seeds: tuple[int, ...] = SEEDS) -> dict:
    """(part, arm, seed) -> numbers, for the runs under ``runs`` that have at least one round (``ctx`` names those
    read)."""
    out = {}
    for part in PARTS:
        for seed in seeds:
            for arm in ARMS:
                rows = read_rows(ctx, run_folder(runs, part, seed, arm))
                if rows:
                    out[part, arm, seed] = run_numbers(rows)
    return out


def reached(values: list[int | None]) -> str:
    """Rounds to the target over the seeds that reached it, with how many did when not all."""
    hits = [v for v in values if v is not None]
    if not hits:
        return "never"
    return plain(hits, 1) + ("" if len(hits) == len(values) else f" ({len(hits)} of {len(values)} seeds)")


HEADERS = [
    "partition", "arm", "seeds", "rounds", "final %", f"mean last {LAST} %", f"mean r{FIRST_POOL_ROUND}-last %",
    f"rounds to {TARGET:.0%}", "PSNR dB", "PSNR clamped dB", "x̂ outside real range %", "pool gradient share",
    "s/synthesis", "s/round local", "paper final % (CIFAR-10)",
]  # fmt: skip


def table_rows(numbers: dict, found_gains: dict) -> list[list]:
    rows = []
    for part, name in PARTS.items():
        paper = PAPER[part][1]
        for arm in ARMS:
            found = [v for (p, a, _), v in sorted(numbers.items()) if p == part and a == arm]
            if not found:
                continue

            def col(key: str, digits: int = 2, scale: float = 1.0, found=found) -> str:
                return plain([None if f[key] is None else scale * f[key] for f in found], digits)

            rows.append([
                name, arm, len(found), min(f["rounds"] for f in found), points([f["final"] for f in found]),
                points([f["last5"] for f in found]), points([f["pool_window"] for f in found]),
                reached([f["to_target"] for f in found]), col("psnr"), col("psnr_clamped"),
                col("pixels_outside", 2, 100), col("pool_share", 3), col("synthesis_s", 0), col("local_s", 1),
                f"{paper[arm]:.2f}" if arm in paper else "-",
            ])  # fmt: skip
        for against, label in (("fedavg", "hfmds − fedavg (paired)"), (CONTROL, "hfmds − lr/10 control (paired)")):
            gain = found_gains.get(part if against == "fedavg" else f"{part}/{CONTROL}")
            if gain:
                rows.append([
                    name, label, len(gain["seeds"]), gain["rounds"], points(gain["final"]),
                    points(gain["last5"]), points(gain["pool_window"]), "-", "-", "-", "-", "-", "-", "-",
                    f"{paper['hfmds'] - paper['fedavg']:+.2f}" if against == "fedavg" else "-",
                ])  # fmt: skip
    return rows


def up_to(curve: list, last_round: int) -> dict:
    """Final accuracy, mean of the last ``LAST`` evaluated rounds and mean over the rounds with the pool, of the
    curve cut at ``last_round`` (None where it has no round there)."""
    kept = [a for t, a in curve if t <= last_round]
    return {
        "final": kept[-1] if kept else None,
        "last5": float(np.mean(kept[-LAST:])) if kept else None,
        "pool_window": window_mean(curve, FIRST_POOL_ROUND, last_round),
    }


def gains(numbers: dict) -> dict:
    """Per partition (key ``part``) with both arms for some seed: HFMDs − FedAvg per seed (final, mean of the last
    5, mean over the rounds with the pool), both arms' last-5 means, the verdict on the last-5 gain; the same
    against the lr/10 control under the key ``PART/fedavg_alpha01``. A pair is compared at the last round both runs
    reached (``rounds``: the smallest over the seeds), so an unfinished run meets its partner at the same round."""
    out = {}
    for part in PARTS:
        out[part] = paired(numbers, part, "fedavg")
        out[f"{part}/{CONTROL}"] = paired(numbers, part, CONTROL)
    return {key: value for key, value in out.items() if value}


def paired(numbers: dict, part: str, against: str) -> dict | None:
    """HFMDs − ``against`` paired by seed on ``part`` (:func:`gains`); None without a pair."""
    pairs = []
    for seed in sorted(s for (p, a, s) in numbers if p == part and a == "hfmds"):
        if (part, against, seed) not in numbers:
            continue
        avg, h = numbers[part, against, seed], numbers[part, "hfmds", seed]
        common = min(avg["rounds"], h["rounds"])
        avg, h = up_to(avg["curve"], common), up_to(h["curve"], common)
        if avg["last5"] is not None and h["last5"] is not None:
            pairs.append((seed, common, avg, h))
    if not pairs:
        return None
    fedavg, hfmds = [avg["last5"] for *_, avg, _ in pairs], [h["last5"] for *_, h in pairs]
    last5 = [h - avg for avg, h in zip(fedavg, hfmds)]

    def difference(key: str, pairs=pairs) -> list[float | None]:
        return [None if h[key] is None or avg[key] is None else h[key] - avg[key] for *_, avg, h in pairs]

    return {
        "against": against,
        "seeds": [seed for seed, *_ in pairs],
        "fedavg_last5": fedavg,
        "hfmds_last5": hfmds,
        "last5": last5,
        "final": difference("final"),
        "pool_window": difference("pool_window"),
        "mean_last5": float(np.mean(last5)),
        "verdict": spread_verdict(last5, fedavg, hfmds),
        "word": direction(hfmds, fedavg),
        "rounds": min(common for _, common, *_ in pairs),
    }


def control_sentence(control: dict) -> str:
    """What the pool adds beyond HFMDs' real-data step: HFMDs − the lr/10 control, paired by seed (reported beside
    the claim; the verdict is the FedAvg comparison's)."""
    if not control:
        return " The lr/10 control (HFMDs' real-data step without the pool): no paired runs."
    said = "; ".join(
        f"{PARTS[part]}, {seed_list(g['seeds'])} (round {g['rounds']}): control {points(g['fedavg_last5'])} → HFMDs "
        f"{points(g['hfmds_last5'])} %, {points(g['last5'])} points, {g['verdict']}"
        for part, g in control.items()
    )
    return f" Against the lr/10 control (HFMDs' real-data step without the pool): {said}."


def another_data_set(numbers: str) -> str:
    """The size word of a gain on Fashion-MNIST beside the paper's on CIFAR-10: not comparable (the data set sets
    the scale of a gain), with both numbers."""
    return not_comparable(f"{numbers} points: Fashion-MNIST here, CIFAR-10 in the paper")


def supported(gain: dict) -> bool:
    return gain["mean_last5"] > 0 and gain["verdict"].startswith("beyond")


def claim(found_gains: dict) -> Claim:
    """The paper's headline (HFMDs ends above FedAvg) on FMNIST: the mean paired gain on the mean of the last 5
    rounds positive and beyond the seed spread in every partition that has paired runs."""
    control = {part: found_gains[f"{part}/{CONTROL}"] for part in PARTS if f"{part}/{CONTROL}" in found_gains}
    found_gains = {part: found_gains[part] for part in PARTS if part in found_gains}
    verdict = combine(g["word"] for g in found_gains.values())
    setting, paper = PAPER["dir001"]
    parts = []
    for part, name in PARTS.items():
        g = found_gains.get(part)
        if g is None:
            parts.append(f"{name}: no paired runs")
            continue
        parts.append(
            f"{name}, {seed_list(g['seeds'])} (round {g['rounds']}): FedAvg "
            f"{points(g['fedavg_last5'])} → HFMDs {points(g['hfmds_last5'])} %, gain {points(g['last5'])} points, "
            f"{g['verdict']}: {g['word']}"
        )
    gain_of = {part: values["hfmds"] - values["fedavg"] for part, (_, values) in PAPER.items()}  # its own column
    size = another_data_set(
        "; ".join(
            f"{PARTS[part]} {100 * g['mean_last5']:+.2f} against {gain_of[part]:+.2f}"
            for part, g in found_gains.items()
        )
    )
    return Claim(
        verdict,
        f"HFMDs' claim that it ends above FedAvg on FMNIST (hfmds.txt Table 2, {setting}: {paper['fedavg']} → "
        f"{paper['hfmds']}, {gain_of['dir001']:+.2f} points; that is CIFAR-10, the paper has no FMNIST): {verdict}: "
        f"mean of the last {LAST} rounds, HFMDs − FedAvg paired by seed: "
        + "; ".join(parts)
        + "."
        + control_sentence(control),
        size,
    )


NAMES = {"hfmds": "HFMDs", "fmds": "FMDS"}
# hfmds.txt Table 3: PSNR (dB) of the synthetic data against their real samples, CIFAR-10 Dir 0.01.
PAPER_PSNR = {"hfmds": 15.59, "fmds": 16.98}


def part_claims(found_gains: dict) -> dict[str, Claim]:
    """Each partition's own verdict and size on Table 2's claim (HFMDs ends above FedAvg), the parts the row's
    verdict combines."""
    out = {}
    for part, name in PARTS.items():
        g = found_gains.get(part)
        if g is None:
            continue
        paper = PAPER[part][1]
        gain = paper["hfmds"] - paper["fedavg"]
        out[part] = Claim(
            g["word"],
            f"HFMDs' claim that it ends above FedAvg on {name} (hfmds.txt Table 2, {PAPER[part][0]}: {gain:+.2f}; "
            f"Fashion-MNIST here): {g['word']}: {seed_list(g['seeds'])} (round {g['rounds']}), mean of the last {LAST} "
            f"rounds, FedAvg {points(g['fedavg_last5'])} → HFMDs {points(g['hfmds_last5'])} %, gain "
            f"{points(g['last5'])} points, {g['verdict']}",
            another_data_set(f"{100 * g['mean_last5']:+.2f} against {gain:+.2f}"),
        )
    return out


def arm_values(numbers: dict, part: str, arms: tuple[str, str], key: str) -> tuple[list[int], list, list]:
    """(seeds with both arms, the first arm's ``key`` per seed, the second's)."""
    seeds = sorted(s for (p, a, s) in numbers if p == part and a == arms[0] and (part, arms[1], s) in numbers)
    return seeds, [numbers[part, arms[0], s][key] for s in seeds], [numbers[part, arms[1], s][key] for s in seeds]


def fmds_claim(numbers: dict) -> Claim:
    """Table 2: HFMDs (hard features, μ = 0.5) ends above FMDS (μ = 0): the mean of the last 5 rounds per seed with
    both (:func:`figures.verdict.direction`; FMDS ran for one seed, so not resolved), per partition, combined."""
    words, said = [], []
    for part, name in PARTS.items():
        seeds, hfmds, fmds = arm_values(numbers, part, ("hfmds", "fmds"), "last5")
        if not seeds:
            continue
        word = direction(hfmds, fmds)
        words.append(word)
        gain = PAPER[part][1]["hfmds"] - PAPER[part][1]["fmds"]
        said.append(
            f"{name}, {seed_list(seeds)}: FMDS {points(fmds)} → HFMDs {points(hfmds)} % (the paper, CIFAR-10: "
            f"{gain:+.2f}): {word}"
        )
    verdict = combine(words)
    return Claim(
        verdict,
        f"HFMDs' claim (Table 2) that it ends above FMDS: {verdict}: mean of the last {LAST} rounds, "
        + ("; ".join(said) or "no FMDS run")
        + " (one seed has no spread: not resolved; Fashion-MNIST, not CIFAR-10).",
        not_comparable("Fashion-MNIST against the paper's CIFAR-10, and one seed"),
    )


def psnr_claim(numbers: dict) -> Claim:
    """Table 3: HFMDs' synthetic data have a lower PSNR to their real samples than FMDS's (less leakage): the mean
    PSNR over a run's syntheses per seed with both (:func:`figures.verdict.direction`, FMDS above HFMDs), per
    partition, combined; the size is not comparable (PSNR depends on the images: Fashion-MNIST here)."""
    words, said = [], []
    for part, name in PARTS.items():
        seeds, hfmds, fmds = arm_values(numbers, part, ("hfmds", "fmds"), "psnr")
        if not seeds:
            continue
        word = direction(fmds, hfmds)
        words.append(word)
        said.append(f"{name}, {seed_list(seeds)}: FMDS {plain(fmds)} dB, HFMDs {plain(hfmds)} dB: {word}")
    verdict = combine(words)
    return Claim(
        verdict,
        f"HFMDs' claim (Table 3) that its synthetic data have a lower PSNR to their real samples than FMDS's: "
        f"{verdict}: mean over the syntheses, " + ("; ".join(said) or "no FMDS run") + f" (the paper, CIFAR-10 Dir "
        f"0.01: HFMDs {PAPER_PSNR['hfmds']}, FMDS {PAPER_PSNR['fmds']} dB; one seed has no spread: not resolved).",
        not_comparable("PSNR depends on the images: Fashion-MNIST here against CIFAR-10"),
    )


def convergence_claim(numbers: dict) -> Claim:
    """Fig. 5: FMDS and HFMDs converge faster than FedAvg from the first synthesis (round 20) on: the mean accuracy
    over rounds 20 to the last both reached (the area under the curve after the first synthesis), per seed, against
    FedAvg's over the same rounds (:func:`figures.verdict.direction`), per partition and method, combined."""
    words, said = [], []
    for part, name in PARTS.items():
        for arm in ("hfmds", "fmds"):
            seeds = sorted(s for (p, a, s) in numbers if p == part and a == arm and (part, "fedavg", s) in numbers)
            if not seeds:
                continue
            pairs = [(numbers[part, arm, s], numbers[part, "fedavg", s]) for s in seeds]
            last = min(min(m["rounds"], f["rounds"]) for m, f in pairs)
            ours = [window_mean(m["curve"], FIRST_POOL_ROUND, last) for m, _ in pairs]
            theirs = [window_mean(f["curve"], FIRST_POOL_ROUND, last) for _, f in pairs]
            word = direction(ours, theirs)
            words.append(word)
            said.append(
                f"{name}, {NAMES[arm]}, {seed_list(seeds)}: {points(ours)} % against FedAvg's {points(theirs)} % "
                f"over rounds {FIRST_POOL_ROUND}-{last}: {word}"
            )
    verdict = combine(words)
    return Claim(
        verdict,
        f"HFMDs' claim (Fig. 5) that FMDS and HFMDs converge faster than FedAvg from the first synthesis on: "
        f"{verdict}: mean accuracy from round {FIRST_POOL_ROUND} (the first with the pool) to the last both reached, "
        "paired by seed: " + "; ".join(said) + " (Fashion-MNIST, not CIFAR-10).",
    )


def plot(ctx: Build, numbers: dict) -> list[str]:
    fig, axes = plt.subplots(2, len(PARTS), figsize=(11, 6.4), sharex="col", squeeze=False)
    colours = {arm: f"C{i}" for i, arm in enumerate(ARMS)}
    styles = ("-", "--", ":")
    for column, (part, name) in enumerate(PARTS.items()):
        accuracy, share = axes[0, column], axes[1, column]
        labelled = set()
        for (p, arm, seed), v in sorted(numbers.items()):
            if p != part:
                continue
            label = None if arm in labelled else arm
            labelled.add(arm)
            style = {"color": colours[arm], "ls": styles[seed % len(styles)], "lw": 1.0, "label": label}
            if v["curve"]:
                rounds, values = zip(*v["curve"])
                accuracy.plot(rounds, 100 * np.array(values), **style)
            if v["pool_share_curve"]:
                rounds, values = zip(*v["pool_share_curve"])
                share.plot(rounds, values, marker=".", ms=3, **style)
        syntheses = sorted({t for (p, _, _), v in numbers.items() if p == part for t in v["synthesis_rounds"]})
        for ax in (accuracy, share):
            for t in syntheses or [FIRST_POOL_ROUND]:
                ax.axvline(t - 0.5, color="grey", lw=0.6)
        accuracy.set(title=f"FMNIST {name}", ylabel="test accuracy (%)")
        share.set(xlabel="round", ylabel="pool share of the mixed gradient", ylim=(0, 1))
        if not labelled:
            accuracy.text(0.5, 0.5, "no runs", ha="center", va="center", transform=accuracy.transAxes)
        for ax in (accuracy, share):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.suptitle("HFMDs / FMDS vs FedAvg on FMNIST (seed 0 solid, 1 dashed, 2 dotted; grey: syntheses)", fontsize=9)
    return save(ctx, fig, "hfmds_fmnist")


def build(ctx: Build) -> Built:
    runs = runs_root(ctx)
    numbers = collect(ctx, runs)
    if not numbers:
        raise InputError(f"no HFMDs runs under {runs}: bash {SCRIPT} [dir001|shards] 0 1 2 makes them")
    found_gains = gains(numbers)
    per_run = {f"{p}/{a}/seed{s}": v for (p, a, s), v in sorted(numbers.items())}
    paper = {part: {"setting": setting, **values} for part, (setting, values) in PAPER.items()}
    return Built(
        HEADERS,
        table_rows(numbers, found_gains),
        claim(found_gains),
        plot(ctx, numbers),
        {
            "runs_root": str(runs),
            "runs": per_run,
            "gains": found_gains,
            "paper": paper,
            "parts": {
                **{k: c.to_dict() for k, c in part_claims(found_gains).items()},
                "fmds": fmds_claim(numbers).to_dict(),
                "psnr": psnr_claim(numbers).to_dict(),
                "fig5": convergence_claim(numbers).to_dict(),
            },
        },
    )


ARTEFACT = Artefact(
    NAME,
    "HFMDs and FMDS against FedAvg on Fashion-MNIST (Dir 0.01 and 2-class shards), over seeds",
    {
        "paper": f"reads the runs of `bash {SCRIPT} dir001 0 1 2` and `... shards 0 1 2` in $SHUFFLEFL_RUNS/runs "
        "(20 clients, HFMDs CNN, 50 rounds, syntheses at rounds 20 and 40; FMDS for seed 0 only)",
    },
    build,
)
