"""``python -m theory``: Lemma 1 and Corollary I for user-given constants, as readable tables.

Example (the paper's least-squares setting, Sec. 2.3)::

    python -m theory --p 0.1 0.5 --zeta2 1 --sigma2 0 --L-max 100 --L-avg 38.5 --tau 10 --eps 1e-6
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from theory import corollary1, lemma1
from theory.cli import ArgumentParser, format_table, guarded


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m theory",
        description="Print Lemma 1's bounds and Corollary I's iteration bounds (Fedssyn, Sec. 2.2) for given "
        "constants. All O-constants are 1: compare ratios T(p)/T(0), not absolute counts.",
    )
    add = parser.add_argument
    add("--p", type=float, nargs="+", default=[0.1], help="shuffled fraction(s) p in [0, 1] (default: 0.1)")
    add("--zeta2", type=float, default=1.0, help="gradient dissimilarity ζ² (Assumption 1; default 1)")
    add("--sigma2", type=float, default=0.0, help="stochastic noise σ² (Assumption 2; default 0)")
    add("--sigma2-tilde", type=float, default=None, help="noise σ̃² on the shuffled data (default: = σ²)")
    add("--delta2", type=float, default=0.0, help="δ², synthetic-vs-real gradient gap (D-3; default 0)")
    add("--sigma2-hat", type=float, default=None, help="override σ̂²_p (e.g. 0 for full-batch local steps)")
    add("--L-max", type=float, default=100.0, help="largest client smoothness L_max (default 100)")
    add("--L-avg", type=float, default=38.5, help="average smoothness L_avg (default 38.5)")
    add("--tau", type=float, default=10.0, help="local steps τ per round (default 10)")
    add("--eps", type=float, default=1e-6, help="target accuracy ε (default 1e-6)")
    add("--mu", type=float, default=1.0, help="strong-convexity constant μ (default 1)")
    add("--N", type=float, default=10.0, help="number of clients N (default 10)")
    add(
        "--convexity",
        choices=[*corollary1.CONVEXITIES, "both"],
        default="both",
        help="which rate of Corollary I to print (default both)",
    )
    add("--target-speedup", type=float, default=None, help="also print the smallest p reaching this speed-up")
    add("--latex", action="store_true", help="print the sympy-checked appendix-D derivations as LaTeX and exit")
    return parser


@guarded("theory")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.latex:
        from theory.symbolic import lemma_latex

        print(lemma_latex())
        return 0
    constants = corollary1.Constants(
        zeta2=args.zeta2,
        sigma2=args.sigma2,
        L_max=args.L_max,
        L_avg=args.L_avg,
        tau=args.tau,
        N=args.N,
        mu=args.mu,
        sigma2_tilde=args.sigma2_tilde,
        delta2=args.delta2,
        sigma2_hat=args.sigma2_hat,
    )
    p = np.unique(np.concatenate([[0.0], args.p]))
    sections = [lemma1_table(p, constants)]  # built before printing so a bad argument prints nothing else
    convexities = corollary1.CONVEXITIES if args.convexity == "both" else (args.convexity,)
    for convexity in convexities:
        sections.append(corollary_table(p, args.eps, constants, convexity))
        if args.target_speedup is not None:
            sections[-1] += "\n" + target_line(args.target_speedup, args.eps, constants, convexity)
    print("\n\n".join(sections))
    return 0


def lemma1_table(p: np.ndarray, c: corollary1.Constants) -> str:
    sigma2_hat = lemma1.sigma2_hat_bound(p, c.sigma2, c.zeta2, c.sigma2_tilde, c.delta2)
    zeta2_hat = lemma1.zeta2_hat_bound(p, c.zeta2)
    L_p = lemma1.L_p_bound(p, c.L_max, c.L_avg)
    rows = [(q, s, z, z / c.zeta2 if c.zeta2 else float("nan"), L) for q, s, z, L in zip(p, sigma2_hat, zeta2_hat, L_p)]
    title = "Lemma 1 (Fedssyn eq. 4; appendix D): bounds in expectation after shuffling a fraction p"
    return title + "\n" + format_table(["p", "sigma2_hat_p", "zeta2_hat_p", "zeta2 ratio", "L_p"], rows)


def corollary_table(p: np.ndarray, eps: float, c: corollary1.Constants, convexity: str) -> str:
    terms = corollary1.iteration_bound(p, eps, c, convexity)
    speedup = corollary1.speedup(p, eps, c, convexity)
    superlinear = corollary1.is_superlinear(p, eps, c, convexity)
    rows = zip(
        p,
        terms.noise,
        terms.drift,
        terms.deterministic,
        terms.total,
        speedup,
        1 / speedup,
        1 - p,
        terms.dominant,
        superlinear,
    )
    title = f"Corollary I, {convexity} (O-constants = 1; eps={eps:g}, N={c.N:g}, tau={c.tau:g}" + (
        f", mu={c.mu:g})" if convexity == "strongly-convex" else ")"
    )
    headers = ["p", "noise", "drift", "determ.", "T(p)", "speed-up", "T(p)/T(0)", "1-p", "dominant", "super-linear"]
    return title + "\n" + format_table(headers, list(rows))


def target_line(target: float, eps: float, c: corollary1.Constants, convexity: str) -> str:
    p_min = corollary1.min_p_for_speedup(target, eps, c, convexity)
    if p_min is None:
        grid = np.linspace(0, 1, 2001)
        s = corollary1.speedup(grid, eps, c, convexity)
        best = int(np.argmax(s))
        return f"speed-up {target:g}: not reachable (largest {s[best]:.4g} at p = {grid[best]:.4g})"
    return f"speed-up {target:g}: smallest p = {p_min:.4g}"


if __name__ == "__main__":
    sys.exit(main())
