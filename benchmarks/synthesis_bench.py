"""DynaFed's synthesis (trajectory matching, fl/methods/dynafed.py): outer iterations per second and achieved
TFLOP/s of the reference path against the fast one, on whatever device is present.

    python benchmarks/synthesis_bench.py [--width 32] [--iterations 5] [--device auto] [--paths reference,auto]
    python benchmarks/synthesis_bench.py --quick          (a few seconds; the test suite runs it)
    python benchmarks/synthesis_bench.py --paper          (ConvNet-3 of width 128: DynaFed's paper scale)

An outer iteration is what ``DynaFed.synthesize`` does N times: draw a segment, unroll s' = 20 inner steps of
full-batch SGD from w^t on D_syn (150 images of 28×28, 10 classes, DSA in every step), the normalised distance
to the target, its backward into X, y and α, and the Adam steps. The trajectory is a random walk of 21 models
(FLOPs and times do not depend on its values). Each path first runs ``--warmup`` iterations (a CUDA graph path
captures there), then ``--iterations`` timed ones; reported: iterations per second (best of ``--repeats``
rounds of them, the paths interleaved; beside it the ratio of process CPU times, steadier where other jobs share the
cores), the FLOPs of one iteration counted by ``torch.utils.flop_counter.FlopCounterMode`` (matrix
products and convolutions, forward and backward, on the path's eager equivalent: a CUDA graph's replay hides its
kernels from the counter but runs the same ones), their rate, the seconds N = 1000 would take, and each path's
speed against the first. The paths are ``method.matching`` values (fl.methods.dynafed.MatchingPath):
"reference" is the path before the fast one, "auto" the fast one with every switch the device supports, "batched"
the reference path vmapped over ``--seeds`` syntheses (what a fleet of seeds computes). With ``--seeds R`` an
iteration is one outer iteration of each of R syntheses (the others one after another); ``seed_iterations_per_second``
compares the paths per synthesis.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fl.experiment import resolve_device  # noqa: E402
from fl.flat import FlatModel  # noqa: E402
from fl.methods.base import ServerRound  # noqa: E402
from fl.methods.dynafed import SWITCHES, DynaFed, MatchingPath, iterate_together  # noqa: E402
from fl.methods.dynafed import Synthesis as DynaFedSynthesis  # noqa: E402
from fl.models import build_model  # noqa: E402
from fl.precision import PRECISIONS  # noqa: E402
from theory.cli import ArgumentParser, json_out_problem, non_negative_int, positive_int  # noqa: E402
from theory.errors import InputError  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402


class Synthesis:
    """``--seeds`` syntheses on ``device`` (:class:`fl.methods.dynafed.Synthesis`, nothing saved), each from its own
    random-walk trajectory, D_syn and draws; one :meth:`iteration` is one outer iteration of every seed: on the
    batched path one vmapped computation (:func:`~fl.methods.dynafed.iterate_together`), else one after another."""

    def __init__(self, args: argparse.Namespace, path: MatchingPath, device: torch.device, dtype: torch.dtype):
        torch.manual_seed(0)
        shape, classes = (1, args.size, args.size), 10
        model = build_model("convnet3", shape, classes, width=args.width).to(device=device, dtype=dtype)
        flat = FlatModel(model)
        method = DynaFed(inner_steps=args.inner_steps, per_class=args.per_class, segment=5, precision=args.precision)
        data = SimpleNamespace(n_classes=classes, x=torch.empty(0, *shape))
        self.jobs, self.n_iter = [], 0
        for seed in range(args.seeds):
            generator = torch.Generator().manual_seed(1 + seed)
            steps = [0.01 * torch.randn(flat.n_params, generator=generator, dtype=torch.float64) for _ in range(20)]
            walk = torch.cumsum(torch.stack([torch.zeros_like(steps[0]), *steps]), 0)
            trajectory = (flat.params.detach().cpu().double() + walk).to(device=device, dtype=dtype)
            x = flat.params.detach()
            s = ServerRound(t=20, x=x, flat=flat, data=data, state={"server": {"trajectory": trajectory}}, seed=seed)
            self.jobs.append(DynaFedSynthesis(method, s, path))
        self.path = self.jobs[0].path

    def iteration(self) -> torch.Tensor:
        self.n_iter += 1
        if self.path.batched:
            return iterate_together(self.jobs, self.n_iter).sum()
        return torch.stack([job.iterate(self.n_iter) for job in self.jobs]).sum()

    def describe(self) -> str:
        job = self.jobs[0]
        ran = job.fast.describe() if job.fast is not None else job.path.describe()
        ran += f" ({len(self.jobs)} runs)" if job.path.batched else ""
        return ran + ("" if job.method.precision == "auto" else f"; {job.method.precision}")


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def flops_per_iteration(args: argparse.Namespace, path: MatchingPath, device, dtype) -> tuple[float, int | None]:
    """(FLOPs, bytes saved for the backward) of one outer iteration on ``path`` run eagerly (graphs off: the counter
    sees no replayed kernel). The saved bytes are those of the distinct storages autograd keeps for the backward
    (the unroll's graph, held until the iteration's backward): what a synthesis needs beyond its own state, on any
    device (on CUDA the peak beside them: ``cuda_peak_gib``); the fast path only (None on the others)."""
    counted = Synthesis(args, dataclasses.replace(path, graphs=False), device, dtype)
    counted.iteration()  # the first unroll also checks the fast path's layers against the module (two forwards)
    storages = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    with FlopCounterMode(display=False) as counter, hooks if path.fast else contextlib.nullcontext():
        counted.iteration()  # torch.func (the reference and batched paths) takes no saved-tensor hooks: not measured
    return counter.get_total_flops(), sum(storages.values()) if path.fast else None


def measure(args: argparse.Namespace, names: list[str], device: torch.device, dtype: torch.dtype) -> list[dict]:
    """Every path: its FLOPs per iteration, then --repeats rounds in which each path in turn runs --iterations
    (interleaved, so that a machine busy with other work slows every path alike); the best round counts."""
    paths = [MatchingPath.parse(name) for name in names]
    flops, saved = zip(*(flops_per_iteration(args, path, device, dtype) for path in paths), strict=True)
    syntheses = [Synthesis(args, path, device, dtype) for path in paths]
    peaks = [{} for _ in paths]
    for k, synthesis in enumerate(syntheses):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(args.warmup):  # a graph path captures here: its pools count in the reserved peak
            synthesis.iteration()
        if device.type == "cuda":
            synchronise(device)
            peaks[k] = {"cuda_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30,
                        "cuda_reserved_peak_gib": torch.cuda.max_memory_reserved(device) / 2**30}  # fmt: skip
    best, best_cpu = [float("inf")] * len(paths), [float("inf")] * len(paths)
    for _ in range(args.repeats):
        for k, synthesis in enumerate(syntheses):
            synchronise(device)
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(args.iterations):
                loss = synthesis.iteration()
            float(loss)  # waits for the device
            best[k] = min(best[k], (time.perf_counter() - start) / args.iterations)
            best_cpu[k] = min(best_cpu[k], (time.process_time() - start_cpu) / args.iterations)
    rows = []
    for k, (name, synthesis, count) in enumerate(zip(names, syntheses, flops, strict=True)):
        ran = synthesis.describe()
        rows.append({"path": name, "ran": ran, "precision": args.precision, "seeds": args.seeds,
                     "iterations_per_second": 1 / best[k],
                     "seed_iterations_per_second": args.seeds / best[k], "seconds_per_iteration": best[k],
                     "cpu_seconds_per_iteration": best_cpu[k], "gflop_per_iteration": count / 1e9,
                     "tflops": count / best[k] / 1e12, "speedup": best[0] / best[k],
                     "cpu_time_ratio": best_cpu[0] / best_cpu[k],
                     "saved_gib": None if saved[k] is None else saved[k] / 2**30} | peaks[k])  # fmt: skip
    return rows


# what --quick and --paper set (an option they set is refused beside them), and each option without them
QUICK = {"width": 4, "size": 16, "per_class": 2, "inner_steps": 3, "iterations": 2, "repeats": 1}
PAPER = {"width": 128}
DEFAULTS = {"width": 32, "size": 28, "per_class": 15, "inner_steps": 20, "iterations": 5, "repeats": 2}


OWN_KEYS = ("device", "args", "rows")  # in every JSON the bench writes (--out)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="synthesis_bench.py", description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--width", type=positive_int, help="ConvNet-3 channels (default 32; DynaFed: 128)")
    add("--size", type=positive_int, help="image side (default 28, Fashion-MNIST's)")
    add("--per-class", type=positive_int, help="D_syn images per class, 10 classes (default 15)")
    add("--inner-steps", type=positive_int, help="s', unrolled steps per outer iteration (default 20)")
    add("--iterations", type=positive_int, help="timed outer iterations per repeat (default 5)")
    add("--warmup", type=non_negative_int, default=1, help="untimed outer iterations first (graph capture)")
    add("--repeats", type=positive_int, help="default 2")
    add("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    add("--dtype", choices=("float32", "float64"), default="float32")
    add("--paths", help="comma-separated method.matching values (default: reference, auto, and unless --quick "
        "each switch alone)")  # fmt: skip
    add(
        "--seeds",
        type=positive_int,
        default=1,
        help="syntheses per iteration (default 1; the batched path computes them as one)",
    )
    add(
        "--precision",
        choices=("auto", *PRECISIONS),
        default="auto",
        help="the matching's arithmetic "
        "(DynaFed's method.precision: auto, the device's; fp32, tf32 (emulated off CUDA) or bf16)",
    )
    add("--threads", type=positive_int, help="torch CPU threads (default: torch's choice; 1 with --quick)")
    add("--quick", action="store_true", help="width 4, 16 px, 2 per class, 3 steps, 2 iterations, 1 repeat, "
        "1 thread")  # fmt: skip
    add("--paper", action="store_true", help="width 128 (DynaFed's ConvNet-3)")
    add("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if args.quick and args.paper:
        parser.error("--quick and --paper set the same sizes; give one of them")
    preset = QUICK if args.quick else PAPER if args.paper else {}
    given = [name for name in preset if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        parser.error(f"{'--quick' if args.quick else '--paper'} sets {flags} itself; give one or the other, not both")
    for name, value in (DEFAULTS | preset).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:  # one thread unless told: at this size more only wait on each other (and on a busy machine)
        args.threads = args.threads or 1
    try:
        device = resolve_device(args.device, "argument --device")
    except InputError as error:  # (checked here, not as its type: the JSON keeps what was given)
        parser.error(str(error))
    paths = args.paths.split(",") if args.paths else None
    try:
        for name in paths or []:
            MatchingPath.parse(name)
    except InputError as error:
        parser.error(f"argument --paths: {error}")
    try:
        build_model("convnet3", (1, args.size, args.size), 10, width=1)  # an image too small for three poolings
        DynaFed(inner_steps=args.inner_steps, per_class=args.per_class, segment=5)
    except InputError as error:
        parser.error(str(error))
    if args.out is not None and (problem := json_out_problem(args.out, "synthesis.json", OWN_KEYS, parser.prog)):
        parser.error(problem)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    default = ["reference", "auto"]
    if not args.quick:  # each switch alone (on the CPU: the fast path without its instance norm)
        default += [f"fast+{s}" for s in SWITCHES] + ["fast"] if device.type == "cuda" else ["fast"]
    paths = paths or default
    device_name = (torch.cuda.get_device_name(device) if device.type == "cuda"
                   else f"CPU, {torch.get_num_threads()} threads")  # fmt: skip
    print(f"DynaFed synthesis on {device_name}, {args.dtype} ({args.precision} arithmetic): ConvNet-3 width "
          f"{args.width}, {args.per_class * 10} "
          f"images of {args.size}x{args.size}, s' = {args.inner_steps}, DSA; best of {args.repeats} x "
          f"{args.iterations} iterations")  # fmt: skip
    rows = measure(args, paths, device, dtype)
    for row in rows:
        print(f"{row['path']:>32s}  {row['iterations_per_second']:8.3f} it/s  {row['gflop_per_iteration']:9.2f} "
              f"GFLOP/it  {row['tflops']:8.4f} TFLOP/s  N=1000: {1000 * row['seconds_per_iteration']:8.1f} s  "
              f"x{row['speedup']:.2f} against {rows[0]['path']} (process CPU time: x{row['cpu_time_ratio']:.2f})  "
              + ("" if row["saved_gib"] is None else f"saved for the backward {row['saved_gib']:.3f} GiB  ")
              + f"({row['ran']})")  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(
            args.out, json.dumps({"device": device_name, "args": vars(args) | {"out": str(args.out)}, "rows": rows})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
