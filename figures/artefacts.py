"""The reproducible artefacts behind results/REPORT.md: each a figure and a table with a claim checked on our numbers.

An :class:`Artefact` knows how to build itself at a *scale* ("quick": seconds, what the tests run; "cpu": minutes
to an hour on 2 cores; "paper": the paper's own setting) into ``ROOT/NAME/SCALE/``: it runs (or reuses) what it
needs, draws its figure (PNG and PDF) and saves ``result.json`` = {table, claim, figures, command, seconds}. A
folder with ``result.json`` is *done* and never rebuilt unless asked (``--force``; the CLI asks whenever the run
store is the run ledger, which builds only read); a folder without it is
*partial* (an interrupted build: the next one resumes it, its simulator runs being cheap to redo or resumable).

Every build is handed one :class:`Build`: its scale and folder, and what the caller chose (the CLI's ``--jobs``,
``--runs``, ``--rerun-sims``; :func:`figures.ledger.rebuild`'s "draw nothing"; ``python -m figures status``'s
:class:`Plan`). The build passes it on to what runs or reads for it, which records there the run folders it read
(``used``). No module state: two builds never see each other's settings.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from figures.verdict import HELD, check
from theory.cli import OWNER
from theory.errors import InputError
from theory.output import read_object, refuse_link, replace_durably, write_text_atomically

SCALES = ("quick", "cpu", "paper")
ROOT = Path("results/figures")
RESULT_KEYS = ("headers", "rows", "claim")  # what the CLI prints of a result read back


def store(root: Path, runs: Path | None = None) -> Path:
    """Where the run store (``_runs``, ``_synthetic``, ``runs``) lives: ``runs`` (``--runs``) or ``$SHUFFLEFL_RUNS``
    where given (keep long runs outside a work tree that may be laid anew), else beside the artefacts under
    ``root``."""
    chosen = runs or os.environ.get("SHUFFLEFL_RUNS")
    return Path(chosen).expanduser() if chosen else root


def mark_figures(*folders: Path) -> None:
    """Mark ``folders`` (those figures made: the root where it made it, an artefact's folders) as the package's
    output (:data:`theory.cli.OWNER` naming figures; a file there already, another tool's included, stays): a command
    run from inside one then takes the working directory off ``sys.path`` (:mod:`theory.datafolder`), so nothing
    planted there runs."""
    for folder in dict.fromkeys(folders):  # a link planted at the mark is replaced, never followed
        if (folder / OWNER).is_symlink() or not os.path.lexists(folder / OWNER):
            write_text_atomically(folder / OWNER, "figures\n")


@dataclass
class Plan:
    """What ``python -m figures status`` collects instead of running (:func:`figures.flruns.plan`): the (artefact,
    arm, seed, config, folder) of every run the builds would use, and the (artefact, arm, reason) of each optional
    arm they would leave out (:func:`figures.flruns.run_with_optional`)."""

    tasks: list[tuple] = field(default_factory=list)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class Build:
    """One build of one artefact, handed to its ``build`` function and passed on to what it calls.

    ``scale`` and ``folder`` (``ROOT/NAME/SCALE``, :meth:`Artefact.folder`; its grandparent is the artefacts'
    ``root``); ``jobs``: FL runs at a time (``--jobs``); ``runs``: the run store as chosen (``--runs``; None:
    ``$SHUFFLEFL_RUNS``, else ``root``: :attr:`store`); ``rerun_sims``: run the simulators even when the store is a
    run ledger (``--rerun-sims``); ``draw``: draw the figures (False in :func:`figures.ledger.rebuild`: a result
    names its figures, none is drawn); ``plan``: where planning (``python -m figures status``) records the runs
    instead of running them (None: a build). ``used`` gathers the run folders the build reads (:meth:`use`; its
    result names them, ``runs``). One Build per build."""

    scale: str
    folder: Path
    jobs: int = 1
    runs: Path | None = None
    rerun_sims: bool = False
    draw: bool = True
    plan: Plan | None = None
    used: set[Path] = field(default_factory=set)

    @property
    def root(self) -> Path:
        """The artefacts' root (``--root``): the folder holding ``NAME/SCALE``."""
        return self.folder.parent.parent

    @property
    def store(self) -> Path:
        """The run store this build reads and runs in (:func:`store`)."""
        return store(self.root, self.runs)

    def use(self, folders: Iterable[Path]) -> None:
        """Record run folders this build reads (the run store's and the scripts' readers call it)."""
        self.used.update(Path(f) for f in folders)


@dataclass(frozen=True)
class Claim:
    """A paper's claim judged on our numbers: ``verdict`` one of :data:`figures.verdict.WORDS` (given by the rule of
    :mod:`figures.verdict`), ``text`` the sentence the report prints, ``size`` ours against the paper's number where
    the claim has one ("" where it has none)."""

    verdict: str
    text: str
    size: str = ""

    def __post_init__(self) -> None:
        check(self.verdict)

    @property
    def held(self) -> bool:
        return self.verdict == HELD

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "held": self.held, "text": self.text, "size": self.size}


@dataclass(frozen=True)
class Built:
    """What a build returns: the table (headers, rows of numbers or strings; the paper's values as columns where
    it has them), the claim, the figure files (relative to the artefact's scale folder), the numbers it rests on, and
    notes for the reader (an optional arm left out, and why)."""

    headers: list[str]
    rows: list[list]
    claim: Claim
    figures: list[str]
    numbers: dict
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Artefact:
    """name: the CLI's name. title: the paper's figure or table it reproduces. scales: what each scale runs (one
    line each; a scale not listed cannot be built). build(Build) -> Built; None only while planning (a
    :class:`Build` with a ``plan``: an FL artefact records its runs and stops there)."""

    name: str
    title: str
    scales: dict[str, str]
    build: Callable[[Build], Built | None]

    def folder(self, scale: str, root: Path = ROOT) -> Path:
        return root / self.name / scale

    def context(self, scale: str, root: Path = ROOT, **settings) -> Build:
        """A :class:`Build` of this artefact at ``scale`` into its folder under ``root``; ``settings`` are the
        Build's other fields (jobs, runs, rerun_sims, draw, plan)."""
        return Build(scale, self.folder(scale, root), **settings)

    def state(self, scale: str, root: Path = ROOT) -> str:
        folder = self.folder(scale, root)
        if (folder / "result.json").exists():
            return "done"
        return "partial" if folder.exists() else "missing"

    def command(self, scale: str) -> str:
        return f"python -m figures {self.name} --scale {scale}"

    def result(self, scale: str, root: Path = ROOT) -> dict | None:
        """The artefact's ``result.json`` at ``scale`` (None: not built). One that is a symbolic link (never read or
        written through), no JSON object or not of a build's shape is a one-line InputError naming it."""
        path = self.folder(scale, root) / "result.json"
        if path.is_symlink():
            raise InputError(f"{path}: a symbolic link, not a result this tool wrote; refused (--force builds the "
                             "artefact anew and replaces it, never writing through it)")  # fmt: skip
        if not path.exists():
            return None
        found = read_object(path, "result.json of an artefact (--force builds it anew)")
        claim = found.get("claim")
        if not all(key in found for key in RESULT_KEYS) or not isinstance(claim, dict) or "text" not in claim:
            raise InputError(f"{path}: not a result of python -m figures (no {', '.join(RESULT_KEYS)}); --force "
                             "builds it anew")  # fmt: skip
        return found

    def make(self, ctx: Build, force: bool = False) -> tuple[dict, bool]:
        """The artefact's result at ``ctx``'s scale (``ctx``: :meth:`context`): read back when done (and not
        ``force``), else built; returns (result, whether it was built now). ``ctx.used`` names, after, the run
        folders the build read (also when it failed)."""
        scale, root = ctx.scale, ctx.root
        if scale not in self.scales:
            raise InputError(f"artefact {self.name} has no scale {scale!r} (it has: {', '.join(self.scales)})")
        if ctx.folder != self.folder(scale, root) or ctx.plan is not None:
            raise ValueError(f"{self.name}: make takes a Build into {self.folder(scale, root)} and without a plan")
        done = None if force else self.result(scale, root)
        if done is not None:
            return done, False
        for folder in (root / self.name, ctx.folder):  # never a user's folder through a link planted there
            refuse_link(folder, f"artefact folder of {self.name}")
        made = [f for f in (ctx.folder, *ctx.folder.parents) if not os.path.lexists(f)]
        ctx.folder.mkdir(parents=True, exist_ok=True)
        mark_figures(*made, root / self.name, ctx.folder)
        start = time.perf_counter()
        built = self.build(ctx)
        assert built is not None  # None only while planning
        result = {
            "name": self.name,
            "title": self.title,
            "scale": scale,
            "setting": self.scales[scale],
            "command": self.command(scale),
            "headers": built.headers,
            "rows": built.rows,
            "claim": built.claim.to_dict(),
            "figures": built.figures,
            "numbers": built.numbers,
            "notes": list(built.notes),
            "runs": sorted(f"{f.parent.name}/{f.name}" for f in ctx.used),
            "seconds": time.perf_counter() - start,
        }
        replace_durably(ctx.folder / "result.json", lambda tmp: tmp.write_text(json.dumps(result, indent=2)))
        return result, True


def find(name: str, registry: dict[str, Artefact]) -> Artefact:
    if name not in registry:
        raise InputError(f"unknown artefact {name!r}; known: {', '.join(registry)} (or all)")
    return registry[name]
