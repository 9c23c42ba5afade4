"""What a run folder records about the code and the data that made it, so that a run continued on another day or
another machine never silently mixes two versions.

- ``code_version``: a hash of the code that computes a run's numbers (every module of ``fl`` and ``theory``, as
  parsed syntax without docstrings: comments, docstrings and formatting do not count, any change to what runs
  does); ``git``: the checkout's commit where there is one, for a reader.
- ``synthetic_sha256``: a hash of the synthetic sets a method dealt before training (Fedssyn's D̃_si), so that a
  resume that had to regenerate them (its generator cache is elsewhere now) is checked against the ones it used.

``provenance.json`` is written when a run starts; a resume compares, and appends each accepted change.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np

from theory.errors import InputError
from theory.output import read_object

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
CODE = ("fl", "theory")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@functools.cache
def code_version() -> str:
    """12 hex digits over the syntax of every module of ``fl`` and ``theory`` (docstrings dropped)."""
    digest = hashlib.sha256()
    for package in CODE:
        for path in sorted((PACKAGE_ROOT / package).rglob("*.py")):
            tree = _without_docstrings(ast.parse(path.read_text(), str(path)))
            digest.update(str(path.relative_to(PACKAGE_ROOT)).encode())
            digest.update(ast.dump(tree).encode())
    return digest.hexdigest()[:12]


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
    (out / "provenance.json").write_text(json.dumps(entry, indent=2))


def check_resume(out: Path, synthetic: str | None, at_round: int, accept_code_change: bool) -> str | None:
    """Before resuming ``out`` at ``at_round``: an InputError (one line) when its synthetic sets differ from those
    it started with, or when the code differs and the change is not accepted; a note (one line) for a folder that
    predates ``provenance.json`` or an accepted change, which is recorded."""
    path = out / "provenance.json"
    if not path.exists():
        record(out, synthetic)
        entry = json.loads(path.read_text()) | {"recorded_from_round": at_round}  # rounds before: code unknown
        path.write_text(json.dumps(entry, indent=2))
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
    path.write_text(json.dumps(entry, indent=2))
    return f"{out}: continuing from round {at_round} with code version {code_version()} (was {current}); recorded"
