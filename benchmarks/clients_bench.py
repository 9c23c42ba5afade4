"""Sequential against batched clients (fl.batched): rounds and samples per second, peak memory, achieved FLOP/s.

    python benchmarks/clients_bench.py                      # CPU always; CUDA too when present
    python benchmarks/clients_bench.py --quick              # seconds: tiny sizes (the tests run this)
    python benchmarks/clients_bench.py --clients 10,100 --models fedcog-cnn --devices cpu --out bench.json

One FedAvg round (full participation, one local epoch of batch ``--batch-size`` SGD) of N clients holding random
images (28x28 grey for ``fedcog-cnn`` and ``convnet3``, 32x32 colour for ``vgg11``) of unequal sizes (uniform in
[n/2, 3n/2], n = ``--samples``), so batched clients take different numbers of steps. Each cell: one warm-up round,
then the median of ``--repeats`` timed rounds, for each backend. FLOPs of a round: ``torch.utils.flop_counter`` on
one forward and backward pass of one batch, times the round's samples over B; achieved FLOP/s = FLOPs / time, and on
CUDA its fraction of the device's peak (``--peak-tflops``; default: dense FP32 of an H100 SXM, 67 TFLOP/s, when
the device name says H100). Peak memory: CUDA ``max_memory_allocated``; CPU the process's peak resident size
(monotone over the run: a cell's value includes earlier cells). A cell whose sequential round would exceed
``--budget`` seconds (extrapolated linearly in N from the last measured N) is skipped and marked so, and so is a
cell that runs out of device memory (the others still run). VGG-11 has
dropout: its batched rows use vmap's independent dropout draws (``train.backend = "batched"``).
Prints a table and writes JSON (``--out``, default results/bench/clients.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.algorithms import FedAvg  # noqa: E402
from fl.clients import ClientSet, LocalConfig  # noqa: E402
from fl.engine import init_state, run_round  # noqa: E402
from fl.experiment import resolve_device  # noqa: E402
from fl.flat import FlatModel  # noqa: E402
from fl.models import build_model  # noqa: E402
from theory.cli import (  # noqa: E402
    ArgumentParser,
    json_out_problem,
    non_negative_int,
    positive_float,
    positive_int,
)
from theory.errors import InputError  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402

SHAPES = {"fedcog-cnn": (1, 28, 28), "convnet3": (1, 28, 28), "vgg11": (3, 32, 32)}
# what --quick sets, and what each of those options is without it (an option --quick sets is refused beside it)
QUICK = {"models": ["fedcog-cnn"], "clients": [4, 8], "samples": 12, "batch_size": 4, "repeats": 1}
FULL = {"models": list(SHAPES), "clients": [10, 100, 1000], "samples": 64, "batch_size": 16, "repeats": 2}


def client_set(n_clients: int, samples: int, shape, device, seed: int = 0) -> ClientSet:
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(max(1, samples // 2), samples + samples // 2 + 1, (n_clients,), generator=generator)
    n = int(sizes.sum())
    x = torch.randn(n, *shape, generator=generator).to(device)
    y = torch.randint(0, 10, (n,), generator=generator).to(device)
    bounds = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]).tolist()
    train = [torch.arange(a, b, device=device) for a, b in itertools.pairwise(bounds)]
    empty = [torch.empty(0, dtype=torch.long, device=device) for _ in train]
    return ClientSet(x, y, train, empty, train, empty, x[:10], y[:10], 10)


def round_flops(flat: FlatModel, data: ClientSet, batch_size: int) -> float:
    """FLOPs of one round: one batch's forward + backward, counted, times (samples / B)."""
    xb, yb = data.x[:batch_size], data.y[:batch_size]
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(flat.model(xb), yb).backward()
    flat.grads.zero_()
    return counter.get_total_flops() * sum(len(t) for t in data.train) / len(xb)


def peak_memory(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if platform.system() != "Darwin" else kib / 2**20


def time_round(model_name, n_clients, samples, batch_size, device, backend, repeats, chunk) -> dict:
    torch.manual_seed(0)
    flat = FlatModel(build_model(model_name, SHAPES[model_name], 10).to(device))
    data = client_set(n_clients, samples, SHAPES[model_name], device)
    local = LocalConfig(epochs=1, batch_size=batch_size, backend=backend, chunk=chunk)
    algorithm = FedAvg()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    state = init_state(flat, algorithm, n_clients, 0.01)
    times = []
    for r in range(repeats + 1):  # the first round warms up (allocator, kernels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tick = time.perf_counter()
        state, record = run_round(state, flat, algorithm, data, local, seed=r)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - tick)
    seconds = statistics.median(times[1:])
    flops = round_flops(flat, data, batch_size)
    n_samples = sum(len(t) for t in data.train)
    return {
        "backend": record["backend"],
        "seconds_per_round": seconds,
        "rounds_per_second": 1 / seconds,
        "samples_per_second": n_samples / seconds,
        "samples": n_samples,
        "flops_per_round": flops,
        "achieved_tflops": flops / seconds / 1e12,
        "peak_memory_mib": peak_memory(device),
    }


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    if given:
        return given
    if device.type == "cuda" and "H100" in torch.cuda.get_device_name(device):
        return 67.0  # dense FP32, H100 SXM
    return None


def model_names(text: str) -> list[str]:
    """argparse type of --models: names of SHAPES, separated by commas."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in SHAPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown model {unknown[0]!r}; known models: {', '.join(SHAPES)}")
    return names


def client_counts(text: str) -> list[int]:
    """argparse type of --clients: whole numbers >= 1 separated by commas."""
    return [positive_int(value.strip()) for value in text.split(",")]


def device_names(text: str) -> list[torch.device]:
    """argparse type of --devices: auto (cpu, plus cuda when present), or devices separated by commas."""
    if text == "auto":
        return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    try:
        return [resolve_device(name.strip(), "--devices") for name in text.split(",")]
    except InputError as error:  # argparse says an ArgumentTypeError's message
        raise argparse.ArgumentTypeError(str(error).removeprefix("--devices: ")) from None


OWN_KEYS = ("meta", "rows")  # in every JSON the bench writes (--out)


def main(argv=None) -> int:
    parser = ArgumentParser(prog="clients_bench.py", description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--models", type=model_names, help=f"comma-separated, of {', '.join(SHAPES)} (default: all)")
    add("--clients", type=client_counts, help="comma-separated client counts N (default 10,100,1000)")
    add("--samples", type=positive_int, help="mean samples per client, sizes uniform in [n/2, 3n/2] (default 64)")
    add("--batch-size", type=positive_int, help="default 16")
    add("--repeats", type=positive_int, help="timed rounds per cell (default 2)")
    add("--devices", type=device_names, default="auto", help="cpu, cuda, or auto (cpu, plus cuda when present)")
    add("--budget", type=positive_float, default=60.0, help="skip a cell whose sequential round would take longer (s)")
    add("--chunk", type=non_negative_int, default=0, help="clients per batched call (0: all)")
    add("--peak-tflops", type=positive_float, help="the device's peak TFLOP/s for the utilisation column")
    add("--threads", type=positive_int, help="torch CPU threads")
    add("--quick", action="store_true", help="tiny sizes, a few seconds (sets --models, --clients, --samples, "
        "--batch-size and --repeats)")  # fmt: skip
    add("--out", type=Path, default=ROOT / "results" / "bench" / "clients.json")
    args = parser.parse_args(argv)
    given = [name for name in QUICK if getattr(args, name) is not None]
    if args.quick and given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        parser.error(f"--quick sets {flags} itself; give {flags} or --quick, not both")
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if (problem := json_out_problem(args.out, "clients.json", OWN_KEYS, parser.prog)) is not None:
        parser.error(problem)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.devices
    rows = []
    for device in devices:
        for model_name in args.models:
            last = None  # (N, sequential seconds) of the last measured cell, for the budget
            for n in args.clients:
                row = {"device": str(device), "model": model_name, "clients": n}
                if last and last[1] * n / last[0] > args.budget:
                    rows.append(row | {"skipped": f"sequential round estimated {last[1] * n / last[0]:.0f} s"})
                    print(f"{device} {model_name} N={n}: skipped ({rows[-1]['skipped']})", flush=True)
                    continue
                cell = {}
                try:
                    for backend in ("sequential", "batched"):
                        cell[backend] = time_round(
                            model_name, n, args.samples, args.batch_size, device, backend, args.repeats, args.chunk
                        )
                except torch.OutOfMemoryError as error:  # a cell too large for the device's free memory: say so, go on
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    reason = str(error).split(".")[0]
                    rows.append(row | {"skipped": f"{backend} out of device memory ({reason}; --chunk bounds it)"})
                    print(f"{device} {model_name} N={n}: skipped ({rows[-1]['skipped']})", flush=True)
                    continue
                last = (n, cell["sequential"]["seconds_per_round"])
                speedup = cell["sequential"]["seconds_per_round"] / cell["batched"]["seconds_per_round"]
                peak = peak_tflops(device, args.peak_tflops)
                row |= {**cell, "speedup": speedup}
                if peak:
                    row["batched_fraction_of_peak"] = cell["batched"]["achieved_tflops"] / peak
                rows.append(row)
                print(
                    f"{device} {model_name} N={n}: sequential {cell['sequential']['rounds_per_second']:.3g} rounds/s, "
                    f"batched {cell['batched']['rounds_per_second']:.3g} rounds/s ({speedup:.2f}x)",
                    flush=True,
                )
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "samples": args.samples}
    meta |= {"batch_size": args.batch_size, "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    write_text_atomically(args.out, json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


def table(rows: list[dict]) -> str:
    head = "| device | model | N | seq rounds/s | batched rounds/s | speed-up | batched samples/s | TFLOP/s | "
    head += "peak MiB seq / batched |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['device']} | {r['model']} | {r['clients']} | skipped: {r['skipped']} | | | | | |")
            continue
        s, b = r["sequential"], r["batched"]
        tflops = f"{b['achieved_tflops']:.3g}" + (
            f" ({100 * r['batched_fraction_of_peak']:.1f}% of peak)" if "batched_fraction_of_peak" in r else ""
        )
        lines.append(
            f"| {r['device']} | {r['model']} | {r['clients']} | {s['rounds_per_second']:.3g} | "
            f"{b['rounds_per_second']:.3g} | {r['speedup']:.2f}x | {b['samples_per_second']:.4g} | {tflops} | "
            f"{s['peak_memory_mib']:.0f} / {b['peak_memory_mib']:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
