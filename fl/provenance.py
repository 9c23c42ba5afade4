"""What a run folder records about the code and the data that made it, so that a run continued on another day or
another machine never silently mixes two versions.

- ``code_version``: a hash of the code that computes a run's numbers (every module of ``fl`` and ``theory``, as
  parsed syntax without docstrings: comments, docstrings and formatting do not count, any change to what runs
  does); ``git``: the checkout's commit where there is one, for a reader.
- ``synthetic_sha256``: a hash of the synthetic sets a method dealt before training (Fedssyn's D̃_si), so that a
  resume that had to regenerate them (its generator cache is elsewhere now) is checked against the ones it used.
- ``data``: the data a run read (:meth:`fl.data.Dataset.record`: dataset, folder, sample counts, every file's size
  and sha256, a digest of the arrays): a resume on other data stops (:func:`check_data`).
- ``config_sha256``: the run's config.json as written; a finished run's summary.json keeps the digest of
  provenance.json (:func:`digest`): ``figures ledger add`` refuses a run whose config or provenance was edited since.

``provenance.json`` is written (whole, fsynced) when a run starts; a resume compares, and appends each accepted
change.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from theory.errors import InputError
from theory.output import read_object, write_text_atomically

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
CODE = ("fl", "theory")


def without_docstrings(tree: ast.AST) -> ast.AST:
    """``tree`` with every docstring dropped (an empty body gets ``pass``): what a code hash should not see."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def syntax_digest(files: Iterable[tuple[str, Path]]) -> str:
    """12 hex digits over (name, syntax) of each file (docstrings dropped: comments, docstrings and formatting do
    not count); a file that does not parse counts by its bytes. Ours (:func:`code_version`) and a plug-in's
    (:func:`fl.plugins.digest`)."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        try:
            digest.update(ast.dump(without_docstrings(ast.parse(path.read_text(), str(path)))).encode())
        except SyntaxError:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@functools.cache
def code_version() -> str:
    """12 hex digits over the syntax of every module of ``fl`` and ``theory`` (docstrings dropped)."""
    paths = (path for package in CODE for path in sorted((PACKAGE_ROOT / package).rglob("*.py")))
    return syntax_digest((str(path.relative_to(PACKAGE_ROOT)), path) for path in paths)


def git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(PACKAGE_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def synthetic_hash(sets: list[tuple[np.ndarray, np.ndarray]]) -> str | None:
    """sha256 (12 digits) of the synthetic sets (images, labels) in client order; None without any."""
    if not sets:
        return None
    digest = hashlib.sha256()
    for x, y in sets:
        digest.update(np.ascontiguousarray(x).tobytes())
        digest.update(np.ascontiguousarray(y).tobytes())
    return digest.hexdigest()[:12]


def record(out: Path, synthetic: str | None, where: dict | None = None) -> None:
    """A new run's ``provenance.json``; ``where``: the device and the data it ran on (:func:`fl.run.where_it_ran`)."""
    entry = {"code_version": code_version(), "git": git_commit(), "synthetic_sha256": synthetic, "changes": []}
    entry |= where or {}
    if (out / "config.json").is_file():  # the config as written, so that an edit after the run shows (figures ledger)
        entry["config_sha256"] = hashlib.sha256((out / "config.json").read_bytes()).hexdigest()
    write(out / "provenance.json", entry)


def write(path: Path, entry: dict) -> None:
    """``provenance.json`` replaced whole and fsynced."""
    write_text_atomically(path, json.dumps(entry, indent=2))


def digest(out: Path) -> str | None:
    """sha256 of ``out``'s provenance.json as it stands (None without one): a finished run's summary.json keeps it,
    so that a provenance altered afterwards shows (figures ledger)."""
    path = out / "provenance.json"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def check_resume(out: Path, synthetic: str | None, at_round: int, accept_code_change: bool) -> str | None:
    """Before resuming ``out`` at ``at_round``: an InputError (one line) when its synthetic sets differ from those
    it started with, or when the code differs and the change is not accepted; a note (one line) for a folder that
    predates ``provenance.json`` or an accepted change, which is recorded."""
    path = out / "provenance.json"
    if not path.exists():
        record(out, synthetic)
        entry = json.loads(path.read_text()) | {"recorded_from_round": at_round}  # rounds before: code unknown
        write(path, entry)
        return f"{out}: no provenance.json (an older run); this code version is recorded from round {at_round} on"
    entry = read_object(path, "provenance.json")
    if entry.get("synthetic_sha256") != synthetic:
        raise InputError(
            f"{out}: the synthetic sets differ from those the run started with ({entry.get('synthetic_sha256')} "
            f"vs {synthetic}); point method.cache_dir at the generators it used, or start the run over"
        )
    changes = entry.get("changes") or []
    current = changes[-1].get("code_version") if changes else entry.get("code_version")
    if current == code_version():
        return None
    if not accept_code_change:
        raise InputError(
            f"{out}: rounds before {at_round} were computed by code version {current}, this checkout is "
            f"{code_version()} (git {git_commit()}); resuming would mix the two: start it over, or resume with "
            "--accept-code-change to continue and record the change"
        )
    entry["changes"] = [*changes, {"round": at_round, "code_version": code_version(), "git": git_commit()}]
    write(path, entry)
    return f"{out}: continuing from round {at_round} with code version {code_version()} (was {current}); recorded"


def check_plugins(out: Path, plugins: dict, at_round: int, accept_code_change: bool) -> str | None:
    """Before resuming ``out``: an InputError (one line) when a plug-in's code (:meth:`fl.config.RunConfig.plugins`,
    by config key) differs from the one the run started with, unless the change is accepted (then recorded, and a
    one-line note)."""
    path = out / "provenance.json"
    if not path.exists():  # an older run: check_resume records what there is from here on
        return None
    entry = read_object(path, "provenance.json")
    changes = entry.get("changes") or []
    recorded = next((c["plugins"] for c in reversed(changes) if "plugins" in c), entry.get("plugins") or {})
    then = {key: value.get("sha256") for key, value in recorded.items()}
    now = {key: value.get("sha256") for key, value in plugins.items()}
    if then == now:
        return None
    key = next(k for k in sorted({*then, *now}) if then.get(k) != now.get(k))
    spec = (plugins.get(key) or recorded.get(key))["spec"]
    said = f"plug-in {spec} ({key}) is code {now.get(key)} now, the run started with {then.get(key)}"
    if not accept_code_change:
        raise InputError(
            f"{out}: {said}; rounds before {at_round} were computed by the other: restore it, start the run over, or "
            "resume with --accept-code-change to continue and record the change"
        )
    entry["changes"] = [*changes, {"round": at_round, "plugins": plugins}]
    write(path, entry)
    return f"{out}: continuing from round {at_round} with {said}; recorded"


def data_difference(then: dict, now: dict) -> str | None:
    """How the data found now (``now``, :meth:`fl.data.Dataset.record`) differ from those a run recorded at its start
    (``then``), in a few words; None when they are the same (a record without a digest, from an older run: the same
    dataset, sample counts and folder)."""
    if then.get("sha256") and then["sha256"] == now.get("sha256"):
        return None  # the same arrays (dtype, shape, contents), however they were stored or named
    if then.get("dataset") != now.get("dataset"):
        return f"dataset {then.get('dataset')} then, {now.get('dataset')} now"
    for split in ("train", "test"):
        if then.get(split) != now.get(split):
            return f"{then.get(split)} {split} samples then, {now.get(split)} now"
    if not then.get("sha256"):
        if then.get("folder") != now.get("folder"):
            return f"read from {then.get('folder')} then, {now.get('folder')} now, and the run recorded no checksum"
        return None
    if then["sha256"] == now.get("sha256"):
        return None
    old, new = ({f.get("name"): f.get("sha256") for f in d.get("files") or []} for d in (then, now))
    changed = sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
    return f"other contents: {', '.join(changed)}" if changed else "other contents (the same files, other samples)"


def check_data(out: Path, data: dict) -> str | None:
    """Before resuming ``out``: an InputError (one line) when the data found now (``data``,
    :meth:`fl.data.Dataset.record`) are not those the run started on (another dataset, other sample counts, other
    files or contents: its remaining rounds would train on other data); a note (one line) when the same data are
    read from another folder now. Writes nothing."""
    path = out / "provenance.json"
    if not path.exists():
        return None
    then = read_object(path, "provenance.json").get("data")
    if not isinstance(then, dict):
        return None
    what = data_difference(then, data)
    if what:
        raise InputError(
            f"{out}: the data found now are not those the run started on ({what}); restore the copy it read "
            f"({then.get('folder')}) or let it be found first (data.data_root, $SHUFFLEFL_DATA), or start the run over"
        )
    if then.get("folder") != data.get("folder"):
        return f"{out}: same data, read from {data.get('folder')} now (the run started on {then.get('folder')})"
    return None
