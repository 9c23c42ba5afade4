"""A run folder: the files a run writes there (:data:`RUN_FILES`: what ``--overwrite`` removes, and nothing else),
its lock (:data:`RUN_LOCK`), a new folder made ready (:func:`new_run_folder`), its config read back
(:func:`read_run_config`), the checkpoint a run started from (``init_from.txt``), and a finished or stopped run
extended to more rounds (:func:`extend`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import fl.provenance as provenance
from fl.atomic import locked
from fl.checkpoints import config_key, save_checkpoint
from fl.config import RunConfig, TrainConfig, from_dict, parse_override
from fl.engine import EngineState
from fl.metrics import CLIENTS_CSV, CURVE
from fl.sinks import curves_of_run_removed
from theory.cli import check_dir, make_dir
from theory.errors import InputError
from theory.output import read_object, write_text_atomically

RUN_LOCK = ".running"  # the lock file fl.run holds in a run folder while it runs (it holds the runner's pid)


# Every file fl.run writes in a run folder (and fl.remeasure, its estimates_posthoc.jsonl; a method its pictures and
# its work in progress: HFMDs' pool, DynaFed's D_syn and synthesis), by name, and their temporaries (a write cut short
# leaves NAME.<16 hex>.tmp): what --overwrite removes, and nothing else. Its .shufflefl-output mark and .running lock
# stay (the start rewrites the one and holds the other). tests/fl/test_run_overwrite.py holds this list to what a run
# writes.
RUN_FILES = (
    "config.json", "provenance.json", "init_from.txt", "metrics.jsonl", "checkpoint.pt", "summary.json", CLIENTS_CSV,
    "clients.png", CURVE, "synthetic_samples.png", "hfmds_pool.png", "dynafed_dsyn.png", "dynafed_synthesis.pt",
    "estimates_posthoc.jsonl",
)  # fmt: skip


# a write cut short leaves NAME.<16 hex>.tmp (theory.output.temporary_beside); a plain NAME.tmp is a user's file
KEPT = r"checkpoint_round(?P<kept>[0-9]+)\.pt"  # train.keep_round's checkpoint
TEMPORARY = r"(\.[0-9a-f]{16}\.tmp)?"  # a write's temporary of the name (theory.output.temporary_beside)
RUN_FILE = re.compile(r"(" + "|".join(map(re.escape, RUN_FILES)) + "|" + KEPT + ")" + TEMPORARY)


def run_files(out: Path) -> list[Path]:
    """The files of ``out`` that fl.run (or fl.remeasure) writes there: those of :data:`RUN_FILES`' names or
    ``checkpoint_roundK.pt``, or a temporary of one (a link planted at such a name too: removing it leaves what it
    points to as it is, and a new run would replace it anyway); never a folder or a file of another name."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if RUN_FILE.fullmatch(p.name) and (p.is_symlink() or p.is_file()))


class RunFileNames:
    """The names a run writes in its folder (:data:`RUN_FILE`), as a container: ``name in RUN_NAMES``."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and RUN_FILE.fullmatch(name) is not None


RUN_NAMES = RunFileNames()  # what theory.cli.make_dir refuses to replace in a folder fl.run did not make


def check_run_folder(out: Path, overwrite: bool, instead: str) -> None:
    """What :func:`new_run_folder` refuses of ``out``, in one line, reading only (nothing made or removed): a run
    there already (unless ``overwrite``); a folder fl.run did not make (its mark, or a run's rows of a version before
    marks) holding a file of a name a run writes (:data:`RUN_NAMES`), ``overwrite`` too (the folder rules of
    :func:`theory.cli.check_dir`); and a folder that cannot be made (its nearest existing parent not a writable
    folder)."""
    if (out / "metrics.jsonl").exists() and not overwrite:
        raise InputError(f"{out} already holds a run; {instead}")
    earlier = (out / "metrics.jsonl").is_file()  # a run of a version before the owner file
    check_dir(out, "run directory", tool="fl.run", overwrite=overwrite, writes=RUN_NAMES, earlier=earlier)
    parent = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot create run directory {out}: {parent} is not a folder this process may write in")


def new_run_folder(out: Path, overwrite: bool, instead: str) -> Path:
    """``out`` made ready for a new run (fl.run's folder, :func:`theory.cli.make_dir`), refused in one line where
    :func:`check_run_folder` says (``instead``: what to do, in the caller's terms). With ``overwrite`` the earlier
    run's files go, every one fl.run or fl.remeasure wrote (:func:`run_files`: its checkpoints, the
    ``checkpoint_roundK.pt`` of its ``train.keep_round`` alone, post-hoc estimates, per-client table and pictures
    too, so none is read as the new run's) and nothing else (a user's notes stay), under the folder's lock: never
    while a run is going on in it."""
    check_run_folder(out, overwrite, instead)
    earlier = (out / "metrics.jsonl").is_file()
    folder = make_dir(out, "run directory", tool="fl.run", overwrite=overwrite, writes=RUN_NAMES, earlier=earlier)
    if overwrite:
        with locked(out / RUN_LOCK, busy=f"run directory {out}"):
            curves_of_run_removed(out)  # the earlier run's TensorBoard curves (by its config.json, before it goes)
            kept = kept_round(out)
            for path in run_files(out):
                if path.is_symlink() or kept_name(path.name) in (None, kept):  # a checkpoint_roundK.pt file only
                    path.unlink()  # where the run kept round K (a user's copy of another round stays); a link goes
    return folder


def kept_name(name: str) -> int | None:
    """K of ``checkpoint_roundK.pt`` (or a temporary of it); None for any other name."""
    found = re.fullmatch(KEPT + TEMPORARY, name)
    return int(found.group("kept")) if found else None


def kept_round(out: Path) -> int:
    """The round whose checkpoint the run in ``out`` kept as ``checkpoint_roundK.pt`` (its config's
    ``train.keep_round``); -1 where it kept none or its config.json does not say: then no such file is its."""
    try:
        keep = read_object(out / "config.json", "config.json of the run").get("train", {}).get("keep_round", 0)
    except (InputError, OSError, AttributeError):
        return -1
    return keep if isinstance(keep, int) and not isinstance(keep, bool) and keep > 0 else -1


def read_run_config(out: Path) -> RunConfig:
    """The config a run folder was started with (its ``config.json``), refused in one line if it is none."""
    if not (out / "config.json").is_file():
        raise InputError(f"{out}: not a run directory (no config.json)")
    return from_dict(read_object(out / "config.json", "config.json of the run"))


def relative_origin(checkpoint: Path, out: Path) -> str:
    """What ``init_from.txt`` keeps of the checkpoint a run started from: its path relative to the run folder
    (``../OTHER/checkpoint_round19.pt``), so that a store moved or brought home from a lease still points right."""
    return Path(os.path.relpath(Path(checkpoint).resolve(), Path(out).resolve())).as_posix()


def read_origin(out: Path) -> Path | None:
    """The checkpoint ``out/init_from.txt`` names (relative to ``out``, or absolute as older runs wrote it); None
    without one. A file that is not a path is one line."""
    origin = out / "init_from.txt"
    if not origin.is_file():
        return None
    try:
        text = origin.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if not text or "\0" in text or "\n" in text:
        raise InputError(f"{origin}: not the path of a checkpoint; remove it to start the run from round 1")
    return out / text


def keyed_rounds(out: Path, extra: dict) -> int:
    """The ``train.rounds`` of the config a checkpoint (its ``extra``) was keyed with (:func:`config_key`): its
    ``extra["config_rounds"]``, or, in a checkpoint from before that was kept (or none), the run's config.json's."""
    rounds = extra.get("config_rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool):
        return rounds
    train = read_object(out / "config.json", "config.json of the run").get("train")
    rounds = train.get("rounds", TrainConfig.rounds) if isinstance(train, dict) else TrainConfig.rounds
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else -1


def extended_key(config: RunConfig, rounds: int) -> str | None:
    """:func:`config_key` of ``config`` with ``train.rounds = rounds`` (what a run extended from ``rounds`` rounds
    kept in its checkpoint); None where no config has those rounds."""
    try:
        return config_key(config.extended(rounds))
    except InputError:
        return None


def extension_refusal(config: RunConfig, before: int, rows: list[dict]) -> str | None:
    """Why a run of ``before`` rounds, its metrics ``rows`` so far, cannot go on to ``config.train.rounds`` and
    equal a run of that many rounds from the start, or None. No round's numbers depend on the rounds to come (no
    schedule reads them: the step size is one number or a tuned one, methods see the round alone); what does is
    what a run does at its last round: a test (and per-client) evaluation out of turn, kept in that round's row.
    (A run that diverged stopped there, as a longer run would: its checkpoint of a non-finite model is refused
    before this, :func:`load_checkpoint`, and one from before the divergence computes it again.)"""
    rounds, train = config.train.rounds, config.train
    if not rows or rows[-1]["round"] != before:  # its last round not yet run: nothing done out of turn
        return None
    for key, every in (("eval_every", train.eval_every), ("client_eval_every", train.client_eval_every)):
        if every and before % every:
            return (
                f"its last round {before} was evaluated out of turn (train.{key} = {every} does not divide {before}), "
                f"which a {rounds}-round run would not do; start a {rounds}-round run instead"
            )
    return None


def extend(out: Path, config: RunConfig, before: int, state: EngineState) -> None:
    """Take the run in ``out`` (``before`` rounds, its checkpoint ``state``) on to ``config.train.rounds`` (what
    :func:`extension_refusal` refuses, refused before). Each step survives a stop before the next: the checkpoint
    first records the rounds it was keyed with, the summary of the shorter run goes, config.json says the new
    rounds, and provenance.json records the change (``changes``: the round and ``train.rounds`` [before, after])
    with the new config.json's digest, which ``figures ledger add`` checks. A resume stopped midway repeats what
    is left."""
    rounds = config.train.rounds
    if "config_rounds" not in state.extra:
        state.extra["config_rounds"] = before
        save_checkpoint(out / "checkpoint.pt", state)
    write_rounds(out, rounds)
    path = out / "provenance.json"
    if path.is_file():
        entry = read_object(path, "provenance.json")
        change = {"round": state.round, "train.rounds": [before, rounds]}
        changes = [c for c in entry.get("changes") or [] if isinstance(c, dict)]
        digest = hashlib.sha256((out / "config.json").read_bytes()).hexdigest()
        updated = entry | {"changes": changes + ([] if change in changes else [change])}
        updated |= {"config_sha256": digest} if "config_sha256" in entry else {}
        if updated != entry:
            provenance.write(path, updated)
    print(f"{out}: extended from {before} to {rounds} rounds (train.rounds), from round {state.round} on",
          file=sys.stderr)  # fmt: skip


def write_rounds(out: Path, rounds: int) -> None:
    """``train.rounds = rounds`` into the run folder's config.json (nothing else of it changes) and its summary, of
    the shorter run, removed first."""
    (out / "summary.json").unlink(missing_ok=True)  # no longer this run's result
    tree = read_object(out / "config.json", "config.json of the run")
    if tree.get("train", {}).get("rounds") != rounds:
        tree.setdefault("train", {})["rounds"] = rounds
        write_text_atomically(out / "config.json", json.dumps(tree, indent=2))


def extension_rounds(sets: Sequence[str]) -> int | None:
    """The N of ``--set train.rounds=N`` given with ``--resume`` (the one key a resume may set: it extends the
    run to N rounds); None without ``--set``. Any other key is refused in one line."""
    rounds = None
    for text in sets:
        path, value = parse_override(text)
        if path != ["train", "rounds"]:
            raise InputError(
                "--resume takes the run's own config; drop --config/--set (--set train.rounds=N alone, more rounds "
                "than the run has, extends it)"
            )
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(f"config train.rounds: expected int, got {value!r}")
        rounds = value
    return rounds


def saved_config(out: Path) -> RunConfig:
    """The config of the run folder ``out`` (its config.json, earlier layouts too); a missing, corrupt or invalid
    one is a one-line InputError."""
    tree = read_object(out / "config.json", "config.json of a run")
    try:
        return from_dict(tree)
    except InputError as error:
        raise InputError(f"{out / 'config.json'}: not a valid run config ({error})") from None
    except (TypeError, ValueError, KeyError, AttributeError) as error:  # a tree from_dict does not expect
        raise InputError(f"{out / 'config.json'}: not a valid run config ({type(error).__name__}: {error})") from None
