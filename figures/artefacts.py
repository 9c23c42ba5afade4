"""The reproducible artefacts behind results/REPORT.md: each a figure and a table with a claim checked on our numbers.

An :class:`Artefact` knows how to build itself at a *scale* ("quick": seconds, what the tests run; "cpu": minutes
to an hour on 2 cores; "paper": the paper's own setting) into ``ROOT/NAME/SCALE/``: it runs (or reuses) what it
needs, draws its figure (PNG and PDF) and saves ``result.json`` = {table, claim, figures, command, seconds}. A
folder with ``result.json`` is *done* and never rebuilt unless asked (``--force``); a folder without it is
*partial* (an interrupted build: the next one resumes it, its simulator runs being cheap to redo or resumable).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from figures.verdict import HELD, check
from theory.errors import InputError
from theory.output import read_object, replace_durably

SCALES = ("quick", "cpu", "paper")
ROOT = Path("results/figures")
USED: set[Path] = set()  # the run folders the build in progress reads (its result names them: ``runs``)
RESULT_KEYS = ("headers", "rows", "claim")  # what the CLI prints of a result read back
DRAW = {"figures": True}  # False in figures.ledger.rebuild (check, report): a build names its figures, draws none


def used(folders: Iterable[Path]) -> None:
    """Record run folders the artefact being built reads (the run store's and the scripts' readers call it)."""
    USED.update(Path(f) for f in folders)


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
    line each; a scale not listed cannot be built). build(scale, folder) -> Built."""

    name: str
    title: str
    scales: dict[str, str]
    build: Callable[[str, Path], Built]

    def folder(self, scale: str, root: Path = ROOT) -> Path:
        return root / self.name / scale

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

    def make(self, scale: str, root: Path = ROOT, force: bool = False) -> tuple[dict, bool]:
        """The artefact's result at ``scale``: read back when done (and not ``force``), else built; returns
        (result, whether it was built now)."""
        if scale not in self.scales:
            raise InputError(f"artefact {self.name} has no scale {scale!r} (it has: {', '.join(self.scales)})")
        done = None if force else self.result(scale, root)
        if done is not None:
            return done, False
        folder = self.folder(scale, root)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        USED.clear()
        built = self.build(scale, folder)
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
            "runs": sorted(f"{f.parent.name}/{f.name}" for f in USED),
            "seconds": time.perf_counter() - start,
        }
        replace_durably(folder / "result.json", lambda tmp: tmp.write_text(json.dumps(result, indent=2)))
        return result, True


def find(name: str, registry: dict[str, Artefact]) -> Artefact:
    if name not in registry:
        raise InputError(f"unknown artefact {name!r}; known: {', '.join(registry)} (or all)")
    return registry[name]
