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
import re
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


def canonical(node: object) -> str:
    """The syntax tree ``node`` as text that every supported Python (3.10-3.13) writes alike for the same source:
    each node's class and its fields by name, leaving out the empty ones (None, []) that one version adds and
    another omits (``type_params`` from 3.12, ``ast.dump``'s ``show_empty`` from 3.13)."""
    if isinstance(node, ast.AST):
        fields = ((name, getattr(node, name, None)) for name in node._fields)
        kept = ",".join(f"{name}={canonical(value)}" for name, value in fields if value not in (None, []))
        return f"{type(node).__name__}({kept})"
    if isinstance(node, list):
        return "[" + ",".join(canonical(item) for item in node) + "]"
    return repr(node)


def source_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """12 hex digits over (name, syntax) of each file's source (docstrings dropped: comments, docstrings and
    formatting do not count; the same under every supported Python); a file that does not parse counts by its
    bytes."""
    digest = hashlib.sha256()
    for name, source in files:
        digest.update(name.encode())
        try:
            digest.update(canonical(without_docstrings(ast.parse(source, name))).encode())
        except (SyntaxError, ValueError):  # ValueError: null bytes in the source
            digest.update(source)
    return digest.hexdigest()[:12]


def syntax_digest(files: Iterable[tuple[str, Path]]) -> str:
    """:func:`source_digest` of files on disk: ours (:func:`code_version`) and a plug-in's
    (:func:`fl.plugins.digest`)."""
    return source_digest((name, path.read_bytes()) for name, path in files)


def code_files(names: Iterable[str]) -> list[str]:
    """The names (relative to the package root, ``/``-separated) of the modules :func:`code_version` hashes, in
    the order it hashes them."""
    return sorted((n for n in names if n.endswith(".py") and n.split("/")[0] in CODE), key=Path)


@functools.cache
def code_version() -> str:
    """12 hex digits over the syntax of every module of ``fl`` and ``theory`` (docstrings dropped)."""
    names = code_files(str(p.relative_to(PACKAGE_ROOT).as_posix()) for c in CODE for p in (PACKAGE_ROOT / c).rglob("*"))
    return syntax_digest((name, PACKAGE_ROOT / name) for name in names)


def commit_code_version(commit: str) -> str | None:
    """:func:`code_version` of the source at git ``commit`` of this checkout, hashed by this Python; None where the
    commit or git is not here. A run recorded under another Python (whose old hash differed for the same source)
    is the same code when this equals :func:`code_version`."""
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{4,40}", commit):
        return None
    try:
        listed = subprocess.run(
            ["git", "-C", str(PACKAGE_ROOT), "ls-tree", "-r", "--name-only", commit, "--", *CODE],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if listed.returncode != 0:
            return None
        sources = []
        for name in code_files(listed.stdout.splitlines()):
            shown = subprocess.run(
                ["git", "-C", str(PACKAGE_ROOT), "show", f"{commit}:{name}"], capture_output=True, timeout=30
            )
            if shown.returncode != 0:
                return None
            sources.append((name, shown.stdout))
    except (OSError, subprocess.SubprocessError):
        return None
    return source_digest(sources)


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
    """A new run's ``provenance.json``; ``where``: the device and the data it ran on
    (:func:`fl.experiment.where_it_ran`)."""
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


def last_device(entry: dict) -> str | None:
    """The device the latest rounds of a run ran on: the last one its changes record, else the one it started on."""
    moved = [c["device"] for c in entry.get("changes") or [] if isinstance(c, dict) and c.get("device")]
    return moved[-1] if moved else entry.get("device")


def check_resume(
    out: Path, synthetic: str | None, at_round: int, accept_code_change: bool, where: dict | None = None
) -> str | None:
    """Before resuming ``out`` at ``at_round``: an InputError (one line) when its synthetic sets differ from those
    it started with, or when the code differs and the change is not accepted; a note (one line) for a folder that
    predates ``provenance.json`` or an accepted change, which is recorded. The same source hashed by another
    Python is the same code (its git commit's source, hashed here, is this checkout's: :func:`commit_code_version`).
    ``where`` (:func:`fl.experiment.where_it_ran`): a resume on another device records it, with torch and the core
    count, for the rounds from ``at_round`` on."""
    path = out / "provenance.json"
    if not path.exists():
        if not accept_code_change:  # deleted, or an older run: the code of its rounds is unknown
            raise InputError(
                f"{out}: no provenance.json, so the code that computed rounds 1-{at_round - 1} is unknown; restore it, "
                "start the run over, or resume with --accept-code-change to continue and record this code from here"
            )
        record(out, synthetic, where)  # the device and data from here on: a later resume checks them
        entry = json.loads(path.read_text()) | {"recorded_from_round": at_round}  # rounds before: code unknown
        write(path, entry)
        return f"{out}: no provenance.json; this code version is recorded from round {at_round} on"
    entry = read_object(path, "provenance.json")
    if entry.get("synthetic_sha256") != synthetic:
        raise InputError(
            f"{out}: the synthetic sets differ from those the run started with ({entry.get('synthetic_sha256')} "
            f"vs {synthetic}); point method.cache_dir at the generators it used, or start the run over"
        )
    changes = [c for c in entry.get("changes") or [] if isinstance(c, dict)]
    versions = [c["code_version"] for c in changes if c.get("code_version")]
    current = versions[-1] if versions else entry.get("code_version")
    commits = [c["git"] for c in changes if c.get("git")]
    moved = None
    if where and where.get("device") and where["device"] != last_device(entry):
        moved = {k: where.get(k) for k in ("device", "torch", "cpu_count", "trainer_threads")}
    if current == code_version() or commit_code_version((commits or [entry.get("git")])[-1]) == code_version():
        if current != code_version():  # the same source, hashed by another Python: this hash from here on
            same = {"code_version": code_version(), "git": git_commit(), "same_source": True}
            changes.append({"round": at_round, **same})
        if moved:
            changes.append({"round": at_round, **moved})
        if len(changes) != len(entry.get("changes") or []):
            write(path, entry | {"changes": changes})
        return f"{out}: rounds from {at_round} on run on {moved['device']}; recorded" if moved else None
    if not accept_code_change:
        raise InputError(
            f"{out}: rounds before {at_round} were computed by code version {current}, this checkout is "
            f"{code_version()} (git {git_commit()}); resuming would mix the two: start it over, or resume with "
            "--accept-code-change to continue and record the change"
        )
    change = {"round": at_round, "code_version": code_version(), "git": git_commit()} | (moved or {})
    write(path, entry | {"changes": [*changes, change]})
    return f"{out}: continuing from round {at_round} with code version {code_version()} (was {current}); recorded"


def recorded_plugins(out: Path) -> dict:
    """The plug-ins (by config key: {"spec", "sha256", ...}) the latest rounds of the run in ``out`` ran with; {}
    without a readable record."""
    try:
        entry = read_object(out / "provenance.json", "provenance.json")
    except (InputError, OSError):
        return {}
    changes = [c for c in entry.get("changes") or [] if isinstance(c, dict)]
    recorded = next((c["plugins"] for c in reversed(changes) if "plugins" in c), entry.get("plugins") or {})
    return recorded if isinstance(recorded, dict) else {}


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
    (``then``, checked by :func:`data_record_problem`), in a few words; None when they are the same (a record without
    a digest, from an older run: the same dataset, sample counts and folder)."""
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


def whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# what a data record (fl.data.Dataset.record) holds, by key: whether a value is of that key's form. "sha256" and
# "files" may be absent (a record from before they were kept); the others every record has had.
DATA_FIELDS = {
    "dataset": lambda v: isinstance(v, str) and bool(v),
    "folder": lambda v: isinstance(v, str),
    "train": whole,
    "test": whole,
}
DATA_OPTIONAL = {
    "sha256": lambda v: v is None or (isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None),
    "files": lambda v: isinstance(v, list) and all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in v),
}


def data_record_problem(entry: dict) -> str | None:
    """Why provenance ``entry``'s ``data`` is no record of the data a run read (None: it is one, or there is none
    at all): present but null, not an object, or without its dataset, folder and sample counts in their forms."""
    if "data" not in entry:
        return None
    then = entry["data"]
    if not isinstance(then, dict):
        return f"its 'data' is {'null' if then is None else 'a ' + type(then).__name__}, not the record of a dataset"
    for key, good in DATA_FIELDS.items():
        if key not in then or not good(then[key]):
            return f"its 'data' has {'no ' + repr(key) if key not in then else 'a malformed ' + repr(key)}"
    for key, good in DATA_OPTIONAL.items():
        if key in then and not good(then[key]):
            return f"its 'data' has a malformed {key!r}"
    return None


def check_data(out: Path, data: dict) -> str | None:
    """Before resuming ``out``: an InputError (one line) when the data found now (``data``,
    :meth:`fl.data.Dataset.record`) are not those the run started on (another dataset, other sample counts, other
    files or contents: its remaining rounds would train on other data), or when provenance.json's record of them is
    null or malformed (:func:`data_record_problem`: the check is never skipped on a damaged record); a note (one
    line) when the same data are read from another folder now, or when provenance.json records no data at all (a run
    from before they were recorded, or one whose provenance a resume recorded afresh: the data it continues on
    cannot be compared, and the note says so rather than nothing). A run folder without provenance.json is
    :func:`check_resume`'s to refuse or record. Writes nothing."""
    path = out / "provenance.json"
    if not path.exists():
        return None
    entry = read_object(path, "provenance.json")
    problem = data_record_problem(entry)
    if problem:
        raise InputError(
            f"{path}: {problem}, so the data the run started on cannot be checked; restore its provenance.json, or "
            "start the run over"
        )
    if "data" not in entry:
        return (
            f"{out}: provenance.json records no data (a run from before they were recorded), so the data found now "
            f"({data.get('dataset')} from {data.get('folder')}) cannot be compared with those it started on"
        )
    then = entry["data"]
    what = data_difference(then, data)
    if what:
        raise InputError(
            f"{out}: the data found now are not those the run started on ({what}); restore the copy it read "
            f"({then.get('folder')}) or let it be found first (data.data_root, $SHUFFLEFL_DATA), or start the run over"
        )
    if then.get("folder") != data.get("folder"):
        return f"{out}: same data, read from {data.get('folder')} now (the run started on {then.get('folder')})"
    return None
