"""How far DynaFed's student gets: for segments drawn as the synthesis draws them, the distance the student trained
on a run's D_syn moves (s' unrolled steps at the run's α, no augmentation) as a fraction of the start-target
distance, the cosine between its move and the way to the target, and the normalised matching loss
(1 − 2·f·cos + f² for a move of fraction f). A diagnostic for a matching loss that stays near 1.

    python -m scripts.dynafed_student_reach --trajectory DSA_RUN/checkpoint_round23.pt \
        --last RUN/checkpoint_round24.pt RUN [RUN ...] [--segments 8] [--seed 1]

``--trajectory``: a checkpoint kept before the synthesis (its DynaFed state holds w^0..w^{L-1}); ``--last``: one
holding w^L (the model of round L, before any fine-tuning); each RUN: a finished DynaFed run folder (its
``checkpoint.pt`` holds D_syn, the soft labels and α; its ``config.json`` the model and the method's settings).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fl.config import build_method
from fl.flat import FlatModel
from fl.methods.dynafed import distance, match_target, unroll
from fl.models import build_model
from theory.cli import ArgumentParser, guarded
from theory.errors import InputError


def load(path: Path) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: no such checkpoint")
    return torch.load(path, map_location="cpu", weights_only=True)


def synthetic_set(run: Path) -> tuple[dict, dict]:
    """(the run's config, its server state with x_syn, y_syn and alpha)."""
    server = load(run / "checkpoint.pt")["method"]["server"]
    if "x_syn" not in server:
        raise InputError(f"{run}: no D_syn in checkpoint.pt (a DynaFed run past its synthesis?)")
    return json.loads((run / "config.json").read_text()), server


@guarded("scripts.dynafed_student_reach")
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.dynafed_student_reach", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectory", type=Path, required=True)
    parser.add_argument("--last", type=Path, required=True)
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    trajectory = load(args.trajectory)["method"]["server"].get("trajectory")
    if trajectory is None:
        raise InputError(f"{args.trajectory}: no DynaFed trajectory (keep a round before the synthesis)")
    trajectory = torch.cat([trajectory, load(args.last)["x"][None].to(trajectory.dtype)])
    sets = {run.name: synthetic_set(run) for run in args.runs}
    config, first = next(iter(sets.values()))
    width = config["model"].get("width", 0)
    x_syn, y_syn = first["x_syn"], first["y_syn"]
    sizes = {"width": width} if width else {}
    model = build_model(config["model"]["name"], tuple(x_syn.shape[1:]), y_syn.shape[1], **sizes)
    flat = FlatModel(model)
    flat.model.eval()
    drawer = build_method(dict(config["method"]))  # the synthesis's own draw of (t, the target's checkpoints)
    draws = np.random.default_rng(args.seed)
    print("t, |w* − w^t|, then per run: |move| / |w* − w^t|, cos(move, w* − w^t), loss")
    for _ in range(args.segments):
        t, middle = drawer.draw_segment(draws, len(trajectory))
        start, target = trajectory[t], match_target(trajectory, t, middle)
        way = target - start
        row = [f"{t:3d}  {float(way.norm()):7.3f}"]
        for cfg, server in sets.values():
            method = build_method(dict(cfg["method"]))
            end = unroll(
                flat.model, flat.named, start, server["x_syn"], server["y_syn"], method.inner_steps,
                server["alpha"], None, method.class_mean,
            ).detach()  # fmt: skip
            move = end - start
            loss = distance(end, start, target, "euclidean")
            cos = F.cosine_similarity(move, way, dim=0)
            row.append(f"{float(move.norm() / way.norm()):.3f} {float(cos):+.3f} {float(loss):.3f}")
        print("  |  ".join(row), flush=True)
    print("runs:", ", ".join(sets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
