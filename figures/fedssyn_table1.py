"""Fedssyn Table 1 at the paper's knobs (fedssyn_neurips.txt Sec. 4-5): rounds to a target accuracy m with D_i and
with D_i ∪ D̃_si, per FL algorithm and per column (N clients, participation C, Dirichlet α), and the speed-up at
every target, so that the choice of m is visible.

The grid is declared once: ``configs/paper/fedssyn_table1_fmnist.toml`` (ñ = n/N, 10 local epochs over D_i kept as
steps in the synthetic arm, batch 128, lr tuned from {0.01, 0.05, 0.1}, 100 rounds, 3 seeds) and the columns below;
``scripts/fedssyn-table1.sh`` runs it (hours on the CPU) and the ledger keeps the runs. The artefact runs nothing: a
column is reported once all its runs are finished in the store, and otherwise named as not measured with the
command that continues it.

The partition is the paper's: Fedssyn's code's Dirichlet split after FedDF (the paper's [25]; :func:`fl.data.partition.
dirichlet_fedssyn`: groups of 10 or 20 clients when N = 40 or 100, shares capped at a group's average, every client
n/N samples in the end). The five columns run before it was built used plain Dirichlet shares (``dirichlet``, every
client ≥ 10 samples, unequal sizes), which cannot split 3,000 images over 40 clients at α = 0.01 or over 100 clients;
they stay measured as the ``table1-plain`` artefact, so what the partition changes is visible.

The target rule, fixed before the runs (never tuned to them): the paper gives no rule for m; its FedAvg D_i arms
reach its m late in their 100 rounds (68 and 88 of 100 on CIFAR-10). Ours: m = 0.95 × FedAvg's D_i final accuracy
(each seed's mean over its last 5 rounds before any divergence, averaged over seeds), rounded down to a whole percent
(:func:`target_rule`). The synthetic arm plays no part in it. A run that never reaches m within the 100 rounds, a
run stopped by divergence included (its model is no number, it never will), counts as 101 rounds: a lower bound on
its rounds, so a speed-up over it is marked ≥ (:mod:`figures.verdict`).

Beside m, each column notes the best accuracy every arm reached (:func:`peak_note`): a synthetic arm that is faster
at low targets but peaks lower (its D̃_si a biased stand-in for D, Lemma 1's δ) reaches a high m late, which the
speed-up-against-target figure shows as a falling line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from figures.artefacts import Artefact, Build, Built, Claim
from figures.fedssyn_fl import QUALITY, SAVING_SCALES, TABLE_A2, millions, sets_sentence
from figures.flruns import (
    Arm,
    NotInStore,
    Protocol,
    Result,
    config_of,
    plt,
    progress,
    run_arms,
    run_folder,
    save,
    show,
)
from figures.scripted import points as percent
from figures.verdict import (
    CONTRADICTED,
    HELD,
    NOT_MEASURED,
    NOT_RESOLVED,
    bounded_size,
    censored_mark,
    combine,
    direction,
    not_comparable,
)
from fl.quality import sets_report_glob
from fl.sweep import mean_sd
from theory.output import read_object

CONFIG = "configs/paper/fedssyn_table1_fmnist.toml"
SEEDS = (0, 1, 2)
SUBSAMPLE = {"cpu": 3000, "paper": 0}
PAPER_ALGORITHMS = ("fedavg", "scaffold", "fedprox", "feddyn", "fedpvr")
ALGORITHMS = (*PAPER_ALGORITHMS, "fedavgm")  # FedAvgM is ours, not the paper's
TARGET_SHARE, LAST = 0.95, 5
LOWEST_TARGET = 0.5
SCRIPT = "bash scripts/fedssyn-table1.sh"
PAPER_PARTITION = "dirichlet-fedssyn"  # fl.data.partition.dirichlet_fedssyn: Fedssyn's code's (after FedDF)
PLAIN_PARTITION = "dirichlet"  # plain Dirichlet shares, every client >= data.min_size = 10 samples
DDPM_NOTE = (
    "the DDPM arm (the paper's generator) at N = 10: not measured: its sets (ñ = n/N images a client from DDPMs of "
    "≥ 2,000 steps) take a GPU lease; `python scripts/ddpm_sets.py --config "
    + "configs/paper/fedssyn_table1_fmnist.toml "
    "--set method.name=fedssyn --set method.generator=ddpm --set method.min_steps=2000 --set train.seed=S` makes "
    "them, then the script's synthetic arm with the same two --set"
)


@dataclass(frozen=True)
class Column:
    """One of the paper's eight columns: N clients, participation C, Dirichlet α; the paper's (CIFAR-10) m and,
    per algorithm, its rounds with synthetic data and speed-up ("> 25x": D_i never reached m in 100 rounds)."""

    clients: int
    participation: float
    alpha: float
    paper_m: float
    paper: dict[str, tuple[int, str]]
    unsplit: str = ""  # why the paper's partition cannot split the cpu scale's subsample (fl.run refused it)

    @property
    def title(self) -> str:
        return f"N = {self.clients}, C = {self.participation:g}, α = {self.alpha:g}"

    def overrides(self, subsample: int, partition: str = PAPER_PARTITION) -> tuple[str, ...]:
        n_tilde = (subsample or 60_000) // self.clients  # ñ = n / N
        return (f"data.subsample={subsample}", f"data.clients={self.clients}", f"data.alpha={self.alpha}",
                f"train.participation={self.participation}", f"method.n_tilde={n_tilde}",
                f"data.partition={partition}")  # fmt: skip


# fedssyn_neurips.txt Table 1, CIFAR-10 rows, in the script's column order
COLUMNS = {
    "a01": Column(10, 1.0, 0.1, 0.66, {"fedavg": (8, "8.5x"), "scaffold": (7, "6.1x"), "fedprox": (8, "5.3x"),
                                       "feddyn": (5, "14.8x"), "fedpvr": (7, "4.3x")}),
    "a001": Column(10, 1.0, 0.01, 0.44, {"fedavg": (4, "22x"), "scaffold": (4, "9.3x"), "fedprox": (4, "23.5x"),
                                         "feddyn": (3, "16.3x"), "fedpvr": (3, "19.3x")}),
    "c04_a01": Column(10, 0.4, 0.1, 0.66, {"fedavg": (8, "5.6x"), "scaffold": (10, "2.6x"), "fedprox": (9, "8.2x"),
                                           "feddyn": (7, "10.7x"), "fedpvr": (8, "9.5x")}),
    "c04_a001": Column(10, 0.4, 0.01, 0.44, {"fedavg": (4, "> 25x"), "scaffold": (5, "> 20x"),
                                             "fedprox": (4, "> 25x"), "feddyn": (4, "16.8x"), "fedpvr": (4, "> 25x")}),
    "n40_a01": Column(40, 0.2, 0.1, 0.66, {"fedavg": (21, "2.8x"), "scaffold": (20, "2.7x"), "fedprox": (15, "4.7x"),
                                           "feddyn": (12, "> 5.3x"), "fedpvr": (21, "2.8x")},
                          "fl.run refused its first run: no Fedssyn Dirichlet(0.1) draw in 1000 gave every one of a "
                          "group's 20 clients at least half of its 1500 samples' average (results/NOTEBOOK.md, "
                          "2026-11-29); the table1-plain row measures it on plain Dirichlet shares"),
    "n40_a001": Column(40, 0.2, 0.01, 0.44, {"fedavg": (12, "8.3x"), "scaffold": (12, "6.8x"),
                                             "fedprox": (9, "> 11.1x"), "feddyn": (7, "> 14.3x"),
                                             "fedpvr": (10, "8.5x")}),
    "n100_a01": Column(100, 0.1, 0.1, 0.66, {"fedavg": (38, "> 2.6x"), "scaffold": (31, "2.7x"),
                                             "fedprox": (37, "> 2.7x"), "feddyn": (31, "> 3.2x"),
                                             "fedpvr": (35, "> 2.9x")}),
    "n100_a001": Column(100, 0.1, 0.01, 0.44, {"fedavg": (19, "4.9x"), "scaffold": (19, "> 5.3x"),
                                               "fedprox": (31, "> 3.2x"), "feddyn": (17, "> 5.9x"),
                                               "fedpvr": (21, "> 4.8x")}),
}  # fmt: skip
PLAIN = ("a01", "a001", "c04_a01", "c04_a001", "n40_a01")  # the columns also measured on PLAIN_PARTITION
PARTITIONS = {PAPER_PARTITION: tuple(COLUMNS), PLAIN_PARTITION: PLAIN}  # what the script runs, per --partition

# --- the numbers, from accuracy curves alone ----------------------------------------------------------------------


QUALITY_NUMBERS = ("noise_fraction", "label_agreement", "synthetic_trained_accuracy", "real_trained_accuracy")
BUDGET = 100  # the protocol's rounds (train.rounds of CONFIG)


def curve(rows: Sequence[dict]) -> list[tuple[int, float]]:
    """(round, test accuracy) of a run's metrics rows, the rounds with an evaluation; a diverged round (its model
    no number: fl.run stops there) is none."""
    return [(r["round"], r["test_accuracy"]) for r in rows
            if r.get("test_accuracy") is not None and not r.get("diverged")]  # fmt: skip


def diverged(rows: Sequence[dict]) -> bool:
    return any(r.get("diverged") for r in rows)


def target_rule(fedavg_real: Sequence[Sequence[dict]]) -> float:
    """m of a column from its FedAvg D_i runs' rows alone: 0.95 × the mean over seeds of each seed's mean test
    accuracy over its last 5 evaluated rounds before any divergence, rounded down to a whole percent (the module
    docstring says why)."""
    finals = [np.mean([a for _, a in curve(rows)[-LAST:]]) for rows in fedavg_real]
    return math.floor(100 * TARGET_SHARE * float(np.mean(finals)) + 1e-9) / 100


def rounds_to(rows: Sequence[dict], target: float, budget: int = BUDGET) -> tuple[int, bool]:
    """(the first round at or above ``target``, False) or, never reached within ``budget`` rounds (a diverged run
    stops before it), (``budget`` + 1, True): a lower bound on the rounds it needs."""
    reached = next((t for t, a in curve(rows) if a >= target - 1e-12), None)
    return (reached, False) if reached is not None else (budget + 1, True)


@dataclass(frozen=True)
class Speedup:
    """At one target: per seed the rounds without and with synthetic data (censored: never reached, last round
    + 1), the per-seed speed-ups (without / with, seeds paired: one partition each) and the bound mark."""

    target: float
    without: list[int]
    with_: list[int]
    ratios: list[float]
    mark: str
    censored: tuple[bool, bool] = (False, False)  # whether a D_i run, a synthetic run never reached the target

    @property
    def mean_sd(self) -> tuple[float, float]:
        return mean_sd(self.ratios)


def speedup(without: Sequence[Sequence[dict]], with_: Sequence[Sequence[dict]], target: float) -> Speedup:
    """Rounds to ``target`` per seed in both arms and their ratios; the mark "≥ " where a D_i run never reached it
    (its count, and so the speed-up, is a lower bound), "≤ " where a synthetic run never did, "? " both."""
    a = [rounds_to(rows, target) for rows in without]
    b = [rounds_to(rows, target) for rows in with_]
    censored = (any(c for _, c in a), any(c for _, c in b))
    ratios = [x / y for (x, _), (y, _) in zip(a, b)]
    return Speedup(target, [r for r, _ in a], [r for r, _ in b], ratios, censored_mark(*censored), censored)


def reached_by_all(runs: Sequence[Sequence[dict]]) -> float:
    """The highest test accuracy every run reached (the smallest of their best accuracies)."""
    return min(max((a for _, a in curve(rows)), default=0.0) for rows in runs)


def peak(rows: Sequence[dict]) -> float | None:
    """The best test accuracy a run reached in its rounds (before any divergence); None with no evaluated round."""
    return max((a for _, a in curve(rows)), default=None)


PEAK_WORDS = {HELD: "higher", CONTRADICTED: "lower", NOT_RESOLVED: "within the seed spread",
              NOT_MEASURED: "not measured"}  # fmt: skip


def peak_note(name: str, m: float, pairs: dict[str, tuple[Result, Result]]) -> tuple[dict, str]:
    """Where m lies against what each arm can reach: per algorithm, each run's peak test accuracy (:func:`peak`) in
    both arms, their means over seeds and the change with synthetic data by the one rule
    (:func:`figures.verdict.direction` on the per-seed peaks: higher / lower beyond the seed spread, else within
    it). A synthetic arm whose peak lies lower reaches a high m late even where it is faster at lower targets."""
    peaks = {a: ([peak(r) for r in w.rows], [peak(r) for r in s.rows]) for a, (w, s) in pairs.items()}
    said = [
        f"{a} {percent(without, 1)} → {percent(with_, 1)} % ({PEAK_WORDS[direction(with_, without)]})"
        for a, (without, with_) in peaks.items()
    ]
    return peaks, (
        f"{name}: the best test accuracy a run reached in its {BUDGET} rounds, D_i → D_i ∪ D̃_si (mean ± sd over "
        f"seeds; the change by the seed-spread rule), against m = {m:.0%}: " + "; ".join(said) + "."
    )


def targets(without: Sequence[Sequence[dict]], with_: Sequence[Sequence[dict]]) -> list[float]:
    """Whole-percent targets from 50 % to the highest that every run of both arms reached (none censored)."""
    top = math.floor(100 * reached_by_all([*without, *with_]) + 1e-9)
    return [k / 100 for k in range(round(100 * LOWEST_TARGET), top + 1)]


# --- the artefact -------------------------------------------------------------------------------------------------


def arms(name: str, subsample: int, partition: str = PAPER_PARTITION) -> list[Arm]:
    """Column ``name``'s arms: per algorithm the D_i arm and the D_i ∪ D̃_si arm, in :data:`ALGORITHMS` order."""
    common = COLUMNS[name].overrides(subsample, partition)
    return [Arm(f"{name} {algorithm}: {label}", (*common, f"algorithm.name={algorithm}", f"method.name={method}"))
            for algorithm in ALGORITHMS for label, method in (("D_i", "none"), ("D_i ∪ D̃_si", "fedssyn"))]  # fmt: skip


def column_state(protocol: Protocol, column_arms: Sequence[Arm], base: Path) -> tuple[int, int, list[int]]:
    """(finished runs, runs, rounds reached by each unfinished run that started) of a column in the run store
    ``base``."""
    states = [progress(c, run_folder(c, base)) for arm in column_arms for seed in protocol.seeds
              for c in [config_of(protocol, arm, seed, base)]]  # fmt: skip
    done = sum(s["state"] == "done" for s in states)
    return done, len(states), [s["round"] for s in states if s["state"] == "partial"]


def sets_quality(ctx: Build, protocol: Protocol, column_arms: Sequence[Arm]) -> tuple[list[dict], dict[int, Path]]:
    """The quality reports (``python -m fl.quality --run``) of the β-VAE sets a column's synthetic arms dealt, one per
    seed, found in the store's ``quality/`` by the sets' digest (every algorithm's arm of a seed deals the same
    sets, :func:`fl.quality.report_name`); and, per seed without one, the run folder whose sets would be measured."""
    found, missing = [], {}
    for seed in protocol.seeds:
        folders = [run_folder(config_of(protocol, arm, seed, ctx.store), ctx.store) for arm in column_arms
                   if "method.name=fedssyn" in arm.overrides]  # fmt: skip
        digests = {read_object(f / "provenance.json", "provenance.json of a run").get("synthetic_sha256")
                   for f in folders}  # fmt: skip
        reports = [path for digest in sorted(map(str, digests))
                   for path in sorted((ctx.store / QUALITY).glob(sets_report_glob(digest)))]  # fmt: skip
        if reports:
            found.append(read_object(reports[0], "a quality report"))
        else:
            missing[seed] = folders[0]
    return found, missing


def quality_note(name: str, reports: Sequence[dict], missing: dict[int, Path]) -> str:
    """A column's note on its β-VAE sets' quality (:func:`sets_quality`), and the command that measures the rest."""
    runs = ", ".join(f"`{folder}`" for folder in missing.values())
    measure = ("`python -m fl.quality --run RUN --out Q.json && python -m figures ledger add Q.json` for RUN = "
               f"{runs} (where the generator cache is)")  # fmt: skip
    if not reports:
        return f"{name}: its β-VAE sets' quality: not measured: {measure}."
    seeds = ", ".join(map(str, missing))
    return f"{name}: {sets_sentence('its β-VAE sets', reports)}" + (
        f" Seed {seeds}: not measured: {measure}." if missing else ""
    )


def quality_by_clients(qualities: dict[str, Sequence[dict]]) -> Claim:
    """The paper's reason for its small speed-ups at N = 100 (fedssyn_neurips.txt Sec. 5): a generator's quality
    drops when a client trains it on fewer images. Per α, the label agreement (:mod:`fl.quality`) of the β-VAE sets of
    the measured column with the fewest clients against the one with the most (:func:`figures.verdict.direction` on
    the per-seed values: held where fewer clients, more images each, give the larger agreement), combined over α;
    ``qualities``: each measured column's reports, one per seed."""
    verdicts, said = [], []
    for alpha in sorted({c.alpha for c in COLUMNS.values()}):
        measured = sorted((COLUMNS[n].clients, n) for n, reports in qualities.items()
                          if reports and COLUMNS[n].alpha == alpha)  # fmt: skip
        if len({clients for clients, _ in measured}) < 2:
            continue
        (few, a), (many, b) = measured[0], measured[-1]
        agreement = {n: [r["label_agreement"] for r in qualities[n]] for n in (a, b)}
        verdicts.append(direction(agreement[a], agreement[b]))
        said.append(f"α = {alpha:g}: {verdicts[-1]}, label agreement {percent(agreement[a])} % at N = {few} ({a}) "
                    f"against {percent(agreement[b])} % at N = {many} ({b})")  # fmt: skip
    if not verdicts:
        return Claim(NOT_MEASURED, "no α has the sets' quality of two measured columns of different N")
    verdict = combine(verdicts)
    return Claim(verdict, f"the β-VAE sets' quality against the clients' number: {verdict}: " + "; ".join(said))


def sent_to(rows: Sequence[dict], target: float) -> tuple[float, bool]:
    """(the numbers a run sent until the round it first reached ``target`` (its rows' running ``communication``),
    False) or, never reached, (what it sent a round times :data:`BUDGET` + 1, True): a lower bound."""
    reached, never = rounds_to(rows, target)
    if not never:
        return float(next(r["communication"] for r in rows if r["round"] == reached)), False
    last = rows[-1] if rows else {"communication": math.nan, "round": 1}
    return last["communication"] / last["round"] * reached, True


def communication_claim(name: str, column: Column, pairs: dict[str, tuple[Result, Result]], m: float) -> Claim:
    """The revised paper's Table A.2 in one column: counting the synthetic set sent once, FedAvg with shuffled
    synthetic data sends fewer numbers to reach m than FedAvg alone (:func:`figures.verdict.direction` on the numbers
    sent per seed; a D_i run that never reached m sent a lower bound, so an opposite verdict over it is not
    resolved); the saving beside the paper's, whose size is not comparable
    (:data:`figures.fedssyn_fl.SAVING_SCALES`)."""
    without, with_ = pairs["fedavg"]
    alone, shuffled = ([sent_to(rows, m) for rows in result.rows] for result in (without, with_))
    synthetic = [float(s.get("synthetic_numbers_sent_once") or 0) for s in with_.summaries]
    base, ours = [v for v, _ in alone], [v + once for (v, _), once in zip(shuffled, synthetic)]
    lower, upper = any(c for _, c in alone), any(c for _, c in shuffled)  # the saving's bounds: ≥ / ≤
    word = direction(base, ours)
    if word == CONTRADICTED and lower:
        word = NOT_RESOLVED
    saving = [100 * (1 - o / b) for o, b in zip(ours, base)]
    mark = censored_mark(lower, upper)
    size = f"{mark}{mean_sd(saving)[0]:.1f} % against the paper's {TABLE_A2[name]} % (CIFAR-10): {SAVING_SCALES}"
    return Claim(
        word,
        f"{name} ({column.title}), m = {m:.0%}: {word}: FedAvg sends {millions(base)} numbers to m alone and "
        f"{millions(ours)} with D_i ∪ D̃_si ({mean_sd(synthetic)[0] / 1e6:.2f} million of them the synthetic set), a "
        f"saving of {mark}{show(saving)} %",
        not_comparable(size),
    )


def column_claim(name: str, column: Column, pairs: dict[str, tuple[Result, Result]], m: float) -> tuple[dict, Claim]:
    """The column's numbers at m and its verdict: per paper algorithm, fewer rounds with synthetic data beyond the
    seed spread (:func:`figures.verdict.direction` on the rounds, combined); the size, per algorithm, our mean
    speed-up against the paper's same column (CIFAR-10, another data set; a ">" of the paper is its lower end)."""
    at = {a: speedup(w.rows, s.rows, m) for a, (w, s) in pairs.items()}
    per = {a: direction(at[a].without, at[a].with_) for a in PAPER_ALGORITHMS if a in at}
    words = {}
    for a in per:
        paper = float(column.paper[a][1].lstrip("> ").rstrip("x"))
        low = column.paper[a][1].startswith(">")
        mean, sd = at[a].mean_sd
        words[a] = bounded_size(mean, sd, (paper, math.inf) if low else paper, at[a].mark)
    verdict = combine(per.values())
    unresolved = [a for a, v in per.items() if v != HELD]
    shown = ", ".join(f"{a} {at[a].mark}{at[a].mean_sd[0]:.2f}x" for a in at)
    text = (
        f"{name} ({column.title}), m = {m:.0%}: {verdict}: fewer rounds beyond the seed spread for "
        f"{len(per) - len(unresolved)} of {len(per)} of the paper's algorithms"
        + (f" (not for {', '.join(unresolved)})" if unresolved else "")
        + f"; mean speed-ups {shown}"
    )
    distinct = set(words.values())
    size = distinct.pop() if len(distinct) == 1 else "; ".join(f"{a}: {w}" for a, w in words.items())
    return {"verdicts": per, "sizes": words, "speedups": {a: at[a].mean_sd for a in at}}, Claim(verdict, text, size)


def build(ctx: Build) -> Built | None:
    return build_grid(ctx, "table1-grid", PAPER_PARTITION)


def build_plain(ctx: Build) -> Built | None:
    return build_grid(ctx, "table1-plain", PLAIN_PARTITION)


def build_grid(ctx: Build, artefact: str, partition: str) -> Built | None:
    """The Table 1 block of the columns :data:`PARTITIONS` lists for ``partition``."""
    scale, subsample = ctx.scale, SUBSAMPLE[ctx.scale]
    protocol = Protocol(CONFIG, (), SEEDS)
    names = PARTITIONS[partition]
    script = SCRIPT if partition == PAPER_PARTITION else f"{SCRIPT} --partition {partition}"
    if ctx.plan is not None:  # python -m figures status: every run of the grid recorded, nothing to build
        run_arms(ctx, artefact, protocol, [arm for name in names for arm in arms(name, subsample, partition)])
        return None
    rows, claims, notes, numbers, curves, parts, qualities = [], [], [], {}, {}, {}, {}
    for name in names:
        column = COLUMNS[name]
        column_arms = arms(name, subsample, partition)
        done, total, partial = column_state(protocol, column_arms, ctx.store)
        if done < total and column.unsplit and partition == PAPER_PARTITION and scale == "cpu":
            notes.append(f"{name} ({column.title}): {NOT_MEASURED}: the paper's partition cannot split "
                         f"{subsample:,} images this way: {column.unsplit}")  # fmt: skip
            parts[name] = parts[f"{name}-communication"] = Claim(NOT_MEASURED, notes[-1]).to_dict()
            continue
        if done < total:
            reached = f"; the started ones at rounds {min(partial)}-{max(partial)} of 100" if partial else ""
            notes.append(f"{name} ({column.title}): {NOT_MEASURED}: {done} of {total} runs finished among those "
                         f"read (REPORT: the ledger){reached}; `{script} {name}` continues it")  # fmt: skip
            parts[name] = parts[f"{name}-communication"] = Claim(NOT_MEASURED, notes[-1]).to_dict()
            continue
        results = run_arms(ctx, f"{artefact} {name}", protocol, column_arms)
        assert results is not None  # not planning
        pairs = {a: (results[2 * k], results[2 * k + 1]) for k, a in enumerate(ALGORITHMS)}
        m = target_rule(pairs["fedavg"][0].rows)
        numbers[name], claim = column_claim(name, column, pairs, m)
        numbers[name]["m"] = m
        parts[f"{name}-communication"] = communication_claim(name, column, pairs, m).to_dict()
        reports, missing = sets_quality(ctx, protocol, column_arms)
        qualities[name] = reports
        numbers[name]["sets_quality"] = {r["seed"]: {k: r[k] for k in QUALITY_NUMBERS} for r in reports}
        notes.append(quality_note(name, reports, missing))
        numbers[name]["peaks"], said = peak_note(name, m, pairs)
        notes.append(said)
        claims.append(claim)
        parts[name] = claim.to_dict()
        curves[name] = (m, column.paper_m, {a: [speedup(w.rows, s.rows, t) for t in targets(w.rows, s.rows)]
                                            for a, (w, s) in pairs.items()})  # fmt: skip
        for a, (without, with_) in pairs.items():
            at = speedup(without.rows, with_.rows, m)
            mean, sd = at.mean_sd
            w_mark, s_mark = (censored_mark(c, False) for c in at.censored)  # "≥ ": a run never reached m
            paper = column.paper.get(a)
            rows.append([
                name, a + ("" if a in PAPER_ALGORITHMS else " (ours)"), f"{m:.0%}",
                f"{w_mark}{np.mean(at.without):.1f} → {s_mark}{np.mean(at.with_):.1f}",
                f"{at.mark}{mean:.2f} ± {sd:.2f}x",
                numbers[name]["verdicts"].get(a, "-"), numbers[name]["sizes"].get(a, "-"),
                f"{sum(map(diverged, without.rows))} / {sum(map(diverged, with_.rows))}",
                f"{paper[0]} ({paper[1]}), m = {column.paper_m:.0%}" if paper else "-",
            ])  # fmt: skip
    parts["generator-quality"] = quality_by_clients(qualities).to_dict()
    notes.append(DDPM_NOTE)
    if not claims:
        raise NotInStore("no column of the grid is finished in the store: " + "; ".join(notes))
    verdict = combine(c.verdict for c in claims)
    claim = Claim(
        verdict,
        f"Table 1's claim that shuffled synthetic data cut the rounds to m for every algorithm, at the paper's knobs "
        f"({scale} scale, partition {partition}): {verdict} over {len(claims)} of {len(names)} columns. "
        + " ".join(f"{c.text}." for c in claims),
        "; ".join(f"{n}: {c.size}" for n, c in zip(numbers, claims)) + " (against the paper's CIFAR-10 columns)",
    )  # fmt: skip
    return Built(
        ["column", "algorithm", "m", "rounds D_i → D_i ∪ D̃_si (mean of 3 seeds)", "speed-up (per-seed mean ± sd)",
         "fewer rounds", "size against the paper", "diverged runs D_i / D_i ∪ D̃_si",
         "paper (CIFAR-10): rounds with D̃ (speed-up), m"],
        rows,
        claim,
        figure(ctx, curves, partition),
        {"columns": numbers, "parts": parts, "seeds": list(SEEDS), "subsample": subsample,
         "target_rule": f"{TARGET_SHARE} x FedAvg D_i's mean of its last {LAST} rounds, floored to a whole percent",
         "partition": partition},
        tuple(notes),
    )  # fmt: skip


def figure(ctx: Build, curves: dict, partition: str) -> list[str]:
    """Speed-up against target, one panel per measured column, one line per algorithm; our m and the paper's
    (CIFAR-10) marked."""
    fig, axes = plt.subplots(1, len(curves), figsize=(max(7.0, 4.2 * len(curves)), 3.8), squeeze=False)
    for ax, (name, (m, paper_m, per)) in zip(axes[0], curves.items()):
        for algorithm, points in per.items():  # an algorithm whose runs never all reached 50 %: no line, named
            algorithm = algorithm if points else f"{algorithm} (a run below 50 %)"
            ax.plot([100 * p.target for p in points], [p.mean_sd[0] for p in points], marker=".", label=algorithm)
        ax.axvline(100 * m, color="k", ls="--", lw=0.8, label=f"our m = {m:.0%}")
        ax.axvline(100 * paper_m, color="0.6", ls=":", lw=0.8, label=f"paper's m = {paper_m:.0%} (CIFAR-10)")
        ax.set(xlabel="target test accuracy (%)", ylabel="speed-up (rounds D_i / D_i ∪ D̃_si)", title=name)
        ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"Fedssyn Table 1 at the paper's knobs ({ctx.scale}, partition {partition}): speed-up against "
                 "target, mean of 3 seeds", fontsize=9)  # fmt: skip
    return save(ctx, fig, "speedup_vs_target")


ARTEFACT = Artefact(
    "table1-grid",
    "Fedssyn Table 1 at the paper's knobs: rounds to m with and without shuffled synthetic data, six algorithms, "
    "the paper's columns, and the speed-up at every target",
    {
        "cpu": f"{CONFIG} on a subsample of {SUBSAMPLE['cpu']:,} Fashion-MNIST images (5 %; 2,000 test images), "
        "β-VAE generators, the FedCOG CNN, 3 seeds; every other knob the paper's, its partition included "
        f"({PAPER_PARTITION})",
        "paper": f"{CONFIG} on all 60,000 Fashion-MNIST images (a GPU), β-VAE generators, 3 seeds, partition "
        f"{PAPER_PARTITION}",
    },
    build,
)
PLAIN_ARTEFACT = Artefact(
    "table1-plain",
    "Fedssyn Table 1 at the paper's knobs but plain Dirichlet shares (every client ≥ 10 samples, unequal sizes) "
    "instead of the paper's partition: the five columns that partition can split, run before the paper's partition "
    "was built",
    {
        "cpu": f"{CONFIG} on a subsample of {SUBSAMPLE['cpu']:,} Fashion-MNIST images (5 %; 2,000 test images), "
        f"partition {PLAIN_PARTITION} (min_size 10), β-VAE generators, the FedCOG CNN, 3 seeds",
    },
    build_plain,
)
