"""A run's rows and what is drawn from them: the metrics row of each round (:func:`round_row`), ``metrics.jsonl``
read back (:func:`read_metrics`, :func:`resumable_rows`), the summary (:func:`summarise`, :func:`accuracy_summary`,
:func:`rounds_to_target`), the per-client table ``clients.csv`` and the pictures a finished run draws.

The ledger's check (:mod:`lab.records.check`) and the figures read a run through these same functions.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from fl.config import RunConfig
from fl.engine import EngineState
from fl.methods import Picture
from theory.errors import InputError
from theory.output import read_text_bounded, to_json, write_csv

if TYPE_CHECKING:
    from fl.experiment import Experiment


def read_metrics(path: Path, before_round: int | None = None) -> list[dict]:
    """The metrics rows ``path`` holds (none where it does not exist), those before ``before_round`` where given."""
    if not path.exists():
        return []
    try:
        text = read_text_bounded(path, "run's metrics.jsonl")
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (json.JSONDecodeError, RecursionError):
        raise InputError(f"{path}: a line is not a metrics row (not JSON, or nested too deep)") from None
    return [r for r in rows if before_round is None or r["round"] < before_round]


def resumable_rows(path: Path, next_round: int) -> list[dict]:
    """The metrics rows of rounds 1 .. ``next_round`` - 1, which a checkpoint before ``next_round`` continues: rows
    written after that checkpoint are dropped (those rounds run again), a torn last line (a crash mid-write) is
    dropped with a warning, and anything else that does not match the checkpoint is refused in one line."""
    lines = read_text_bounded(path, "run's metrics.jsonl").splitlines() if path.exists() else []
    rows = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # RecursionError: nested deeper than any row
            if k == len(lines) - 1:
                print(f"{path}: dropped its torn last line (a write cut short)", file=sys.stderr)
                break
            raise InputError(f"{path}: line {k + 1} is not JSON; the metrics are damaged, start the run anew") from None
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            raise InputError(f"{path}: line {k + 1} is not a metrics row; start the run anew")
        rows.append(row)
    kept = [r for r in rows if r["round"] < next_round]
    if len(kept) != next_round - 1 or any(r["round"] != k for k, r in enumerate(kept, 1)):  # never sized by the round
        held = f"rounds {kept[0]['round']}-{kept[-1]['round']} ({len(kept)} rows)" if kept else "no rows"
        raise InputError(
            f"{path} holds {held} where its checkpoint needs rounds 1-{next_round - 1}: the metrics do not match "
            "the checkpoint; start the run anew"
        )
    return kept


def finite_accuracies(rows: list[dict]) -> list[tuple[int, float]]:
    """(round, test accuracy) of every row that has one and whose server model was finite: a diverged round's model
    (NaN or inf) predicts whatever its argmax lands on, which is no accuracy of a model (its row keeps what was
    measured, with ``diverged``; a summary never reports it)."""
    return [(r["round"], r["test_accuracy"]) for r in rows
            if r.get("test_accuracy") is not None and not r.get("diverged")]  # fmt: skip


def rounds_to_target(rows: list[dict], target: float) -> int | None:
    """First round whose test accuracy is at least ``target`` (None when never; a diverged round never counts)."""
    return next((t for t, accuracy in finite_accuracies(rows) if accuracy >= target), None)


def summarise(config: RunConfig, rows: list[dict], state: EngineState, exp: Experiment, seconds: float) -> dict:
    """What ``summary.json`` holds of a run that ended in ``state`` (its ``rows``, ``seconds`` of training): rounds
    done, final and best test accuracy, rounds and communication to the target, the step size, the means of the
    estimates, the worst client, the method's report, the CUDA peak."""
    target = config.train.target_accuracy
    reached = rounds_to_target(rows, target)
    estimates = [r["estimates"] for r in rows if "estimates" in r]
    return {
        "rounds": state.round - 1,
        **accuracy_summary(rows),
        "target_accuracy": target,
        "rounds_to_target": reached,
        "communication_to_target": next((r["communication"] for r in rows if r["round"] == reached), None),
        "communication_total": rows[-1]["communication"] if rows else 0,
        "lr": state.lr,
        "lr_tuning": state.extra.get("lr_tuning", []),
        **({"init_from_changes": state.extra["init_from_changes"]} if "init_from_changes" in state.extra else {}),
        "n_params": exp.flat.n_params,
        "n_head_params": exp.n_head,
        "client_sizes": exp.data.sizes.tolist(),
        "p_realised": [len(r) / len(t) if len(t) else 0.0 for r, t in zip(exp.data.received, exp.data.train)],
        "estimates_mean": {
            key: float(np.mean([e[key] for e in estimates if key in e]))
            for key in ("zeta2", "sigma2", "zeta2_hat", "sigma2_hat", "delta2", "zeta2_ratio")
            if any(key in e for e in estimates)
        },
        "one_minus_p_squared": (1 - config.data.p) ** 2,
        "synthetic_numbers_sent_once": exp.synthetic_numbers,
        "method": config.method["name"],
        **{key: float(sum(r.get(key, 0.0) for r in rows)) for key in ("seconds_local", "seconds_method")},
        **exp.method.report(exp.method_info, state.method),
        **client_summary(rows),
        **cuda_peak(exp.device),
        "seconds": seconds,
    }


def accuracy_summary(rows: list[dict]) -> dict:
    """The round a run diverged at (None: it did not), its final test accuracy (None for a run that diverged: its
    last model is not a number, whatever the rows measured of it) and its best (over the rounds whose model was
    finite): what :func:`summarise` and the ledger's check (:mod:`lab.records.check`) draw from the rows."""
    diverged = next((r["round"] for r in rows if r.get("diverged")), None)
    accuracies = [accuracy for _, accuracy in finite_accuracies(rows)]
    return {
        "diverged_at_round": diverged,
        "final_test_accuracy": accuracies[-1] if accuracies and diverged is None else None,
        "best_test_accuracy": max(accuracies) if accuracies else None,
    }


def cuda_peak(device: torch.device) -> dict:
    """On CUDA, the most GPU memory this process's tensors held (GiB, ``torch.cuda.max_memory_allocated``; CUDA
    graph pools and the allocator's cache come on top): what a lease's scheduler admits a task of this kind with
    next time (lab.campaign.tasks.KIND_GIB). Nothing on the CPU."""
    if device.type != "cuda":
        return {}
    return {"cuda_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "cuda_reserved_peak_gib": torch.cuda.max_memory_reserved(device) / 2**30}  # fmt: skip


def round_row(exp: Experiment, state: EngineState, record: dict, communication: int, seconds: float) -> dict:
    """The metrics row of the round that ended in ``state``: communication so far, timings, test accuracy every
    ``eval_every`` rounds, estimates every ``estimate_every`` rounds, or ``diverged`` for a non-finite model."""
    train, t = exp.config.train, record["round"]
    sent = exp.communication(len(record["clients"])) + record.get("method", {}).get("numbers_sent", 0)
    row = {"round": t, "communication": communication + sent}
    row |= {"clients": len(record["clients"])}
    row |= {
        k: record[k]
        for k in ("seconds_local", "seconds_method", "backend", "backend_note", "fleet", "method")
        if k in record
    }
    if t % train.eval_every == 0 or t == train.rounds:
        row["test_loss"], row["test_accuracy"] = exp.evaluate(state.x)
    if not bool(torch.isfinite(state.x).all()):  # a NaN/inf server model: record it and stop
        row["diverged"] = True
    elif train.estimate_every and (t % train.estimate_every == 0 or t == 1):
        row["estimates"] = exp.measure(state.x, t, state.method)
    if train.client_eval_every and not row.get("diverged") and (t % train.client_eval_every == 0 or t == train.rounds):
        row["client_accuracy"] = exp.client_accuracy(state.x)
    row["seconds"] = seconds
    return to_json(row)  # a diverged model's NaN loss is written as null: the file stays strict JSON


CLIENTS_CSV = "clients.csv"  # every per-client evaluation: round, client, held-out samples, accuracy, loss


CURVE = "curve.png"  # a run's learning curve: test accuracy and loss per round


def client_rows(rows: list[dict]) -> list[list]:
    """The per-client evaluations of a run's metrics rows, one CSV row per (round, client), by client; a client
    without a held-out sample with 0 samples and no accuracy or loss (never left out)."""
    out = []
    for row in rows:
        evaluated = row.get("client_accuracy") or {}
        every = evaluated.get("per_client")
        if every or evaluated.get("unevaluated"):
            every = every or {"client": [], "samples": [], "accuracy": [], "loss": []}
            table = [[row["round"], *values] for values in zip(every["client"], every["samples"], every["accuracy"],
                                                               every["loss"])]  # fmt: skip
            table += [[row["round"], k, 0, None, None] for k in evaluated.get("unevaluated", [])]
            out += sorted(table, key=lambda line: line[1])
    return out


def client_summary(rows: list[dict]) -> dict:
    """The last per-client evaluation's worst client (id, accuracy, samples) and the spread across clients."""
    last = next((r["client_accuracy"] for r in reversed(rows) if (r.get("client_accuracy") or {}).get("per_client")),
                None)  # fmt: skip
    if last is None:
        return {}
    every = last["per_client"]
    k = int(np.argmin(every["accuracy"]))
    worst = {"client": every["client"][k], "accuracy": every["accuracy"][k], "samples": every["samples"][k]}
    unevaluated = {"clients_unevaluated": last["unevaluated"]} if last.get("unevaluated") else {}
    return {"worst_client": worst, "client_accuracy_std": last["std"]} | unevaluated


def write_clients(out: Path, rows: list[dict]) -> None:
    """``clients.csv`` from the metrics rows (rewritten whole: a resumed run's file matches its rows) and, at the
    end, ``clients.png``: the per-client accuracy at each evaluated round."""
    table = client_rows(rows)
    if table:
        write_csv(out / CLIENTS_CSV, ["round", "client", "samples", "accuracy", "loss"], table)


def draw_clients(out: Path, rows: list[dict]) -> None:
    table = client_rows(rows)
    if not table:
        return
    from plots.clients import plot_clients  # matplotlib only when a run draws

    rounds = sorted({r[0] for r in table})
    measured = [[r[3] for r in table if r[0] == t and r[3] is not None] for t in rounds]
    plot_clients(rounds, measured, out / "clients.png")


def draw_curve(out: Path, rows: list[dict], config: RunConfig) -> None:
    """``curve.png``: the test accuracy and loss of every evaluated round (a diverged round's left out)."""
    measured = [(r["round"], r["test_accuracy"], r.get("test_loss")) for r in rows
                if r.get("test_accuracy") is not None and not r.get("diverged")]  # fmt: skip
    if not measured:
        return
    from plots.curve import plot_curve  # matplotlib only when a run draws

    rounds, accuracy, loss = zip(*measured)
    title = f"{out.name}: {config.algorithm['name']}, method {config.method['name']}, {config.data.dataset}"
    plot_curve(list(rounds), list(accuracy), [math.nan if v is None else v for v in loss], out / CURVE, title)


def draw(picture: Picture, out: Path) -> None:
    """The run's writer draws what the run or its method asks for (:class:`fl.methods.Picture`) into ``out``."""
    from plots.samples import plot_grid, plot_soft_grid  # matplotlib only when a run draws

    plot = plot_soft_grid if picture.soft else plot_grid
    plot(picture.images, picture.labels, out / picture.file, title=picture.title)
