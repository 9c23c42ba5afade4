"""One short device benchmark (``bash scripts/gpu-bench.sh``, about 3 minutes of an H100): how much of the chip
the fleet, DynaFed's synthesis and a DDPM use, as FLOP/s that ``python -m lab.campaign plan --rates`` reads.

    bash scripts/gpu-bench.sh [--out FILE]      # on the device (CUDA): the sizes below
    bash scripts/gpu-bench.sh --dry             # tiny, on the CPU (the tests run it): that the parts run

Parts, each timed after a warm-up, its FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode`` (matrix
products and convolutions, forward and backward) and given as a share of a measured matrix-product peak of the
same precision (an n × n product, n = 8192):
- **peak**: FP32, TF32 and BF16 matrix products (CUDA), FP32 on the CPU.
- **fleet**: R = 1, 4, 16, 64 FedAvg runs of the HFMDs CNN on Fashion-MNIST-shaped samples, 20 clients each,
  batch 10, 10 local steps, in one :func:`fl.batched.train_groups` call (what ``fl.sweep --fleet`` does each
  round), in torch's default precision (what fl.run runs in: on CUDA, TF32 convolutions and FP32 matrix
  products; a share of the TF32 peak) and on CUDA in FP32 / TF32 / BF16 (autocast; fl/precision.py); run-rounds
  per second at 10 steps a round. Then the same runs as HFMDs arms after a synthesis (default precision: a pool
  batch of 10 beside every real batch, prototypes collected). A size that runs out of memory is recorded as such
  and the larger ones skipped. In the default precision each size runs twice: its local steps after the first
  replayed as a graph (``graphs`` "on": a CUDA graph on CUDA; ``--dry``: the CPU's traced stand-in, so that the
  tests run the path) and eagerly ("off"); FP32 / TF32 / BF16 run eagerly. The rates come from the rows run as
  "auto" runs them (one run replayed, a fleet eagerly: fl/graphs.py says why). A round
  of 10 steps pays a capture (a warm-up step and the recording), so 16 runs also train 100 steps a round both ways.
  FLOPs at equal work: one client of one run counted eagerly, times runs × clients (torch's counter overcounts
  the grouped convolutions' backward of a vmapped step, and sees nothing of a replayed graph). On CUDA each row
  starts with no cached memory and records its allocated and reserved peaks.
- **conv**: the fleet's FedAvg rows of 4, 16 and 64 runs (eagerly, default precision) with its convolutions other
  ways than the grouped convolution vmap makes of them: as unfold + a batched matrix product
  (:mod:`fl.matmul_conv`, "matmul"), and with cuDNN's autotuner on ("cudnn-benchmark"). The fleet's "off" rows
  are their baseline; the plan's rates do not read these rows.
- **convnet3**: DynaFed's FL rounds (ConvNet-3 width 128, 32 clients, batch 32, 24 steps: one round of
  configs/paper/dynafed_fmnist_a001.toml) for one run (replayed and eagerly) and a fleet of six; its rate is the
  plan's ``fl:convnet3`` (the FL rounds of runs of that model), the other fl work's stays the fleet's. Then the
  fleet of six eagerly the other ways, which the rates do not read: its convolutions as the conv part computes
  them, and on CUDA in FP32, TF32 and BF16 (:mod:`fl.precision`).
- **dynafed**: one seed's synthesis at the paper's width (``benchmarks/synthesis_bench.py --paper``, its fast path),
  then 3 seeds one after another and, in a process of their own, batched (``method.matching = "batched"``: one
  vmapped computation), in the device's precision (``method.precision`` auto: TF32 on CUDA); then on CUDA one seed
  with the matching in FP32 and in BF16; rates at the single fast path's FLOPs per seed-iteration; memory: the bytes
  autograd saves for an iteration's backward (fast path) and on CUDA the allocated and reserved peaks (CUDA-graph
  pools are reserved).
- **ddpm**: one client's DDPM (configs/fedssyn_fmnist_ddpm.toml's U-Net, batch 128) training steps, then 10
  clients' DDPMs trained together (``method.train_together``: one vmapped step over the clients), at the single
  client's FLOPs per step.
Writes JSON (``--out``, default results/bench/gpu.json): ``rates`` (FLOP/s by kind of work: the best fleet row,
the synthesis, the DDPM, each in the precision the campaign's runs use) and every row; prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.precision import PRECISIONS, arithmetic  # noqa: E402
from theory.cli import ArgumentParser, json_out_problem, signals_as_interrupts  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402

FULL = {"peak_n": 8192, "runs": (1, 4, 16, 64), "clients": 20, "steps": 10, "long_runs": 16, "long_steps": 100,
        "batch": 10, "ddpm_batch": 128, "ddpm_base": 32, "ddpm_clients": 10, "ddpm_steps": 10,
        "repeats": 3}  # fmt: skip
DRY = {"peak_n": 128, "runs": (1, 2), "clients": 2, "steps": 3, "long_runs": 1, "long_steps": 4, "batch": 4,
       "ddpm_batch": 2, "ddpm_base": 8, "ddpm_clients": 2, "ddpm_steps": 2, "repeats": 1}  # fmt: skip
# the "convnet3" part: DynaFed's FL rounds (configs/paper/dynafed_fmnist_a001.toml: ConvNet-3 width 128, 32 of 80
# clients a round, one epoch of 750 samples in batches of 32 = 24 steps), alone and as the campaign's fleet of six
CONVNET3 = {"width": 128, "clients": 32, "batch": 32, "steps": 24, "runs": (1, 6)}
CONVNET3_DRY = {"width": 4, "clients": 2, "batch": 4, "steps": 3, "runs": (1, 2)}
PARTS = ("fleet", "conv", "convnet3", "dynafed", "ddpm")  # after the peaks (every run measures them: the shares)
CONVS = ("matmul", "cudnn-benchmark")  # the "conv" part: unfold + batched matrix product (fl.matmul_conv); autotuned
DYNAFED_SECONDS = 150  # one synthesis case's limit (its process: start, warm-up, capture, 2 timed iterations)


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(work: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Best seconds of ``repeats`` calls of ``work`` after one untimed call."""
    work()
    synchronise(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        synchronise(device)
        best = min(best, time.perf_counter() - start)
    return best


def counted(work: Callable[[], object]) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        work()
    return float(counter.get_total_flops())


def precisions(device: torch.device) -> list[str]:
    """ "default" (torch's own settings, what fl.run runs in: on CUDA, cuDNN's convolutions in TF32 and matrix
    products in FP32), then fl/precision.py's three on CUDA; the CPU's default is FP32."""
    return ["default", *PRECISIONS] if device.type == "cuda" else ["default"]


def precision(name: str, device: torch.device) -> contextlib.AbstractContextManager:
    """What runs inside runs in precision ``name`` (:func:`precisions`)."""
    return contextlib.nullcontext() if name == "default" else arithmetic(name, device)


def peak_of(name: str, peaks: dict) -> float:
    """The matrix-product peak a row of precision ``name`` is a share of (default: TF32's on CUDA, where its
    convolutions run in TF32; FP32 on the CPU)."""
    return peaks.get(name, peaks.get("tf32", peaks.get("fp32", float("nan"))))


def peak(device: torch.device, sizes: dict) -> list[dict]:
    n = sizes["peak_n"]
    rows = []
    for name in PRECISIONS if device.type == "cuda" else ["fp32"]:
        dtype = torch.bfloat16 if name == "bf16" else torch.float32
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        with precision(name if name != "bf16" else "fp32", device):
            seconds = timed(lambda a=a, b=b: a @ b, device, sizes["repeats"])
        rows.append({"part": "peak", "precision": name, "n": n, "tflops": 2 * n**3 / seconds / 1e12})
    return rows


def fleet(device: torch.device, sizes: dict, peaks: dict, part: str = "fleet", dry: bool = False) -> list[dict]:
    from fl.algorithms import Context
    from fl.batched import Group, train_groups
    from fl.clients import LocalConfig
    from fl.config import build_algorithm
    from fl.flat import FlatModel
    from fl.graphs import graph_kind
    from fl.matmul_conv import as_matmul
    from fl.methods.base import CyclicBatches
    from fl.methods.hfmds import Mixed
    from fl.models import build_model

    torch.manual_seed(0)
    if part == "convnet3":
        spec = CONVNET3_DRY if dry else CONVNET3
        flat = FlatModel(build_model("convnet3", (1, 28, 28), 10, width=spec["width"]).to(device))
        sizes = sizes | {key: spec[key] for key in ("clients", "batch", "steps", "runs")}
    else:
        flat = FlatModel(build_model("hfmds-cnn", (1, 28, 28), 10).to(device))
    algorithm = build_algorithm({"name": "fedavg"})
    clients, batch = sizes["clients"], sizes["batch"]
    n = clients * max(sizes["steps"], sizes["long_steps"]) * batch
    x = torch.randn(n, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (n,), device=device)
    owned = torch.arange(n, device=device).reshape(clients, -1)
    server = flat.params.detach().clone()
    pool_x, pool_y = torch.randn(2000, 1, 28, 28, device=device), torch.randint(0, 10, (2000,), device=device)

    def hfmds_tasks() -> list:  # each client's HFMDs objective after a synthesis: a pool batch beside every step
        return [Mixed(10, 0.1, (pool_x, pool_y), CyclicBatches(2000, batch, torch.Generator().manual_seed(i), device),
                      prototypes=True) for i in range(clients)]  # fmt: skip

    rows = []
    recorded = "on"  # graphs for every size (on the CPU the traced stand-in, --dry); "auto" replays one run's alone
    short, long = (sizes["steps"], sizes["runs"]), (sizes["long_steps"], (sizes["long_runs"],))
    arms = [("default", "fedavg", graphs, *steps, "grouped") for steps in (short, long) for graphs in (recorded, "off")]
    arms += [("default", "hfmds", graphs, *short, "grouped") for graphs in (recorded, "off")]
    arms += [(name, "fedavg", "off", *short, "grouped") for name in PRECISIONS if device.type == "cuda"]
    if part == "conv":  # the fleet's convolutions other ways, eagerly at the fleet sizes (the "off" rows: grouped)
        arms = [("default", "fedavg", "off", short[0], short[1][1:] or short[1], conv) for conv in CONVS]
    if part == "convnet3":  # as the campaign runs them, then the fleet of six the other ways (not in the rates)
        arms = [("default", "fedavg", graphs, *short, "grouped") for graphs in (recorded, "off")]
        arms += [("default", "fedavg", "off", short[0], short[1][-1:], conv) for conv in CONVS]
        arms += [(name, "fedavg", "off", short[0], short[1][-1:], "grouped") for name in PRECISIONS
                 if device.type == "cuda"]  # fmt: skip
    models = {"grouped": flat, "cudnn-benchmark": flat, "matmul": FlatModel(as_matmul(flat.model))}
    for name, arm, graphs, steps, sizes_r, conv in arms:
        local, model = LocalConfig(1, batch, steps=steps, backend="batched"), models[conv]

        def groups(runs: int, k: int = clients, arm=arm, local=local, replay: str = "off") -> list:
            """``runs`` runs of ``k`` clients each, their steps replayed under ``replay`` (``train.graphs``)."""
            local = dataclasses.replace(local, graphs=replay)
            contexts = [Context(server, {}, {}, flat.head_mask) for _ in range(k)]
            gens = [torch.Generator().manual_seed(i) for i in range(k)]
            return [Group(x, y, list(owned[:k]), gens, algorithm, contexts, 0.01, local,
                          hfmds_tasks()[:k] if arm == "hfmds" else None) for _ in range(runs)]  # fmt: skip

        # FLOPs at equal work: one client of one run counted eagerly, times runs × clients. torch's counter
        # overcounts a grouped convolution's backward (quadratically in the groups a vmapped step makes: counted
        # over 4 clients it gives 1.9x a client's FLOPs a sample, over 2 runs of 4 3.1x), and a replayed graph
        # dispatches nothing it sees
        with precision(name, device):
            single = counted(lambda arm=arm, local=local: train_groups(flat, groups(1, 1), "different"))
        for runs in sizes_r:
            row = {"part": part, "arm": arm, "precision": name, "graphs": graphs, "runs": runs, "clients": clients,
                   "steps": steps, "batch": batch} | ({"conv": conv} if conv != "grouped" else {})  # fmt: skip
            fresh_memory(device)
            try:
                with precision(name, device), cudnn_benchmark(conv == "cudnn-benchmark"):
                    work = lambda r=runs, model=model, g=graphs: train_groups(  # noqa: E731
                        model, groups(r, replay=g), "different"
                    )
                    seconds = timed(work, device, sizes["repeats"])
                    replayed = graph_kind(device, runs, graphs)  # None also after a failed capture: ran eagerly
            except torch.cuda.OutOfMemoryError:
                rows.append(row | {"outcome": "out of memory"} | memory(device))
                fresh_memory(device)
                break
            tflops = single * runs * clients / seconds / 1e12
            rows.append(row | {"replayed": replayed, "seconds": seconds, "run_rounds_per_s": runs / seconds,
                               "tflops": tflops, "share_of_peak": tflops / peak_of(name, peaks)}
                        | memory(device))  # fmt: skip
    return rows


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool):
    """cuDNN's autotuner (``torch.backends.cudnn.benchmark``: each convolution shape timed over its algorithms
    once, the fastest kept) on inside where ``enabled``; restored after."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled or saved
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def fresh_memory(device: torch.device) -> None:
    """Each fleet row starts from no cached CUDA memory and a reset peak, so that its peak is its own."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def memory(device: torch.device) -> dict:
    """The row's CUDA peaks (allocated, reserved; GiB): what admission to a shared chip must allow for it."""
    if device.type != "cuda":
        return {}
    return {"cuda_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "cuda_reserved_peak_gib": torch.cuda.max_memory_reserved(device) / 2**30}  # fmt: skip


def dynafed(device: torch.device, dry: bool) -> list[dict]:
    """One seed's synthesis on the fast path, then 3 seeds on the fast path (one after another) and batched (one
    vmapped computation), in the device's own precision ("auto": what the campaign runs); then one seed with the
    matching in FP32 and in BF16 (on CUDA: "auto" is TF32; the effect of each on D_syn: NOTEBOOK, the precision
    study). The rate counts every row's work as the single fast path's FLOPs per seed-iteration, so that the batched
    path's grouped convolutions (counted differently) compare at equal work."""
    rows = []
    cases = [(1, "auto", "auto"), (3, "auto", "auto"), (3, "batched", "auto")]  # each a process with the chip
    cases += [(1, "auto", "fp32"), (1, "auto", "bf16")] if device.type == "cuda" else []
    for seeds, paths, arithmetic_name in cases:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "synthesis.json"
            sizes = ["--quick"] if dry else ["--paper", "--iterations", "2", "--repeats", "1"]
            command = [sys.executable, "benchmarks/synthesis_bench.py", *sizes, "--paths", paths, "--seeds",
                       str(seeds), "--device", device.type, "--precision", arithmetic_name,
                       "--out", str(out)]  # fmt: skip
            row = {"part": "dynafed", "seeds": seeds, "precision": arithmetic_name}
            try:  # a case that hangs (a capture, the allocator) costs its minutes, not the bench's remaining parts
                done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=DYNAFED_SECONDS)
            except subprocess.TimeoutExpired:
                rows.append(row | {"outcome": f"failed: over {DYNAFED_SECONDS} s"})
                continue
            if done.returncode:
                rows.append(row | {"outcome": f"failed: {done.stderr.strip()[-600:]}"})
                continue
            memory = ("saved_gib", "cuda_peak_gib", "cuda_reserved_peak_gib")  # a synthesis's memory (admission)
            rows += [row | {"path": r["ran"], "seed_iterations_per_s": r["seed_iterations_per_second"],
                            "gflop_per_iteration": r["gflop_per_iteration"]}
                         | {k: r[k] for k in memory if r.get(k) is not None}
                     for r in json.loads(out.read_text())["rows"]]  # fmt: skip
    single = next((r["gflop_per_iteration"] for r in rows if r.get("seeds") == 1 and "path" in r), None)
    for row in rows:
        if single is not None and "path" in row:
            row["tflops"] = single * row["seed_iterations_per_s"] / 1e3  # the fast path's FLOPs per synthesis
    return rows


def ddpm(device: torch.device, sizes: dict) -> list[dict]:
    """One client's DDPM training steps, then ``ddpm_clients`` clients' DDPMs trained together
    (:func:`fl.synthesis.generators.ddpm_together.fit_together`, one epoch of ``ddpm_steps`` steps each); the
    batched row's rate counts the single client's FLOPs per step (equal work)."""
    import numpy as np

    from fl.synthesis.generators.ddpm import DDPM, DDPMConfig, UNet
    from fl.synthesis.generators.ddpm_together import fit_together

    torch.manual_seed(0)
    config = DDPMConfig(base_channels=sizes["ddpm_base"], batch_size=sizes["ddpm_batch"])
    unet = UNet(1, 10, config).to(device)
    optimiser = torch.optim.AdamW(unet.parameters(), lr=1e-4)
    b = sizes["ddpm_batch"]
    x = torch.randn(b, 1, 28, 28, device=device)
    t = torch.randint(0, 1000, (b,), device=device)
    y = torch.randint(0, 10, (b,), device=device)

    def step():
        optimiser.zero_grad()
        torch.nn.functional.mse_loss(unet(x, t, y), x).backward()
        optimiser.step()

    seconds = timed(step, device, sizes["repeats"])
    flop = counted(step)
    rows = [{"part": "ddpm", "clients": 1, "batch": b, "steps_per_s": 1 / seconds, "tflops": flop / seconds / 1e12}]
    clients, steps = sizes["ddpm_clients"], sizes["ddpm_steps"]
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 256, (b * steps, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, b * steps))
            for _ in range(clients)]  # fmt: skip

    fresh = [[DDPM((1, 28, 28), 10, config, device) for _ in range(clients)] for _ in range(sizes["repeats"] + 1)]

    def together():  # fresh models each call (fit_together starts their optimisers), built outside the timing
        models = fresh.pop()
        fit_together(models, data, [1] * clients, [torch.Generator().manual_seed(k) for k in range(clients)])

    try:
        batched = timed(together, device, sizes["repeats"]) / steps
    except torch.cuda.OutOfMemoryError:
        return [*rows, {"part": "ddpm", "clients": clients, "outcome": "out of memory"}]
    return [
        *rows,
        {
            "part": "ddpm",
            "clients": clients,
            "batch": b,
            "steps_per_s": clients / batched,
            "tflops": flop * clients / batched / 1e12,
            "speedup_per_client": seconds * clients / batched,
        },
    ]


def as_auto_runs(row: dict, cuda: bool) -> bool:
    """Whether a row ran as ``train.graphs = "auto"`` runs its work (fl/graphs.py: on CUDA one run's steps replayed,
    a fleet's eagerly; on the CPU eagerly); rows without graphs (a synthesis, a DDPM) do."""
    return "graphs" not in row or (row["graphs"] != "off") == (cuda and row["runs"] == 1)


def rates_of(rows: list[dict], cuda: bool) -> dict[str, float]:
    """FLOP/s by kind of work for ``plan --rates``: the best row of each part in the precision and graphs the
    campaign's runs use; 0 where no such row was measured."""
    planned = ("default", "auto", None)
    best = {part: max((r["tflops"] for r in rows if r["part"] == part and "tflops" in r and "conv" not in r
                       and r.get("precision") in planned and as_auto_runs(r, cuda)), default=0.0)
            for part in PARTS}  # fmt: skip
    return {
        "fl": best["fleet"] * 1e12,
        "fl:convnet3": best["convnet3"] * 1e12,
        "dynafed": best["dynafed"] * 1e12,
        "ddpm": best["ddpm"] * 1e12,
    }  # not conv: no run computes its convolutions that way


def show(row: dict) -> None:
    print("  " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)


def main(argv: list[str] | None = None) -> int:
    """The bench; its failures to write ``--out`` (a full disk, a folder that became read-only) and Ctrl-C (or
    SIGTERM) are one line on stderr, exit 2 and 130: the parts measured before stay in ``--out``."""
    parser = ArgumentParser(prog="gpu-bench.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="tiny sizes on the CPU (that every part runs)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "gpu.json")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (all)")
    args = parser.parse_args(argv)
    if (problem := json_out_problem(args.out, "gpu.json", OWN_KEYS, parser.prog)) is not None:
        parser.error(problem)  # a user's own file there is never replaced; an earlier bench's JSON is
    parts = [part for part in args.parts.split(",") if part]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts {args.parts!r}: expected some of {', '.join(PARTS)}")
    try:
        with signals_as_interrupts():
            return bench(args, parts)
    except OSError as error:
        where = error.filename or args.out
        sys.stderr.write(f"gpu-bench.sh: error: {where}: {error.strerror or error}; the parts measured before are "
                         f"in {args.out} if it was written\n")  # fmt: skip
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"gpu-bench.sh: interrupted; the parts measured before are in {args.out}\n")
        return 130


OWN_KEYS = ("device", "dry", "parts", "complete", "rates", "rows")  # in every JSON the bench writes


def bench(args: argparse.Namespace, parts: list[str]) -> int:
    """The parts of ``parts`` measured, the JSON rewritten after each (see :func:`main`)."""
    device = torch.device("cpu" if args.dry or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu":
        torch.set_num_threads(1)
    sizes = DRY if args.dry else FULL
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU, 1 thread"
    print(f"device: {name}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    failed: list[str] = []

    def measure(part: str, work: Callable[[], list[dict]]) -> None:
        """Run one part; its rows (or its failure, as a row) are printed and the JSON rewritten at once, so that a
        bench cut off at its limit still leaves every part measured before."""
        started = time.perf_counter()
        try:
            new = work()
        except Exception as error:  # a part's failure is recorded and the bench goes on; the exit status says so
            new = [{"part": part, "outcome": f"failed: {type(error).__name__}: {str(error)[-300:]}"}]
        failed.extend(part for row in new if str(row.get("outcome", "")).startswith("failed"))
        for row in new:
            show(row)
        rows.extend(new)
        print(f"  ({part}: {time.perf_counter() - started:.0f} s)", flush=True)
        result = {"device": name, "dry": args.dry, "parts": parts, "complete": False,
                  "rates": rates_of(rows, device.type == "cuda"), "rows": rows}  # fmt: skip
        write_text_atomically(args.out, json.dumps(result, indent=1))

    measure("peak", lambda: peak(device, sizes))
    peaks = {r["precision"]: r["tflops"] for r in rows if r["part"] == "peak" and "tflops" in r}
    work = {"fleet": lambda: fleet(device, sizes, peaks), "conv": lambda: fleet(device, sizes, peaks, "conv"),
            "convnet3": lambda: fleet(device, sizes, peaks, "convnet3", args.dry),
            "dynafed": lambda: dynafed(device, args.dry),
            "ddpm": lambda: ddpm(device, sizes)}  # fmt: skip
    for part in parts:
        measure(part, work[part])
    result = json.loads(args.out.read_text()) | {"complete": True}
    write_text_atomically(args.out, json.dumps(result, indent=1))
    print(f"rates (FLOP/s) for `bash scripts/gpu-campaign.sh plan --rates {args.out}`: "
          + ", ".join(f"{k} {v:.3g}" for k, v in result["rates"].items()))  # fmt: skip
    if failed:
        print(f"failed: {', '.join(sorted(set(failed)))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
