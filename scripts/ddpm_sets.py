"""Train every client's generator of one Fedssyn run and sample its synthetic set, several clients at once: what
``python -m fl.run`` does before its first round, in ``--workers`` processes instead of one client after the other
(on a GPU, small DDPMs leave the chip mostly idle one at a time). The run's own preparation (``fl.run``'s
:class:`~fl.experiment.Experiment`: its data, split and cache keys), so a later ``fl.run`` of the same config finds
every generator cached. No FL round runs.

    python scripts/ddpm_sets.py --config configs/fedssyn_fmnist_ddpm.toml --set train.seed=1 [--workers 4]

Prints one line per client (trained or found cached, seconds, images) and exits 0; a bad config is one line and
exit code 2, as in ``fl.run``.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.config import load_config  # noqa: E402
from fl.experiment import Experiment  # noqa: E402
from fl.methods.base import Setup, Split  # noqa: E402
from theory.cli import ArgumentParser, guarded  # noqa: E402

_WORKER: dict = {}


def line_buffered() -> None:
    """Each client's lines as they come, also into a file (a stream that cannot be reconfigured is left as it is)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


def _start_worker(method, setup: Setup, split: Split) -> None:
    line_buffered()
    _WORKER.update(method=method, setup=setup, split=split)


def _prepare_client(i: int) -> dict:
    import torch

    torch.set_num_threads(1)
    return _WORKER["method"].prepare_client(_WORKER["setup"], _WORKER["split"], i)


class ParallelPreparation(Experiment):
    """fl.run's experiment whose method preparation runs ``prepare_client`` in ``workers`` spawned processes (each
    client's work depends on its own D_i and seed only, so the order changes nothing)."""

    workers = 1

    def prepare(self, setup: Setup, split: Split) -> tuple[Split, dict]:
        method, clients = self.method, range(len(split.original))
        start = time.perf_counter()
        method.train_all(setup, split)  # method.train_together: every client's DDPM in one computation first
        if self.workers > 1:
            context = multiprocessing.get_context("spawn")  # CUDA in the workers
            with ProcessPoolExecutor(self.workers, context, _start_worker, (method, setup, split)) as pool:
                sent = list(pool.map(_prepare_client, clients))
        else:
            sent = [method.prepare_client(setup, split, i) for i in clients]
        return method.prepare_server(setup, split, sent, time.perf_counter() - start)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="scripts/ddpm_sets.py", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="a Fedssyn config (method.name fedssyn or own), as in fl.run")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="as in fl.run")
    parser.add_argument("--workers", type=int, default=4, help="clients prepared at once (default 4)")
    return parser


@guarded("scripts/ddpm_sets.py")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    line_buffered()
    if args.workers < 1:
        build_parser().error("--workers must be >= 1")
    config = load_config(args.config, args.set)
    if "n_tilde" not in config.method:
        build_parser().error(f"{args.config}: method {config.method.get('name')!r} trains no generator")
    start = time.perf_counter()
    ParallelPreparation.workers = args.workers
    experiment = ParallelPreparation(config)
    infos = experiment.method_info.get("generators", [])
    for i, info in enumerate(infos):
        what = "cached" if info.get("cached") else f"trained {info.get('seconds_train', 0):.0f} s"
        print(f"client {i}: {what}, sampled {sum(info.get('class_counts_synthetic', []))} images "
              f"({info.get('seconds_sample', 0):.0f} s)")  # fmt: skip
    print(f"{len(infos)} generators of seed {config.train.seed} ready in {config.method.get('cache_dir')} "
          f"after {time.perf_counter() - start:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
