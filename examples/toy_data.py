"""Write a small image data set of your own as an npz for ``data.dataset = "npz:PATH"`` (see fl/data/custom.py).

    python examples/toy_data.py toy.npz              # 4 clients, 4 classes, 8x8 grey images

Each client's images lean to two of the classes (a natural non-IID split, ``data.partition = "natural"``); an
image's brightness pattern depends on its class, so a model can learn something in a few rounds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def toy(clients: int = 4, per_client: int = 100, test: int = 100, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    classes = 4
    patterns = rng.uniform(40, 215, (classes, 8, 8))

    def images(labels: np.ndarray) -> np.ndarray:
        noisy = patterns[labels] + rng.normal(0, 100, (len(labels), 8, 8))
        return np.clip(noisy, 0, 255).astype(np.uint8)

    ids = np.repeat(np.arange(clients), per_client)
    favourite = (ids + rng.integers(0, 2, len(ids))) % classes  # client k leans to classes k and k + 1
    labels = np.where(rng.random(len(ids)) < 0.8, favourite, rng.integers(0, classes, len(ids)))
    y_test = rng.integers(0, classes, test)
    return {"x_train": images(labels), "y_train": labels, "client_ids": ids, "x_test": images(y_test), "y_test": y_test}


def main() -> None:
    parser = argparse.ArgumentParser(description="Write a toy npz data set.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    np.savez(args.out, **toy(args.clients))
    print(f"{args.out}: {args.clients} clients; run with data.dataset = 'npz:{args.out}', data.partition = 'natural'")


if __name__ == "__main__":
    main()
