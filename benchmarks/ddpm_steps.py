"""How many steps one client's DDPM needs: a client of a Fedssyn config trained for ``--min-steps`` optimiser steps
(``method.min_steps``), its synthetic set's quality beside another set of the same client (e.g. a lease's).

    python benchmarks/ddpm_steps.py --compare ~/.cache/shufflefl/_synthetic     # seed 0's smallest client, 2,000 steps

Issue #49: on the 2026-11-27 lease every client's DDPM trained 20 epochs, so the smallest clients took 80-100 steps
and sampled noise. This trains one client (``--client``: "smallest" by its D_i, or an index) of ``--config``
(default configs/fedssyn_fmnist_ddpm.toml, ``--set`` overrides) for seed ``--seed`` with ``method.min_steps`` =
``--min-steps`` (its cache in ``--cache``; resumable, per epoch), samples its ñ images as Fedssyn does, and reports
for it and for each set of that client and seed found in ``--compare`` (a generator cache): the share of images that
are noise (total variation above the real images' 99.9th percentile, :mod:`fl.quality`) and a real-trained
classifier's agreement with their labels (the FedCOG CNN, 3 epochs on the real training images). Writes JSON
(``--out``, default results/bench/ddpm_steps.json).
"""

from __future__ import annotations

import json
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from theory.cli import ArgumentParser, json_out_problem, positive_int  # noqa: E402
from theory.errors import InputError  # noqa: E402
from theory.output import write_text_atomically  # noqa: E402


def client_of(text: str) -> str | int:
    """``--client``: "smallest" or a client index (≥ 0)."""
    if text == "smallest":
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(text)


def measured(x: np.ndarray, y: np.ndarray, threshold: float, classifier) -> dict:
    import fl.quality as quality

    images = quality.as_floats(x)
    return {
        "images": len(images),
        "noise_fraction": quality.noise_fraction(images, threshold),
        "label_agreement": float(np.mean(quality.predict(classifier, images) == np.asarray(y))),
    }


def compared(cache: Path, seed: int, client: int) -> list[tuple[dict, np.ndarray, np.ndarray]]:
    """Each set of ``client`` for ``seed`` in the generator cache ``cache``: (its generator's key, x, y). A key.json
    or a set that is not what the cache writes (cut short, of another shape, a set named outside its folder, other
    arrays: uint8 images x (n, C, H, W) and n whole labels y) is an InputError naming the file."""
    found = []
    for folder in sorted(cache.glob(f"client{client}-*")):
        key = folder / "key.json"
        if not key.is_file():
            continue
        try:
            keys = json.loads(key.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):
            raise InputError(f"{key}: not a generator's key (cut short or damaged)") from None
        generator = keys.get("generator") if isinstance(keys, dict) else None
        sets = keys.get("sets", {}) if isinstance(keys, dict) else None
        if not isinstance(generator, dict) or not isinstance(sets, dict) or not isinstance(generator.get("config"),
                                                                                           dict):  # fmt: skip
            raise InputError(f"{key}: not a generator's key (no generator config or sets table)")
        if generator.get("seed") != seed or generator.get("client") != client:
            continue
        for name in sorted(sets):
            if Path(name).name != name or not name.endswith(".npz") or not isinstance(sets[name], dict):
                raise InputError(f"{key}: names the set {name!r}, not a .npz file of its folder")
            found.append(({"folder": folder.name, **generator["config"], **sets[name]}, *read_set(folder / name)))
    return found


def read_set(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A cached synthetic set's images and labels, checked (InputError naming ``path``)."""
    try:
        with np.load(path, allow_pickle=False) as held:
            x, y = held["x"], held["y"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise InputError(f"{path}: not a synthetic set (x and y) of the cache ({type(error).__name__})") from None
    if x.dtype != np.uint8 or x.ndim != 4 or y.ndim != 1 or y.dtype.kind not in "iu" or len(y) != len(x):
        raise InputError(f"{path}: holds x {x.dtype} {x.shape} and y {y.dtype} {y.shape}, not uint8 images "
                         "(n, C, H, W) with n whole labels")  # fmt: skip
    return x, y


OWN_KEYS = ("config", "seed", "client", "client_sizes", "trained")  # in every JSON the bench writes (--out)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="ddpm_steps.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "fedssyn_fmnist_ddpm.toml")
    parser.add_argument("--set", action="append", default=[], help="overrides of the config (KEY=VALUE)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--client", type=client_of, default="smallest", help='"smallest" (default) or an index')
    parser.add_argument("--min-steps", type=positive_int, default=2000)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "shufflefl" / "ddpm-steps" / "cache")
    parser.add_argument("--compare", type=Path, help="a generator cache holding other sets of the client")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "ddpm_steps.json")
    args = parser.parse_args(argv)
    if (problem := json_out_problem(args.out, "ddpm_steps.json", OWN_KEYS, parser.prog)) is not None:
        parser.error(problem)
    if not args.config.is_file():
        parser.error(f"--config {args.config}: no such file")
    if args.compare is not None and not args.compare.is_dir():
        parser.error(f"--compare {args.compare}: no such folder")
    try:
        result = measure(args)
    except InputError as error:
        parser.error(str(error))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.out, json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


def measure(args) -> dict:
    import fl.quality as quality
    from fl.config import build_method, load_config
    from fl.experiment import federation
    from fl.synthesis.fedssyn import synthesize_client

    torch.set_num_threads(args.threads)
    sets = [*args.set, f"train.seed={args.seed}", f"method.min_steps={args.min_steps}"]
    config = load_config(args.config, [*sets, f"method.cache_dir='{args.cache}'"])
    if config.method.get("name") != "fedssyn":
        raise InputError(f"--config {args.config}: method {config.method.get('name')!r}, not fedssyn")
    data, split, _ = federation(config)
    sizes = [len(index) for index in split.original]
    i = int(np.argmin(sizes)) if args.client == "smallest" else args.client
    if not 0 <= i < len(sizes):
        raise InputError(f"--client {i}: the config has clients 0-{len(sizes) - 1}")
    start = time.perf_counter()
    try:
        x, y, info = synthesize_client(data, split.original[i], i, build_method(config.method).protocol(), args.seed,
                                       args.cache)  # fmt: skip
    except OSError as error:
        raise InputError(f"--cache {args.cache}: {error.filename or ''}: {error.strerror or error}") from None
    except (ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as error:
        # a generator folder the synthesis reads without checking it (a cut key.json or generator.json)
        said = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise InputError(
            f"--cache {args.cache}: client {i}'s generator folder client{i}-* is damaged "
            f"({type(error).__name__}: {said}); remove it to train the client again"
        ) from None
    seconds = time.perf_counter() - start
    real = quality.as_floats(data.x_train)
    threshold = quality.noise_threshold(real)
    with quality.torch_threads(args.threads):
        classifier = quality.train_classifier(real, data.y_train, data.n_classes, 3, torch.Generator().manual_seed(0))
    result = {
        "config": str(args.config), "set": args.set, "seed": args.seed, "client": i, "client_size": sizes[i],
        "client_sizes": sizes, "noise_threshold": threshold, "min_steps": args.min_steps,
        "epochs": info.get("epochs"), "seconds_train": info.get("seconds_train"),
        "seconds_sample": info.get("seconds_sample"), "seconds_here": seconds, "cached": info.get("cached"),
        "trained": measured(x, y, threshold, classifier), "compared": [],
    }  # fmt: skip
    if args.compare is not None:
        result["compared"] = [{"set": key, **measured(cx, cy, threshold, classifier)}
                              for key, cx, cy in compared(args.compare, args.seed, i)]  # fmt: skip
    return result


if __name__ == "__main__":
    sys.exit(main())
