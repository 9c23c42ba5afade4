"""``python -m sims.quadratic``: reproduce Fedssyn Fig. 2 (a)(b)(c) on the least-squares problem, and measure.

Writes fig2.png, summary.json and CSVs of every curve into --out (default results/quadratic/) and prints a table:
p, L_p, measured ζ*² ratio, (1-p)², fitted A_p/A_0, theory ratio (1-p)√(1-p+p·L_avg/L_max), κ, rounds to ε.

Before any work it refuses, in one line: an --out that is not empty and not its own output (unless --overwrite,
which writes beside the files there; never where one has a name it writes, nor another tool's folder), a
request that needs more memory than is free (experiment.memory_needed) or whose loop would run for days
(experiment.loop_steps), a seed outside [0, 2^32-1] and a non-finite number; a problem on which p can have no
effect or whose numbers overflow (Config.check_meaningful), --tau with the epoch solver, a ζ² whose starting error
is already below ε or too large for float64 to resolve ε (experiment.check_scale), and a run estimated over an
hour (experiment.seconds_needed) without --yes. A run estimated over a minute says so and shows its progress on
stderr (--quiet: neither). A run whose results come out non-finite or empty (ε not reached within the rounds, no
fit of A_p, the same rounds at every p) fails in one line and writes nothing (experiment.check_results).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from sims.limits import announce, check_steps, check_time, progress_bar
from sims.output import drop_own, kept_only_if_written, output_folder
from sims.quadratic.experiment import (
    AUTHORS_DIAGNOSTICS,
    LOCAL_SOLVERS,
    PRESETS,
    Config,
    check_results,
    check_scale,
    config_dict,
    loop_steps,
    memory_needed,
    quick,
    run_panel_a,
    run_panels_bcd,
    seconds_needed,
)
from sims.quadratic.fit import corollary_claims, fit_errors
from sims.quadratic.problem import MEAN_SCALES
from theory.cli import ArgumentParser, check_memory, finite_float, format_table, guarded, seed_arg
from theory.errors import InputError
from theory.output import to_json, write_csv, write_text_atomically

TOOL = "sims.quadratic"
OUTPUTS = ("summary.json", "table.csv", "panel_a.csv", "panel_b.csv", "rounds.csv", "fig2.png", "fig2.pdf")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m sims.quadratic",
        description="Reproduce Fedssyn Fig. 2 (least squares, FedAvg, shuffled fraction p) and report the measured "
        "scaling of rounds with p next to Corollary I's bound.",
    )
    add = parser.add_argument
    add(
        "--preset",
        choices=sorted(PRESETS),
        default="default",
        help="default: full-batch local steps (closed form); paper: the authors' setting (one epoch of "
        "single-sample SGD, 41 p x 31 step sizes x 800 rounds)",
    )
    add("--quick", action="store_true", help="a reduced grid that runs in a few seconds")
    add("--out", type=Path, default=Path("results/quadratic"), help="output folder (default results/quadratic)")
    add(
        "--overwrite", action="store_true",
        help="write into a non-empty --out that sims.quadratic did not make, beside the files there "
        "(one holding a file of a name it writes is refused even so: it never replaces a file it did not write)",
    )  # fmt: skip
    add("--no-plot", action="store_true", help="skip fig2.png")
    add("--seed", type=seed_arg, help="base seed (0 to 2^32-1): every curve is repeatable from it")
    add("--seeds", type=int, help="problem draws and shuffles averaged")
    add("--clients", type=int, dest="n_clients", help="number of clients N (paper: 10)")
    add("--n", type=int, dest="n_per_client", help="samples per client n_i (paper: 100)")
    add("--d", type=int, dest="dim", help="dimension d (paper: 25)")
    add("--zeta2", type=finite_float, help="dissimilarity scale ζ²")
    add("--mean-scale", choices=MEAN_SCALES, help="variance convention of μ_i (see sims.quadratic.problem)")
    add("--local", choices=LOCAL_SOLVERS, help="local solver of panels (b)-(d)")
    add("--tau", type=int, help="local steps τ (full-batch and mini-batch solvers)")
    add("--sigma2", type=finite_float, nargs="+", dest="sigma2_levels", help="panel (a) noise levels σ²")
    add("--p-a", type=finite_float, nargs="+", help="panel (a) shuffled fractions")
    add("--eta-a", type=finite_float, help="panel (a) fixed step size")
    add("--rounds-a", type=int, help="panel (a) rounds")
    add("--batch-size", type=int, help="panel (a) mini-batch size when σ² > 0")
    add("--p", type=finite_float, nargs="+", dest="p_grid", help="panels (b)-(d) shuffled fractions (must include 0)")
    add("--etas", type=finite_float, nargs="+", help="step-size grid tuned per p")
    add("--rounds", type=int, help="rounds of panels (b)-(d)")
    add("--eps", type=finite_float, dest="eps_target", help="target accuracy of panel (b) (paper: 1.1e-6)")
    add("--eps-grid", type=finite_float, nargs="+", help="ε values used to fit R_p = A_p/√ε + B_p (>= 6 advised)")
    add("--reach", choices=("first", "stay"), help="rounds to reach eps: first hit, or stays below from then on")
    add("--n-boot", type=int, help="bootstrap resamples")
    add("--yes", action="store_true", help="run even when the estimate is over an hour (else refused before it starts)")
    add("--quiet", action="store_true", help="no progress bar and no estimate line on stderr")
    return parser


def resolve_config(args) -> Config:
    config = PRESETS[args.preset]
    if args.quick:  # recorded as what it is: never as the preset itself (a quick "paper" run is no paper run)
        config = replace(quick(config), preset=f"{config.preset}-quick")
    overrides = {
        name: getattr(args, name)
        for name in Config.__dataclass_fields__
        if getattr(args, name, None) is not None and name not in ("preset", "extra")
    }
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    config = replace(config, **overrides).validate()
    if args.tau is not None and config.local == "epoch":  # else summary.json would record a τ that never ran
        raise InputError(
            "--tau sets the full-batch and mini-batch solvers' local steps; the epoch solver (--local epoch, "
            "--preset paper) takes one local epoch, tau = n: drop --tau"
        )
    return config


def verdict(panels: dict, quick_grid: bool = False) -> dict:
    """Fig. 2c's two claims (Corollary I's bound, the paper's "matches") in REPORT's words
    (:func:`sims.quadratic.fit.corollary_claims`), and which law the fitted A_p/A_0 follows for 0 < p <= 0.6.
    ``quick_grid`` (``--quick``): the fit's numbers only, no verdict on the paper's claims (its grid of p, step sizes
    and rounds is too coarse to give one)."""
    p = panels["p"]
    errors = fit_errors(p, panels["A_ratio"], panels["theory_ratio"])
    if errors is None:
        return {"note": "no p in (0, 0.6] with a finite fitted ratio"}
    rms_theory, rms_square = errors
    if quick_grid:
        return {
            "log_rms_theory_ratio": rms_theory,
            "log_rms_one_minus_p_squared": rms_square,
            "note": f"a quick grid (--quick: {len(p)} values of p, fewer step sizes and rounds): no verdict on the "
            "paper's claims; run without --quick for one",
        }
    claims = corollary_claims(
        p, panels["A_ratio"], panels["theory_ratio"], panels["A_ratio_ci"], panels["zeta_star_theory_ratio"]
    )
    closer = "(1-p)^2" if rms_square < rms_theory else "theory ratio (1-p)sqrt(1-p+p L_avg/L_max)"
    text = (
        f"{claims['bound'][1]}. {claims['shape'][1]}. {claims['zeta_star'][1]}. "
        f"Fitted exponent kappa = {panels['kappa_small_p']:.2f} "
        f"(theory ratio: kappa between 1 and 1.5; (1-p)^2: kappa = 2)."
    )
    return {
        "closer_to": closer,
        "log_rms_theory_ratio": rms_theory,
        "log_rms_one_minus_p_squared": rms_square,
        "bound": claims["bound"][0],
        "shape": claims["shape"][0],
        "zeta_star": claims["zeta_star"][0],
        "text": text,
    }


def write_outputs(
    out: Path, config: Config, panel_a: dict, panels: dict, table_rows, verdict_: dict, timings: dict
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    p = panels["p"]
    summary = {
        "config": config_dict(config),
        "p": p,
        "L_p": panels["L_p"],
        "L_max": panels["L_max"],
        "L_avg": panels["L_avg"],
        "zeta2_star": panels["zeta2_star"],
        "zeta2_star_ratio": panels["zeta2_star_ratio"],
        "one_minus_p_squared": (1 - p) ** 2,
        "sigma2_star": panels["sigma2_star"],
        "A": panels["A"],
        "B": panels["B"],
        "A_ratio": panels["A_ratio"],
        "A_ratio_ci95": panels["A_ratio_ci"],
        "theory_ratio": panels["theory_ratio"],
        "zeta_star_theory_ratio": panels["zeta_star_theory_ratio"],
        "kappa": panels["kappa"],
        "kappa_all": panels["kappa_all"],
        "kappa_p_le_0.6": panels["kappa_small_p"],
        "rounds_to_eps": panels["target_rounds"].mean(axis=0),
        "rounds_to_eps_per_seed": panels["target_rounds"],
        "best_eta_per_seed": panels["best_eta"],
        "diverged_step_fraction": panels["diverged_fraction"],
        "eps_target": panels["eps_target"],
        "eps_grid": panels["eps_grid"],
        "authors_diagnostics": {
            str(k): dict(zip(("zeta2_star", "sigma2_star", "L_max"), v)) for k, v in AUTHORS_DIAGNOSTICS.items()
        },
        "verdict": verdict_,
        "quick": config.preset.endswith("-quick"),  # a reduced grid: the ledger never takes it for a cpu or paper run
        "seconds": timings,
    }
    summary = to_json(summary)
    write_text_atomically(out / "summary.json", json.dumps(summary, indent=2))
    write_csv(out / "table.csv", TABLE_HEADERS, table_rows)
    rounds_a = panel_a["errors"].shape[-1]
    write_csv(
        out / "panel_a.csv",
        ["sigma2", "p", "round", "error"],
        (  # generators, here and below: a row is written as it is made, never a list of millions of tuples
            (s, q, t, panel_a["errors"][i, j, t])
            for i, s in enumerate(panel_a["sigma2"])
            for j, q in enumerate(panel_a["p"])
            for t in range(rounds_a)
        ),
    )
    curves = panels["best_curves"].mean(axis=0)
    last = int(np.nanmax(np.where(np.isfinite(panels["target_rounds"]), panels["target_rounds"], 0))) + 1
    length = min(curves.shape[-1], max(2 * last, 50))
    write_csv(
        out / "panel_b.csv",
        ["p", "round", "error"],
        ((q, t, curves[j, t]) for j, q in enumerate(p) for t in range(length)),
    )
    rounds = panels["rounds"]
    eps_all = np.concatenate([[panels["eps_target"]], panels["eps_grid"]])
    write_csv(
        out / "rounds.csv",
        ["p", "seed", "eps", "rounds", "used_in_fit"],
        (
            (q, s, e, rounds[s, j, k], int(k > 0))
            for s in range(rounds.shape[0])
            for j, q in enumerate(p)
            for k, e in enumerate(eps_all)
        ),
    )
    return summary


TABLE_HEADERS = ["p", "L_p", "zeta2*_ratio", "(1-p)^2", "A_p/A_0", "A 95% CI", "theory_ratio", "kappa", "rounds_to_eps"]


def table_rows(panels: dict) -> list[list]:
    ci = panels["A_ratio_ci"]
    rows = []
    for j, q in enumerate(panels["p"]):
        interval = "-" if ci is None else f"[{ci[0][j]:.3g}, {ci[1][j]:.3g}]"
        rows.append(
            [
                q,
                panels["L_p"][j],
                panels["zeta2_star_ratio"][j],
                (1 - q) ** 2,
                panels["A_ratio"][j],
                interval,
                panels["theory_ratio"][j],
                panels["kappa"][j] if np.isfinite(panels["kappa"][j]) else "-",  # undefined at p = 0 and p = 1
                float(np.mean(panels["target_rounds"][:, j])),
            ]
        )
    return rows


@guarded(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = resolve_config(args)
    check_memory(
        memory_needed(config),
        f"sims.quadratic with N={config.n_clients}, n={config.n_per_client}, d={config.dim}, {config.seeds} seed(s), "
        f"{len(config.p_grid)} x {len(config.etas)} (p, step size) pairs and {config.rounds} rounds",
    )
    check_steps(loop_steps(config), "sims.quadratic with these sizes")
    check_scale(config)
    seconds = seconds_needed(config)
    check_time(seconds, "sims.quadratic with these sizes", args.yes)
    timings = {}
    with kept_only_if_written(args.out):
        output_folder(args.out, TOOL, args.overwrite, OUTPUTS, ("config", "p", "A_ratio", "zeta2_star_ratio"))
        announce(TOOL, seconds, args.quiet)
        steps_a = config.rounds_a * len(config.sigma2_levels)
        steps_b = config.rounds * config.seeds if config.local == "epoch" else config.seeds
        with progress_bar(steps_a, "panel (a)", seconds, args.quiet, unit="round") as bar:
            start = time.perf_counter()
            panel_a = run_panel_a(config, progress=bar.update)
            timings["panel_a"] = time.perf_counter() - start
        with progress_bar(steps_b, "panels (b)-(d)", seconds, args.quiet) as bar:
            start = time.perf_counter()
            panels = run_panels_bcd(config, progress=bar.update)
            timings["panels_bcd"] = time.perf_counter() - start
        check_results(config, panels)  # nothing non-finite is printed or written as a result
    rows = table_rows(panels)
    verdict_ = verdict(panels, args.quick)
    summary = write_outputs(args.out, config, panel_a, panels, rows, verdict_, timings)
    if args.no_plot:
        drop_own(args.out, ("fig2.png", "fig2.pdf"))  # an earlier run's figure does not show these results
    else:
        from plots.quadratic import plot_fig2

        plot_fig2(panel_a, panels, args.out / "fig2.png")
    print(
        f"sims.quadratic, preset {config.preset}: N={config.n_clients}, "
        f"n={config.n_per_client}, d={config.dim}, local={config.local}, seeds={config.seeds}, reach={config.reach}, "
        f"eps={config.eps_target:g}; L_max={panels['L_max']:.4g}, L_avg={panels['L_avg']:.4g}"
    )
    print(format_table(TABLE_HEADERS, rows))
    print(f"kappa over all 0<p<1: {summary['kappa_all']:.3g}" if summary["kappa_all"] is not None else "kappa: n/a")
    print(verdict_.get("text", verdict_.get("note", "")))
    print(
        f"wrote {args.out}/: summary.json, table.csv, panel_a.csv, panel_b.csv, rounds.csv"
        + ("" if args.no_plot else ", fig2.png")
        + f"  ({sum(timings.values()):.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
