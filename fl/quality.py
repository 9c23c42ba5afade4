"""How good a set of synthetic images is, measured against the real data it stands in for: the quality report a
Fedssyn row carries beside its accuracy (Fedssyn's D̃_si made by per-client generators, e.g. the DDPM sets a GPU
lease brings home).

    python -m fl.quality CACHE_DIR --generator ddpm --seed 0 [--min-steps N] [--dataset fmnist] [--out FILE.json]
    python -m fl.quality --run RUN_DIR [CACHE_DIR] [--out FILE.json]

With ``--run``, the sets are those the Fedssyn run in RUN_DIR dealt: its config names the data (its subsample
included), the seed, the generator's settings and the cache (``method.cache_dir``, or CACHE_DIR where the cache has
moved), and the sets found must hash to the ``synthetic_sha256`` its provenance recorded. The real images are then
the run's: its (subsampled) training and test sets.

Three numbers, each against the real training set of the same dataset:

- ``noise_fraction``: the share of synthetic images whose total variation (mean absolute difference of
  neighbouring pixels, pixels in [0, 1]) lies above the 99.9th percentile of the real training images' (a sample a
  generator left as noise has far more variation than any real image); also per client (``noise_by_client``).
- ``label_agreement``: the share of synthetic images a classifier trained on real images labels as their
  generator's label.
- ``synthetic_trained_accuracy`` against ``real_trained_accuracy``: real test accuracy of a classifier trained on
  the synthetic images, and of one trained on as many real training images (drawn at random), by the same recipe.

A classifier trained by this fixed recipe can collapse to chance on a set that other draws of it learn (three
β-VAE sets of the Table 1 grid: 10.0-10.9 % with the report's draw, 32-57 % with five other draws each;
results/NOTEBOOK.md, 2026-11-29): :func:`collapsed` names such a report, and summaries leave its
``synthetic_trained_accuracy`` out and say so (:func:`synthetic_trained`). The report keeps the number it measured.

The classifier: the FedCOG CNN (``fl.models``), SGD lr 0.05 momentum 0.9, batch 64, ``--epochs`` epochs (3), one
torch thread, every draw from ``--seed`` (the sets' seed): the same numbers on every machine with this torch. The
report names the sets (every file and its sha256; ``synthetic_sha256`` is :func:`fl.provenance.synthetic_hash` of
the sets in client order, the digest a run that dealt them records in its provenance), how their generators were
trained (``min_steps``: each client's DDPM trained at least that many steps, 0 where it trained ``epochs`` epochs) and
the code that measured them (``code_version``, git). In the run ledger a report is
``quality/<generator>-<dataset>-seed<S>[-steps<N>].json``, or for the sets of a run (``"chosen_by": "run"``)
``quality/<generator>-<dataset>-seed<S>-sets<synthetic_sha256>.json``: the runs that dealt the same sets (a Table 1
column's algorithms) share one report (:func:`report_name`).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import fl.provenance as provenance
from fl.config import RunConfig, build_method
from fl.data import DataError, Dataset, load
from fl.data.datasets import LAYOUTS, canonical_name
from fl.data.formats import npz_arrays
from fl.experiment import federation
from fl.methods import Setup
from fl.methods.fedssyn import Fedssyn
from fl.models import build_model
from fl.runfolder import saved_config
from fl.synthesis.fedssyn import KEY_FILE
from theory.cli import ArgumentParser, guarded, whole_number
from theory.errors import InputError
from theory.output import read_object, refuse_foreign_json, write_text_atomically

NOISE_QUANTILE = 0.999
COLLAPSE_MARGIN = 0.01  # a classifier within one point of chance accuracy learnt nothing from its set


def total_variation(images: np.ndarray) -> np.ndarray:
    """Per image (N, C, H, W, pixels in [0, 1]): the mean absolute difference of vertically and horizontally
    neighbouring pixels."""
    x = np.asarray(images, dtype=np.float64)
    vertical = np.abs(np.diff(x, axis=-2)).mean(axis=(-3, -2, -1))
    horizontal = np.abs(np.diff(x, axis=-1)).mean(axis=(-3, -2, -1))
    return vertical + horizontal


def noise_threshold(real: np.ndarray, quantile: float = NOISE_QUANTILE) -> float:
    """The total variation above which an image counts as noise: the ``quantile`` of the real images'."""
    return float(np.quantile(total_variation(real), quantile))


def noise_fraction(images: np.ndarray, threshold: float) -> float:
    """The share of ``images`` whose total variation lies above ``threshold``."""
    return float(np.mean(total_variation(images) > threshold)) if len(images) else float("nan")


def as_floats(images: np.ndarray) -> np.ndarray:
    """uint8 images to [0, 1]; float images as they are (checked to be finite and to lie there: a NaN pixel is
    no pixel, and its total variation would count as no noise)."""
    if images.dtype == np.uint8:
        return images.astype(np.float32) / 255.0
    if images.dtype.kind != "f":
        raise InputError(f"images of {images.dtype}: expected uint8 or floats in [0, 1]")
    x = images.astype(np.float32)
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise InputError(f"images holding {bad} non-finite pixel value(s) (NaN or inf): nothing to measure there")
    if x.size and (x.min() < -1e-6 or x.max() > 1 + 1e-6):
        raise InputError(f"images in [{x.min():g}, {x.max():g}]: expected uint8 or floats in [0, 1]")
    return x


def blank(images: np.ndarray) -> np.ndarray:
    """Per image: whether it holds one value throughout (what a generator whose weights are not numbers samples,
    once its NaN pixels are stored as uint8: black)."""
    flat = images.reshape(len(images), -1)
    return flat.min(axis=1) == flat.max(axis=1) if flat.shape[1] else np.ones(len(images), bool)


def check_set(path: Path, x: np.ndarray, y: np.ndarray, shape: tuple[int, ...], n_classes: int) -> None:
    """A synthetic set (``x``, ``y`` of ``path``) the report can measure against real images of ``shape`` and
    ``n_classes`` classes, else a one-line InputError naming the file: images (N, C, H, W) of that shape, uint8
    or finite floats in [0, 1]; N whole-number labels (floats are never truncated into labels) in range."""
    if x.ndim != 4 or tuple(x.shape[1:]) != tuple(shape):
        raise InputError(f"{path}: images of shape {x.shape}, expected (N, {', '.join(map(str, shape))})")
    if y.dtype.kind not in "iu" or y.shape != (len(x),):
        raise InputError(f"{path}: labels of {y.dtype} {y.shape}, expected {len(x)} whole numbers")
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise InputError(f"{path}: labels from {y.min()} to {y.max()}, expected 0 to {n_classes - 1}")
    try:
        as_floats(x)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def chance(dataset: str) -> float | None:
    """Chance accuracy (1/K) on a report's ``dataset`` (a subsample's name ``NAME-subAxB`` included); None for a data
    set of no known layout."""
    try:
        return 1 / LAYOUTS[canonical_name(re.sub(r"-sub\d+x\d+$", "", dataset))].n_classes
    except DataError:
        return None


def collapsed(report: dict) -> bool:
    """Whether the report's classifier trained on the synthetic images ended within :data:`COLLAPSE_MARGIN` of
    chance: the recipe's collapse, not a measure of the set (module docstring)."""
    floor = chance(report["dataset"])
    return floor is not None and report["synthetic_trained_accuracy"] <= floor + COLLAPSE_MARGIN


def synthetic_trained(reports: Sequence[dict]) -> tuple[list[float], int]:
    """The ``synthetic_trained_accuracy`` of the ``reports`` whose classifier did not collapse (:func:`collapsed`),
    and how many did."""
    kept = [r["synthetic_trained_accuracy"] for r in reports if not collapsed(r)]
    return kept, len(reports) - len(kept)


def train_classifier(
    x: np.ndarray, y: np.ndarray, n_classes: int, epochs: int, generator: torch.Generator
) -> torch.nn.Module:
    """The FedCOG CNN trained on (x in [0, 1], y) by SGD (lr 0.05, momentum 0.9, batch 64) for ``epochs``."""
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))  # the model's initial weights
    model = build_model("fedcog-cnn", x.shape[1:], n_classes)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xs, ys = torch.from_numpy(x), torch.from_numpy(np.asarray(y, dtype=np.int64))
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(xs), generator=generator)
        for start in range(0, len(xs), 64):
            batch = order[start : start + 64]
            optimiser.zero_grad()
            F.cross_entropy(model(xs[batch]), ys[batch]).backward()
            optimiser.step()
    return model.eval()


@torch.no_grad()
def predict(model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    xs = torch.from_numpy(x)
    return torch.cat([model(xs[i : i + 1024]).argmax(1) for i in range(0, len(xs), 1024)]).numpy()


def report(
    sets: Sequence[tuple[np.ndarray, np.ndarray]], x_real: np.ndarray, y_real: np.ndarray, x_test: np.ndarray,
    y_test: np.ndarray, n_classes: int, seed: int, epochs: int = 3,
) -> dict:  # fmt: skip
    """The quality report (module docstring) of the synthetic ``sets`` (per client: images, labels) against the
    real training images ``x_real``/``y_real`` and the real test set."""
    if not sets or not sum(len(x) for x, _ in sets):
        raise InputError("no synthetic images to measure")
    with torch_threads(1):
        real, test = as_floats(x_real), as_floats(x_test)
        x_syn = np.concatenate([as_floats(x) for x, _ in sets])
        y_syn = np.concatenate([np.asarray(y, dtype=np.int64) for _, y in sets])
        blanks = blank(x_syn)
        if blanks.all():  # no sample to measure: 0% noise would be a number about nothing
            raise InputError(
                f"every one of the {len(x_syn)} synthetic images is blank (one value throughout): its generator made "
                "nothing to measure (weights that are not numbers?)"
            )
        threshold = noise_threshold(real)
        generator = torch.Generator().manual_seed(seed)
        real_model = train_classifier(real, y_real, n_classes, epochs, generator)
        picked = torch.randperm(len(real), generator=generator)[: len(x_syn)].numpy()
        as_many = train_classifier(real[picked], y_real[picked], n_classes, epochs, generator)
        syn_model = train_classifier(x_syn, y_syn, n_classes, epochs, generator)
        return {
            "images": len(x_syn),
            "noise_threshold": threshold,
            "noise_fraction": noise_fraction(x_syn, threshold),
            "noise_by_client": [noise_fraction(as_floats(x), threshold) for x, _ in sets],
            "blank_fraction": float(np.mean(blanks)),
            "label_agreement": float(np.mean(predict(real_model, x_syn) == y_syn)),
            "real_classifier_test_accuracy": float(np.mean(predict(real_model, test) == y_test)),
            "synthetic_trained_accuracy": float(np.mean(predict(syn_model, test) == y_test)),
            "real_trained_accuracy": float(np.mean(predict(as_many, test) == y_test)),
            "classifier": {
                "model": "fedcog-cnn",
                "optimizer": "sgd",
                "lr": 0.05,
                "momentum": 0.9,
                "batch": 64,
                "epochs": epochs,
                "seed": seed,
            },
        }


class torch_threads:
    """Run with ``n`` torch threads, restored after (the numbers must not depend on the core count)."""

    def __init__(self, n: int):
        self.n, self.before = n, torch.get_num_threads()

    def __enter__(self):
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.before)


def report_name(report: dict) -> str:
    """A quality report's file name in the run ledger: ``<generator>-<dataset>-seed<S>.json``, with ``-steps<N>``
    before ``.json`` for sets whose generators trained at least N steps (``min_steps``), and ``-sets<sha>`` for the
    sets of a run (``chosen_by`` "run"; sha: their ``synthetic_sha256``)."""
    steps = report.get("min_steps") or 0
    return (
        f"{report['generator']}-{report['dataset']}-seed{report['seed']}"
        + (f"-steps{steps}" if steps else "")
        + (f"{SETS}{report['synthetic_sha256']}" if report.get("chosen_by") == "run" else "")
        + ".json"
    )


SETS = "-sets"  # before the digest in the name of a report on the sets of a run (report_name)


def sets_report_glob(digest: str) -> str:
    """The file-name pattern of the report on the sets whose ``synthetic_sha256`` is ``digest`` (:func:`report_name`
    of a report with ``chosen_by`` "run"), whatever their generator, data and seed."""
    return f"*{SETS}{digest}.json"


def recorded_digest(run: Path) -> str:
    """The ``synthetic_sha256`` of the sets the run in folder ``run`` dealt, as its provenance records it; a
    one-line InputError where it records none."""
    recorded = read_object(run / "provenance.json", "provenance.json of a run").get("synthetic_sha256")
    if not isinstance(recorded, str):
        raise InputError(f"{run}: its provenance records no synthetic sets (not started, or started before it dealt)")
    return recorded


def find_sets(cache_dir: Path, generator: str, seed: int, min_steps: int | None = None) -> list[tuple[int, Path]]:
    """(client, npz file) of every set in the generator cache whose generator is ``generator`` trained for the run
    seed ``seed`` (and, where ``min_steps`` is given, with that ``method.min_steps``: 0 for none), in client order;
    an InputError (one line) where none is, or a client has several."""
    if not cache_dir.is_dir():
        raise InputError(f"{cache_dir}: no such generator cache")
    found: dict[int, list[Path]] = {}
    for key_file in sorted(cache_dir.glob(f"*/{KEY_FILE}")):
        key = read_object(key_file, "the key of a generator folder")
        made = key.get("generator") if isinstance(key.get("generator"), dict) else {}
        config = made.get("config") if isinstance(made.get("config"), dict) else {}
        if config.get("generator") != generator or made.get("seed") != seed:
            continue
        if min_steps is not None and config.get("min_steps", 0) != min_steps:
            continue
        sets = key.get("sets") if isinstance(key.get("sets"), dict) else {}
        for name in sorted(sets):
            if (key_file.parent / name).is_file() and name.endswith(".npz") and "/" not in name:
                found.setdefault(int(made.get("client", -1)), []).append(key_file.parent / name)
    trained = "" if min_steps is None else f" at min_steps = {min_steps}"
    if not found:
        raise InputError(f"{cache_dir}: no {generator} sets for seed {seed}{trained}")
    several = [client for client, files in found.items() if len(files) > 1]
    if several:
        hint = "; name one" if min_steps is not None else "; choose by --min-steps"
        raise InputError(
            f"{cache_dir}: client {several[0]} has several {generator} sets for seed {seed}{trained}{hint}"
        )
    return [(client, files[0]) for client, files in sorted(found.items())]


def trained_steps(files: Sequence[tuple[int, Path]]) -> int:
    """The ``method.min_steps`` the sets' generators trained with (0: none); an InputError where they differ."""
    steps = {read_object(path.parent / KEY_FILE, "the key of a generator folder")["generator"]["config"].get(
        "min_steps", 0) for _, path in files}  # fmt: skip
    if len(steps) > 1:
        raise InputError(
            f"the sets' generators trained with different min_steps ({sorted(steps)}); choose by --min-steps"
        )
    return steps.pop()


def run_sets(run: Path, cache_dir: Path | None = None) -> tuple[list[tuple[int, Path]], Dataset, RunConfig]:
    """(client, npz file) of every set the Fedssyn run in folder ``run`` dealt, the data it ran on, and its config:
    found by the config in ``cache_dir`` (default its ``method.cache_dir``); an InputError (one line) where the run
    deals no generator's sets, a set is missing, or the sets found are not those the run's provenance recorded
    (:func:`recorded_digest`)."""
    config = saved_config(run)
    spec = dict(config.method)
    if cache_dir is not None:
        spec["cache_dir"] = str(cache_dir)
    method = build_method(spec)
    if not isinstance(method, Fedssyn):
        raise InputError(f"{run}: method {spec.get('name')!r} deals no sets of per-client generators (fedssyn does)")
    recorded = recorded_digest(run)
    if not Path(method.cache_dir).is_dir():
        raise InputError(f"{method.cache_dir}: no such generator cache (name where it is now: CACHE_DIR)")
    data, split, _ = federation(config)
    paths = method.set_paths(Setup(data, config.train.seed, config.data.p), split)
    missing = [i for i, path in enumerate(paths) if not path.is_file()]
    if missing:
        raise InputError(f"{method.cache_dir}: no synthetic set of client {missing[0]} of the run {run} "
                         f"({len(missing)} of {len(paths)} missing)")  # fmt: skip
    found = provenance.synthetic_hash([read_set(path) for path in paths])
    if found != recorded:
        raise InputError(f"{method.cache_dir}: the sets there for {run} hash to {found}, not to the {recorded} the run "
                         "dealt (remade since?)")  # fmt: skip
    return list(enumerate(paths)), data, config


def read_set(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic set's images and labels (``x``, ``y``), each array's npy header bounded by the file before it
    is read (:func:`fl.data.formats.npz_arrays`: no header claiming more than the file holds is allocated, no
    object array unpickled); a one-line InputError naming the file otherwise."""
    try:
        arrays = npz_arrays(path, ("x", "y"))
    except DataError as error:
        raise InputError(f"not a synthetic set: {error}") from None
    return arrays["x"], arrays["y"]


OWN_KEYS = ("generator", "seed", "dataset", "synthetic_sha256", "sets", "code_version")  # in every report main writes


def own_report(out: Path) -> None:
    """InputError (one line) unless ``--out`` is new or a report fl.quality wrote (a JSON object with every key of
    :data:`OWN_KEYS`): a user's own file there is never replaced, as fl.run never writes over a folder it did not
    make; a symbolic link there (dangling or not) is refused too, and what it points to left as it is."""
    refuse_foreign_json(out, OWN_KEYS, "fl.quality")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m fl.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dir", type=Path, metavar="CACHE_DIR", nargs="?",
                        help="the generator cache (method.cache_dir; with --run, default the run's)")  # fmt: skip
    parser.add_argument("--run", type=Path, metavar="RUN_DIR", help="measure the sets this Fedssyn run dealt")
    parser.add_argument("--generator", help="the generator the sets came from (default ddpm)")
    parser.add_argument("--seed", type=whole_number(0), help="the run seed the sets were made for (without --run)")
    parser.add_argument(
        "--min-steps",
        type=whole_number(0),
        help="only sets whose generators trained with this "
        "method.min_steps (0: those trained `epochs` epochs); default: every set of the seed",
    )
    parser.add_argument("--dataset", help="the real data (default fmnist)")
    parser.add_argument("--data-root", type=Path, help="where the real data is (default: the usual folders)")
    parser.add_argument("--epochs", type=whole_number(1), default=3, help="classifier epochs (default 3)")
    parser.add_argument("--out", type=Path, help="write the report here (JSON) as well as printing it")
    return parser


@guarded("fl.quality")
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    chosen = {"--generator": args.generator, "--seed": args.seed, "--min-steps": args.min_steps,
              "--dataset": args.dataset, "--data-root": args.data_root}  # fmt: skip
    if args.run is not None and any(v is not None for v in chosen.values()):
        parser.error(
            f"--run takes the sets' {next(k for k, v in chosen.items() if v is not None)} from the run's config"
        )
    if args.run is None and (args.cache_dir is None or args.seed is None):
        parser.error("name the sets: CACHE_DIR and --seed, or --run RUN_DIR")
    if args.out is not None:
        own_report(args.out)  # before anything is read or measured
    if args.run is not None:
        files, data, config = run_sets(args.run, args.cache_dir)
        generator, seed, steps = config.method["generator"], config.train.seed, config.method.get("min_steps", 0)
    else:
        generator, seed = args.generator or "ddpm", args.seed
        files = find_sets(args.cache_dir, generator, seed, args.min_steps)
        data, steps = load(args.dataset or "fmnist", args.data_root), trained_steps(files)
    data.check_usable()  # one class or a handful of test images: no numbers
    sets = [read_set(path) for _, path in files]
    for (_, path), (x, y) in zip(files, sets):
        check_set(path, x, y, data.shape, data.n_classes)
    numbers = report(sets, data.x_train, data.y_train, data.x_test, data.y_test, data.n_classes, seed, args.epochs)
    cache = files[0][1].parent.parent
    result = {
        "generator": generator,
        "seed": seed,
        "dataset": data.name,
        "min_steps": steps,
        **({"chosen_by": "run"} if args.run is not None else {}),
        "synthetic_sha256": provenance.synthetic_hash(sets),
        "sets": [
            {
                "client": c,
                "file": str(p.relative_to(cache)),
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            }
            for c, p in files
        ],
        **numbers,
        "code_version": provenance.code_version(),
        "git": provenance.git_commit(),
        "torch": torch.__version__,
    }
    text = json.dumps(result, indent=2)
    if args.out is not None:
        write_text_atomically(args.out, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
