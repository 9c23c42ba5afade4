"""Time the vectorised FedAvg epoch solver of sims.quadratic against the authors' pure-Python per-sample loop.

    python benchmarks/quadratic_bench.py [--rounds R] [--etas E] [--p P] [--naive-rounds K] [--no-e2e]

(a) ``fedavg.epoch`` on the paper preset's problem (sims.quadratic.experiment.PRESETS['paper'], shuffled_problems):
    P values of p x E step sizes x R rounds, one call, as run_panels_bcd makes it (default: the full 41 x 31 x 800).
(b) FedAvg written the way the authors' toy-example code runs it (notes/fedssyn_code.md): for each (p, step size),
    for each round, for each client, for each sample in a random order, x <- x - eta (h x - c) on numpy vectors of
    dimension d = 25. Timed on one (p, step size) for K rounds (default 20) and extrapolated per (p, step size,
    round) to the grid. The loop draws its orders from the same stream as ``fedavg.epoch(chunk=1)``, so the two
    are also checked against each other on that slice.
(c) ``python -m sims.quadratic --out <tmp>`` (default preset) end to end, when sims.quadratic.__main__ exists.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the repository's packages first

from sims.quadratic import fedavg  # noqa: E402
from sims.quadratic.experiment import PRESETS, shuffled_problems  # noqa: E402
from sims.quadratic.problem import Problem  # noqa: E402
from theory.cli import ArgumentParser, positive_int  # noqa: E402


def spread(values: np.ndarray, count: int) -> np.ndarray:
    """``count`` values of a grid, evenly spread over it and always including its first (p = 0, smallest step)."""
    if not 1 <= count <= values.size:
        raise SystemExit(f"asked for {count} values of a grid of {values.size}")
    return values[np.unique(np.round(np.linspace(0, values.size - 1, count)).astype(int))]


def naive_fedavg_epoch(
    h: np.ndarray, c: np.ndarray, eta: float, rounds: int, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Per-client, per-sample FedAvg as in the authors' code; returns (errors per round, seconds of the loop).

    h: (N, n) curvatures, c: (N, n, d). The orders come from ``argsort(rng.random((1, N, n)))`` per round, the same
    stream fedavg.epoch consumes with chunk=1 and no batch axes (any uniform permutation costs the same).
    """
    N, n = h.shape
    x_star = c.sum(axis=(0, 1)) / h.sum()
    x = np.zeros(c.shape[-1])
    errors = [float(np.sum((x - x_star) ** 2))]
    start = time.perf_counter()
    for _ in range(rounds):
        order = np.argsort(rng.random((1, N, n)), axis=-1)[0]
        total = np.zeros_like(x)
        for i in range(N):
            local = x.copy()
            h_i, c_i = h[i], c[i]
            for j in order[i]:
                local = local - eta * (h_i[j] * local - c_i[j])
            total += local
        x = total / N
        errors.append(float(np.sum((x - x_star) ** 2)))
    return np.array(errors), time.perf_counter() - start


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def time_end_to_end() -> None:
    if importlib.util.find_spec("sims.quadratic.__main__") is None:
        print("end to end: sims.quadratic.__main__ not found, skipped")
        return
    with tempfile.TemporaryDirectory(prefix="quadratic_bench_") as out:
        command = [sys.executable, "-m", "sims.quadratic", "--out", out]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
    print(
        f"end to end: python -m sims.quadratic --out <tmp> (default preset): {seconds:.1f} s, "
        f"exit code {done.returncode}"
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        print("  " + "\n  ".join(tail))


def main(argv: list[str] | None = None) -> int:
    config = PRESETS["paper"]
    p_grid = np.asarray(config.p_grid, dtype=np.float64)
    eta_grid = np.asarray(config.etas, dtype=np.float64)
    parser = ArgumentParser(prog="quadratic_bench.py", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--rounds", type=positive_int, default=config.rounds, help=f"rounds R (default {config.rounds})")
    add("--etas", type=positive_int, default=eta_grid.size, help=f"step sizes E (default {eta_grid.size})")
    add("--p", type=positive_int, default=p_grid.size, help=f"values of p, P (default {p_grid.size})")
    add("--chunk", type=positive_int, default=16, help="rounds per vectorised chunk of fedavg.epoch")
    add("--naive-rounds", type=positive_int, default=20, help="rounds of the timed naive slice (default 20)")
    add("--no-e2e", action="store_true", help="skip the end-to-end run of python -m sims.quadratic")
    args = parser.parse_args(argv)
    for flag, count, grid in (("--etas", args.etas, eta_grid), ("--p", args.p, p_grid)):
        if count > grid.size:
            parser.error(f"argument {flag}: the paper's grid has {grid.size} values, got {count}")

    p_values, etas = spread(p_grid, args.p), spread(eta_grid, args.etas)
    P, E, R = p_values.size, etas.size, args.rounds
    cells = P * E * R
    print(
        f"grid: {P} p x {E} step sizes x {R} rounds = {cells:,} (p, step, round) cells; paper preset: "
        f"N={config.n_clients}, n={config.n_per_client}, d={config.dim}, one epoch of single-sample SGD per round"
    )

    # (a) vectorised, one call over every p and step size, as run_panels_bcd makes it for one seed
    start = time.perf_counter()
    problems = shuffled_problems(config, p_values, 0.0, stage="b")
    problem = Problem(problems.h[0], problems.c[0])  # (P, N, n)
    build = time.perf_counter() - start
    start = time.perf_counter()
    errors = fedavg.epoch(problem, etas, R, np.random.default_rng(0), chunk=args.chunk)
    vectorised = time.perf_counter() - start
    vectorised_ms = 1e3 * vectorised / cells
    print(
        f"(a) vectorised fedavg.epoch: {vectorised:.2f} s ({vectorised_ms:.4f} ms per (p, step, round)); "
        f"problem build {build:.2f} s; peak RSS {peak_rss_gb():.2f} GB; "
        f"{int(fedavg.diverged(errors).sum())}/{P * E} (p, step) runs diverged"
    )

    # (b) naive, on the middle p and the largest step size that does not diverge there
    j = P // 2
    stable = np.flatnonzero(~fedavg.diverged(errors[j]))
    e = int(stable[-1]) if stable.size else 0
    h, c = problem.h[j], problem.c[j]
    naive_errors, naive = naive_fedavg_epoch(h, c, float(etas[e]), args.naive_rounds, np.random.default_rng(1))
    naive_ms = 1e3 * naive / args.naive_rounds
    naive_total = naive_ms * cells / 1e3
    check = fedavg.epoch(Problem(h, c), etas[e : e + 1], args.naive_rounds, np.random.default_rng(1), chunk=1)[0]
    difference = float(np.max(np.abs(check - naive_errors) / np.maximum(np.abs(naive_errors), 1e-300)))
    print(
        f"(b) naive per-sample loop: {args.naive_rounds} rounds at p={p_values[j]:g}, eta={etas[e]:.3g} in "
        f"{naive:.3f} s ({naive_ms:.3f} ms per (p, step, round)); same errors as fedavg.epoch to {difference:.1e} "
        "relative"
    )
    print(
        f"    extrapolated to the grid: {naive_total:,.0f} s ({naive_total / 3600:.2f} h) in one process, "
        f"{naive_total / E:,.0f} s on {E} parallel processes (the authors' setup: one per step size)"
    )
    print(
        f"speed-up of the vectorised solver: {naive_ms / vectorised_ms:,.0f}x per (p, step, round) against one "
        f"process; {naive_total / E / vectorised:,.1f}x against {E} processes"
    )

    # (c) the CLI's default preset end to end
    if args.no_e2e:
        print("end to end: skipped (--no-e2e)")
    else:
        time_end_to_end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
