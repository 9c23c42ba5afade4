"""results/REPORT.md's generated sections: the claims table at the top and the artefacts' blocks, both rebuilt from
the run ledger (:mod:`figures.ledger`) and nothing else.

Each section sits between two marker lines; everything outside them is hand-written and never touched. Per
artefact and scale: the title, scale and setting, the exact command, the figure paths, the table, the claim sentence
computed from the numbers and the ledger runs it rests on; an artefact whose runs are not all in the ledger says
which are missing instead of showing numbers. Nothing in a section depends on when or where it was built (no
seconds, figure paths under ``results/figures``), so ``python -m figures check`` can compare it byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from figures.artefacts import ROOT, Artefact
from theory.errors import InputError
from theory.output import write_text_atomically

BEGIN = "<!-- python -m figures: generated section, do not edit by hand -->"
END = "<!-- end of the generated section -->"
CLAIMS_BEGIN = "<!-- python -m figures: claims table, generated, do not edit by hand -->"
CLAIMS_END = "<!-- end of the claims table -->"


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value).replace("|", "/")


def table(headers: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows),
    ]


def block(artefact: Artefact, scale: str, result: dict | None, failure: str | None) -> list[str]:
    """One artefact at one scale: its numbers and claim, or why it was not rebuilt from the ledger."""
    lines = [f"### {artefact.name} ({scale}): {artefact.title}", ""]
    if result is None:
        return [*lines, f"Setting: {artefact.scales[scale]}. **Not rebuilt from the ledger.** {failure}", ""]
    claim, folder = result["claim"], artefact.folder(scale, ROOT)
    runs = result.get("runs", [])
    return [
        *lines,
        f"Setting: {result['setting']}. Command: `{result['command']} --runs results/ledger`. "
        f"Figures: {', '.join(f'`{folder / f}`' for f in result['figures'])}.",
        "",
        *table(result["headers"], result["rows"]),
        "",
        f"**Verdict: {claim['verdict']}.** {claim['text']}",
        "",
        *(line for note in result.get("notes", []) for line in (f"Note: {note}", "")),
        f"Ledger runs ({len(runs)}): " + (", ".join(f"`{r}`" for r in runs) or "none (a simulator's summary)") + ".",
        "",
    ]


def section(artefacts: dict[str, Artefact], built: dict[tuple[str, str], dict | str], scales: Sequence[str]) -> str:
    """The artefacts' section from ``built``: (name, scale) -> the result, or a string saying why there is none."""
    lines = [BEGIN, "## Artefacts, rebuilt from the run ledger (`python -m figures check`)", ""]
    for artefact in artefacts.values():
        for scale in scales:
            if (artefact.name, scale) in built:
                outcome = built[artefact.name, scale]
                result, failure = (outcome, None) if isinstance(outcome, dict) else (None, outcome)
                lines += block(artefact, scale, result, failure)
    return "\n".join([*lines, END])


def between(text: str, begin: str, end: str) -> str | None:
    """The text from ``begin`` to ``end`` (both included), None where either marker is missing."""
    if begin not in text or end not in text:
        return None
    return begin + text.split(begin, 1)[1].split(end, 1)[0] + end


def replace(text: str, begin: str, end: str, new: str) -> str:
    """``text`` with its part from ``begin`` to ``end`` replaced by ``new`` (appended where there is none)."""
    old = between(text, begin, end)
    return text.replace(old, new) if old is not None else f"{text.rstrip()}\n\n{new}\n"


def own_report(path: Path) -> None:
    """Refuse (one line) a ``--report`` file that exists and holds none of the generated sections: a file this tool
    did not write, which rewriting would append to."""
    if not path.exists():
        return
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: unreadable as a report ({type(error).__name__})") from None
    if between(text, CLAIMS_BEGIN, CLAIMS_END) is None and between(text, BEGIN, END) is None:
        raise InputError(
            f"{path} holds no generated section of python -m figures (not a report it wrote): left as it is; "
            "give --report a new file or the report"
        )


# The prose that REPORT held by hand between its two generated sections before the claims section generated it
# (figures.evidence): its headings, from the first to the last.
HAND_WRITTEN = ("## The evidence, claim by claim", "## What none of this tests")


def without_hand_written_copy(text: str) -> str:
    """``text`` without the hand-written copy of the evidence prose between the claims section and the artefacts'
    section, once the claims section holds the generated one: the same headings twice would leave the hand-typed
    numbers beside the generated ones. Nothing else is touched; a report without that copy is returned as it is."""
    claims = between(text, CLAIMS_BEGIN, CLAIMS_END)
    if claims is None or HAND_WRITTEN[0] not in claims or BEGIN not in text.split(CLAIMS_END, 1)[1]:
        return text  # no generated prose yet, or the artefacts' section before the claims: nothing between them
    head, tail = text.split(CLAIMS_END, 1)
    middle, rest = tail.split(BEGIN, 1)
    start = middle.find(HAND_WRITTEN[0])
    if start < 0 or HAND_WRITTEN[-1] not in middle[start:]:
        return text
    return head + CLAIMS_END + middle[:start].rstrip("\n") + "\n\n" + BEGIN + rest


def write_sections(path: Path, claims: str, artefacts: str) -> None:
    """The generated sections of the report ``path`` replaced (a new file: made); a file that holds none of them is
    not a report this tool writes, and is refused untouched (one line). Written whole and fsynced. The hand-written
    copy of the evidence prose the claims section now generates is dropped (:func:`without_hand_written_copy`)."""
    own_report(path)
    text = path.read_text() if path.exists() else "# Measured results\n"
    text = replace(replace(text, CLAIMS_BEGIN, CLAIMS_END, claims), BEGIN, END, artefacts)
    write_text_atomically(path, without_hand_written_copy(text))
