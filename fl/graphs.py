"""Replayed steps: a round's local steps, after the first, recorded once as a graph and replayed step after step.

A batched local step (:mod:`fl.batched`) of small clients is launch-bound on a GPU: the last lease's HFMDs steps
took 2.3-4.3 ms for ~4 µs of arithmetic. ``torch.cuda.graph`` records the step's kernels once and
``CUDAGraph.replay()`` launches them all in one call. The replayed kernels are the eager step's own, so a graph
changes when the work is launched, not what it computes.

A step that can be recorded is a pure function ``advance(state, s) -> state`` of a tuple of tensors and the step
index ``s`` (a 0-d long tensor on the state's device), reading other tensors that stay unchanged while it is
replayed. It must not read a tensor's value on the host (``.item()``, ``float(t)``, a tensor used as a Python
index) nor make a tensor from host data: a CUDA capture fails on the first, and the second would be recorded once
and replayed unchanged at every step.

The CPU has no CUDA graphs. There, "on" holds the same contract with a traced FX graph (``make_fx``): it records
the step's aten operations once (a read of a value on the host is refused while tracing) and replays them with
the next step's index, so a Python number that changes from step to step shows up as different numbers in the
tests, as a stale value would on CUDA. On the CPU it buys no speed; it is how the tests check the contract.

A run's config key ``train.graphs`` chooses, handed down to :func:`graph_kind` as ``setting``: "auto" (on CUDA,
CUDA graphs for the clients of one run; none for a fleet's several runs, nor elsewhere), "on" (graphs for fleets
too, and the traced graph off CUDA), "off". It does not change a run's numbers (tested bit for bit on the CPU in
float64), so it is a speed-only key, not part of a run's identity (``fl.config.SPEED_ONLY``). The environment
variable ``SHUFFLEFL_GRAPHS`` that chose it before is refused, when set, with a line naming the key.

Why "auto" leaves fleets eager: gpu-bench measured replay faster for one run's rounds but not for fleets', whose
graph pools also raised the reserved memory (the numbers: results/ledger/bench/2026-11-27-h100). A fleet's step is
not launch-bound: its vmapped convolutions over runs x clients take the time.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from theory.errors import InputError

GRAPHS_ENV = "SHUFFLEFL_GRAPHS"  # chose the setting before train.graphs did: refused when set
GRAPH_SETTINGS = ("auto", "on", "off")

State = tuple[torch.Tensor, ...]
Advance = Callable[[State, torch.Tensor], State]


class StepNotRecordable(RuntimeError):
    """The step reads a value on the host or makes a tensor from host data: it cannot be recorded as a graph."""


_failed_captures: list[str] = []  # this process's failed CUDA captures: after one, the steps run eagerly


def graphs_setting(setting: str = "auto") -> str:
    """``setting`` (a run's ``train.graphs``), checked: another value than auto, on, off is an InputError naming
    the key (one line), and so is the environment variable ``SHUFFLEFL_GRAPHS`` when set (the config says it now)."""
    if os.environ.get(GRAPHS_ENV):
        raise InputError(
            f"{GRAPHS_ENV}={os.environ[GRAPHS_ENV]!r}: the environment variable is no longer read; unset it and set "
            f"train.graphs in the config (or --set train.graphs=...)"
        )
    if setting not in GRAPH_SETTINGS:
        raise InputError(f"config train.graphs: {setting!r}: expected one of {', '.join(GRAPH_SETTINGS)}")
    return setting


def graph_kind(device: torch.device | str, runs: int = 1, setting: str = "auto") -> str | None:
    """How steps of ``runs`` runs' clients on ``device`` are replayed under ``setting`` (``train.graphs``):
    "cuda", "trace" or None (eagerly; on CUDA under "auto" for a fleet of several runs, and once a capture failed in
    this process, so that a run does not try again every round)."""
    setting = graphs_setting(setting)
    if setting == "off" or (setting == "auto" and runs > 1):
        return None
    if torch.device(device).type == "cuda":
        return None if _failed_captures else "cuda"
    return "trace" if setting == "on" else None


def replay(advance: Advance, state: State, start: int, stop: int, kind: str) -> State:
    """The state after ``state = advance(state, s)`` for s = start, ..., stop - 1, with ``advance`` recorded once
    ("cuda": a CUDA graph; "trace": a traced FX graph) and replayed at each step."""
    if stop <= start:
        return state
    if kind == "cuda":
        return _cuda(advance, state, start, stop)
    if kind == "trace":
        return _traced(advance, state, start, stop)
    raise ValueError(f"graph kind {kind!r}: expected 'cuda' or 'trace'")


def _traced(advance: Advance, state: State, start: int, stop: int) -> State:
    first = torch.tensor(start, device=state[0].device)
    try:
        graph = make_fx(advance)(state, first)
    except RuntimeError as error:
        if "_local_scalar_dense" not in str(error):
            raise
        raise StepNotRecordable(f"the step reads a tensor's value on the host: {error}") from error
    fresh = [n for n in graph.graph.nodes if n.op == "call_function" and "lift_fresh" in str(n.target)]
    if fresh:
        raise StepNotRecordable(f"the step makes {len(fresh)} tensor(s) from host data (torch.tensor in the step)")
    for s in range(start, stop):
        state = tuple(graph(state, torch.tensor(s, device=first.device)))
    return state


def _cuda(advance: Advance, state: State, start: int, stop: int) -> State:
    """Warm-up on a side stream (the pattern torch's CUDA-graph notes give: lazy handles and workspaces are made
    outside the capture), then a capture that writes the new state into the static tensors and counts s up."""
    static = tuple(t.clone() for t in state)
    s = torch.tensor(start, device=state[0].device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        advance(static, s)  # pure: its result is dropped
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = advance(static, s)
            for kept, new in zip(static, out):
                kept.copy_(new)
            s.add_(1)
    except RuntimeError as error:  # an operation the capture refuses: nothing of the state was changed
        _failed_captures.append(str(error))
        raise StepNotRecordable(f"the CUDA capture failed ({error}); this process runs its steps eagerly") from error
    del out
    for _ in range(stop - start):
        graph.replay()
    return static
