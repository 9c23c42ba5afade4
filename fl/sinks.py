"""Live curves: sinks the run loop hands each round's metrics row to, after the row is written.

:class:`TensorBoard` writes every number of the row (``test_accuracy``, ``test_loss``, ``communication``, the
estimates as ``estimates/zeta2``, ``estimates/sigma2_hat``, ..., a method's own logged numbers as ``method/...``,
a list of them, one per client or per iteration, as ``method/KEY/mean``, ``/min``, ``/max`` and ``/last``) plus
``seconds_per_round`` as TensorBoard scalars at step = round, through ``torch.utils.tensorboard`` (the
``tensorboard`` package: ``pip install 'shufflefl[tensorboard]'``). A sink only reads rows: nothing it does
changes a run's numbers. A resumed run purges the events of the rounds it computes again (TensorBoard's
``purge_step``), so the curves hold each round once; a run that gets a folder only when resumed (``fl.run --resume
RUN --tensorboard DIR``) writes its earlier rows there first.

:class:`MLflow` writes the same numbers as MLflow metrics (step = round) into a local MLflow tracking store, a
folder (``pip install 'shufflefl[mlflow]'``: ``mlflow-skinny``, no server, nothing sent anywhere): one MLflow run
per run folder (its tag ``shufflefl.run_folder``), in the experiment ``shufflefl``, with the config's keys as
parameters. One store holds any number of runs (a sweep's arms and seeds). A resumed run continues its MLflow run
and writes each round once: the rounds the store holds already (its tag ``shufflefl.last_round``) are not written
again (a resumed run computes them again to the same numbers on the CPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from theory.cli import marked_by
from theory.errors import InputError
from theory.output import refuse_link, write_text_atomically

EXTRA = "the TensorBoard sink needs the tensorboard package: pip install 'shufflefl[tensorboard]'"
OWNER = ".shufflefl-curves"  # in a curves folder: the run whose curves it holds (its run folder)


def curves_folder(text: str) -> Path:
    """argparse type of ``--tensorboard DIR``: a folder's name; an empty one (the working directory) refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder for the event files (an empty name is the working directory)")
    return Path(text)


def curves_path(root: Path, *parts: str) -> Path:
    """``root/parts...``: the curves folder a tool makes in the folder its user named (``fl.sweep --tensorboard
    DIR``: ``DIR/<run>/seed<s>``). The folders ``parts`` names are the package's: a symbolic link at any of them (to
    a folder or dangling) is refused in one line, so no curves are written through one. ``root``
    itself may be a link its user made (to a bigger disk)."""
    path = Path(root)
    for part in parts:
        path = refuse_link(path / part, "a curves folder")
    return path


def curves_inside(out: Path, target: str | Path) -> None:
    """A curves folder ``target`` inside the run folder ``out`` is the package's: a link at any folder of it, from
    ``out`` down, was planted and is refused in one line (:func:`curves_path`), on a first start as on a resume.
    Compared lexically, never resolved; a target outside ``out`` is a root its user named (it may be a link to a
    bigger disk)."""
    try:
        inside = Path(os.path.abspath(target)).relative_to(os.path.abspath(out)).parts
    except ValueError:
        return
    curves_path(out, *inside)


def require_tensorboard() -> None:
    """One line naming the extra where ``tensorboard`` is not installed."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise InputError(EXTRA) from None


def is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def scalars(row: dict, prefix: str = "") -> Iterable[tuple[str, float]]:
    """(tag, value) of every finite number of a metrics row, nested tables as ``table/key`` (round and the
    cumulative ``seconds`` left out: the step is the round, the sinks write seconds per round). In a method's
    own table (``method/...``: what its hooks logged) a list of numbers (one per client, one per iteration) is
    written as its ``/mean``, ``/min``, ``/max`` and ``/last``."""
    for key, value in row.items():
        if not prefix and key in ("round", "seconds"):
            continue
        if isinstance(value, dict):
            yield from scalars(value, f"{prefix}{key}/")
        elif is_number(value):
            yield f"{prefix}{key}", float(value)
        elif prefix.startswith("method/") and isinstance(value, list) and value and all(map(is_number, value)):
            numbers = [float(v) for v in value]
            yield f"{prefix}{key}/mean", math.fsum(numbers) / len(numbers)
            yield f"{prefix}{key}/min", min(numbers)
            yield f"{prefix}{key}/max", max(numbers)
            yield f"{prefix}{key}/last", numbers[-1]


def per_round(rows: Iterable[dict], seconds: float = 0.0) -> Iterable[tuple[int, list[tuple[str, float]]]]:
    """(round, its (tag, value) pairs) of each row, ``seconds_per_round`` among them (``seconds``: the
    cumulative seconds of the row before the first)."""
    for row in rows:
        values = list(scalars(row))
        if is_number(row.get("seconds")):
            values.append(("seconds_per_round", row["seconds"] - seconds))
            seconds = row["seconds"]
        yield int(row["round"]), values


class TensorBoard:
    """Event files in ``folder`` for the rows to come; ``earlier``: the rows of the rounds before (a resumed run's),
    written first where ``folder`` holds no events yet, else the events from the next round on are purged (from
    round 1 on: a run started anew). ``owner``: the run the curves are of (its run folder), kept in the folder
    (:data:`OWNER`): a folder holding another run's curves is refused in one line, so two runs' curves never join,
    and so is one holding events that no run of ours marked, unless they are ``earlier``'s."""

    def __init__(self, folder: Path, earlier: list[dict] = (), owner: str | None = None) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        backfill = not has_events(folder)
        if owner is not None:
            claim(folder, owner, backfill or bool(earlier))
        folder.mkdir(parents=True, exist_ok=True)
        if owner is not None and not (folder / OWNER).is_file():
            write_text_atomically(folder / OWNER, owner + "\n")
        first = int(earlier[-1]["round"]) + 1 if earlier else 1
        self.writer = SummaryWriter(str(folder), purge_step=None if backfill else first)
        self.seconds = 0.0
        for row in earlier:
            if backfill:
                self.write(row)
            self.seconds = row.get("seconds", self.seconds)

    def write(self, row: dict) -> None:
        step = int(row["round"])
        for tag, value in scalars(row):
            self.writer.add_scalar(tag, value, step)
        if isinstance(row.get("seconds"), int | float):
            self.writer.add_scalar("seconds_per_round", row["seconds"] - self.seconds, step)
            self.seconds = row["seconds"]
        self.writer.flush()  # live: a reader sees the round now, not at the writer's next timed flush

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def has_events(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("events.out.tfevents.*"))


def refuse_tools_folder(folder: Path, flag: str, owner: str) -> None:
    """Refuse (one line) the curves folder ``folder`` (of ``flag``) where a tool marked it as its output folder
    (:data:`theory.cli.OWNER`: a simulator's results, another run's folder, a sweep's), unless it is the folder of
    the run ``owner`` itself: a run's curves are never written among another tool's files."""
    named = marked_by(folder)
    if named is not None and str(folder.resolve()) != owner:
        raise InputError(f"{flag} {folder}: the output folder of {named}, not a curves folder; give the curves a "
                         "folder of their own")  # fmt: skip


def refuse_tools_folders(out: Path, tensorboard: str | Path | None, mlflow: str | Path | None) -> None:
    """:func:`refuse_tools_folder` for each curves folder given (``--tensorboard``, ``--mlflow``) of the run (or
    sweep) in ``out``, before anything is written."""
    for flag, folder in (("--tensorboard", tensorboard), ("--mlflow", mlflow)):
        if folder:
            refuse_tools_folder(Path(folder), flag, str(Path(out).resolve()))


def claim(folder: Path, owner: str, unmarked_ok: bool) -> None:
    """Refuse (one line) the curves folder ``folder`` for the run ``owner`` where a tool marked it as its output
    (:func:`refuse_tools_folder`), where its :data:`OWNER` mark names another run, or where it holds events without
    a mark and not ``unmarked_ok`` (a resumed run's own folder written before marks were kept)."""
    refuse_tools_folder(folder, "--tensorboard", owner)
    mark = folder / OWNER
    try:
        held = mark.read_text().strip() if mark.is_file() and not mark.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        held = "unreadable"
    if held is not None and held != owner:
        raise InputError(f"--tensorboard {folder}: holds the curves of another run ({held}); give {owner} a folder "
                         "of its own")  # fmt: skip
    if held is None and not unmarked_ok and has_events(folder):
        raise InputError(f"--tensorboard {folder}: holds event files of another run; give {owner} a folder of its own")


def holds_curves_of(kind: str, target: Path, owner: str) -> bool:
    """Whether ``target`` holds curves of the run ``owner`` (its run folder, resolved): a TensorBoard folder whose
    :data:`OWNER` mark names it, an MLflow store (``kind`` "mlflow") holding a run tagged with it (:data:`RUN_TAG`,
    read from the store's files: nothing of MLflow is imported). Never through a link at the mark or the tag."""

    def says(path: Path) -> bool:
        try:
            return path.is_file() and not path.is_symlink() and path.read_text().strip() == owner
        except (OSError, UnicodeDecodeError):
            return False

    if kind == "tensorboard":
        return says(target / OWNER)
    return any(says(tag) for tag in target.glob(f"*/*/tags/{RUN_TAG}"))


def curves_of_run_removed(out: Path) -> None:
    """On ``fl.run --overwrite``: the event files of the earlier run in ``out`` and its :data:`OWNER` mark go from the
    TensorBoard folder its config.json's ``[log]`` named, where that folder holds this run's curves by the mark
    (:func:`holds_curves_of`), so the new run's curves start alone and never join the old ones.
    Nothing else goes: a folder of another run's curves, or of no run's, is left as it is, and so are files of
    other names and links (never followed)."""
    try:
        log = json.loads((out / "config.json").read_text()).get("log") or {}
    except (OSError, ValueError, AttributeError):
        return
    target = log.get("tensorboard") if isinstance(log, dict) else None
    if not isinstance(target, str) or not target:
        return
    folder = Path(target)
    if folder.is_symlink() or not holds_curves_of("tensorboard", folder, str(out.resolve())):
        return
    for events in folder.glob("events.out.tfevents.*"):
        if events.is_file() and not events.is_symlink():
            events.unlink()
    (folder / OWNER).unlink()


def resumed_curves(out: Path, log: object, tensorboard: Path | None = None, mlflow: Path | None = None) -> None:
    """Before a resume of the run in ``out`` opens its sinks: where its config.json's ``[log]`` (``log``, as read,
    before the command line's flags) sends curves, each target must hold this run's curves already
    (:func:`holds_curves_of`: the run wrote them there before), unless the command line names that target itself
    (``--tensorboard``, ``--mlflow``: its user's choice) or the run wrote no round yet (a first start: its config
    says where). Else one line naming the key: an edited config.json never sends a resume's curves into a folder
    of its choosing, where they would be written into a user's files. ``[log]`` is no part of a
    run's identity, so this is the one check of it."""
    if not isinstance(log, dict):
        return  # the config's own check refuses a [log] that is not a table
    rows = out / "metrics.jsonl"
    try:
        started = rows.stat().st_size > 0 or (out / "checkpoint.pt").exists()
    except OSError:
        started = (out / "checkpoint.pt").exists()
    if not started:
        return
    owner = str(out.resolve())
    for kind, given in (("tensorboard", tensorboard), ("mlflow", mlflow)):
        target = log.get(kind)
        if not target or not isinstance(target, str) or given is not None:
            continue
        curves_inside(out, target)
        if not holds_curves_of(kind, Path(target), owner):
            raise InputError(
                f"{out / 'config.json'}: log.{kind} = {target} holds no curves of this run (config.json edited "
                f"since it started?); a resume writes curves only where the run wrote them: give --{kind} {target} "
                "to write them there, or restore config.json"
            )


def replay(rows: list[dict], folder: Path, owner: str | None = None) -> None:
    """The rows of a finished run (``owner``: its folder) into ``folder`` (a sweep's curves of a run it reuses),
    unless it holds events."""
    if has_events(folder):
        if owner is not None:
            claim(folder, owner, unmarked_ok=True)
        return
    with TensorBoard(folder, rows, owner):
        pass


MLFLOW_EXTRA = "the MLflow sink needs the mlflow-skinny package: pip install 'shufflefl[mlflow]'"
EXPERIMENT = "shufflefl"  # the MLflow experiment every run of ours goes into
RUN_TAG, LAST_TAG = "shufflefl.run_folder", "shufflefl.last_round"
METRIC_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")  # what MLflow takes in a metric or parameter name


def require_mlflow() -> None:
    """One line naming the extra where ``mlflow`` (``mlflow-skinny``) is not installed."""
    try:
        from mlflow.tracking import MlflowClient  # noqa: F401
    except ImportError:
        raise InputError(MLFLOW_EXTRA) from None


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """``{"train": {"lr": [0.1]}}`` -> ``{"train.lr": "[0.1]"}``: a config's keys as MLflow parameters."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[METRIC_KEY.sub("_", f"{prefix}{key}")] = json.dumps(value) if not isinstance(value, str) else value
    return out


def refuse_links_within(folder: Path, what: str) -> None:
    """A one-line InputError where ``folder`` is, or holds at any depth, a symbolic link: a library that writes
    its own files there (MLflow's file store) would write through it."""
    refuse_link(folder, what)
    for root, folders, files in os.walk(folder):
        for name in (*folders, *files):
            if os.path.islink(os.path.join(root, name)):
                raise InputError(f"{what} {folder}: holds a symbolic link ({os.path.join(root, name)}); refused, "
                                 "nothing written through it")  # fmt: skip


class MLflow:
    """The rows to come as the metrics of one MLflow run in the local tracking store ``folder`` (made where it is
    not; a folder, never a server's address). ``owner``: the run folder the rows are of (its MLflow run is the one
    tagged with it, made on first use with ``name`` and ``params``, the config's keys, as parameters; the store's
    other runs are left as they are). ``earlier``: the rows of the rounds before (a resumed run's); those the store
    does not hold yet are written first. ``rounds``: the run's ``train.rounds``, kept as a tag (an extended run's
    grows; a parameter could not)."""

    def __init__(
        self, folder: Path, earlier: list[dict] = (), owner: str = "", name: str | None = None,
        params: dict | None = None, rounds: int | None = None,
    ) -> None:  # fmt: skip
        refuse_tools_folder(folder, "--mlflow", owner)  # before anything of MLflow: never another tool's folder
        require_mlflow()
        # MLflow 3 keeps its file store behind this switch (it favours a database server); local files are all
        # this sink may write, so it opts in, for this process only
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        folder.mkdir(parents=True, exist_ok=True)
        refuse_links_within(folder, "--mlflow store")  # MLflow writes its files itself: it would follow them
        self.client = MlflowClient(tracking_uri=folder.resolve().as_uri())
        experiment = self.client.get_experiment_by_name(EXPERIMENT)
        if experiment is None:
            try:
                self.client.create_experiment(EXPERIMENT)
            except Exception:  # made meanwhile by another run of a fleet: it is there now
                pass
            experiment = self.client.get_experiment_by_name(EXPERIMENT)
        run = self.find(experiment.experiment_id, owner)
        if run is None:
            run = self.client.create_run(experiment.experiment_id, tags={RUN_TAG: owner, LAST_TAG: "0"}, run_name=name)
            if params:
                from mlflow.entities import Param

                pairs = [Param(k, v[:6000]) for k, v in flatten(params).items()]
                for start in range(0, len(pairs), 100):  # MLflow takes 100 parameters a call
                    self.client.log_batch(run.info.run_id, params=pairs[start : start + 100])
        else:
            self.client.update_run(run.info.run_id, status="RUNNING")
        self.run_id = run.info.run_id
        self.last = int(run.data.tags.get(LAST_TAG, "0") or 0)
        if rounds is not None:
            self.client.set_tag(self.run_id, "train.rounds", str(rounds))
        self.seconds = 0.0
        for row in earlier:
            self.write(row)

    def find(self, experiment: str, owner: str):
        """The MLflow run tagged with ``owner`` in ``experiment`` (the newest where several are), or None."""
        token = None
        while True:
            page = self.client.search_runs([experiment], max_results=1000, page_token=token)
            for run in page:
                if run.data.tags.get(RUN_TAG) == owner:
                    return run
            token = page.token
            if not token:
                return None

    def write(self, row: dict) -> None:
        """The row's numbers at step = its round, unless the store holds that round already."""
        from mlflow.entities import Metric

        (step, values), *_ = per_round([row], self.seconds)
        self.seconds = row.get("seconds", self.seconds)
        if step <= self.last:
            return
        stamp = int(time.time() * 1000)
        metrics = [Metric(METRIC_KEY.sub("_", tag), value, stamp, step) for tag, value in values]
        for start in range(0, len(metrics), 1000):  # MLflow takes 1000 metrics a call
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])
        self.client.set_tag(self.run_id, LAST_TAG, str(step))
        self.last = step

    def close(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status)

    def __enter__(self) -> MLflow:
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close("FINISHED" if kind is None else "KILLED")
