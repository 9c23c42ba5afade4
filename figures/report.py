"""results/REPORT.md's generated section, from the artefacts' saved results (``result.json``).

The section sits between two marker lines; everything outside them is hand-written and never touched. Per
artefact and built scale: the title, scale and setting, the exact command, the figure paths, the table, and the
claim sentence computed from the numbers; then the artefacts not built yet, by scale (the paper scale: left for a GPU),
each with its command.

``results/`` is not committed, so a fresh checkout has none of the results behind the committed report: an artefact
and scale with no local result keeps its block from the report being replaced (:func:`earlier_blocks`), marked as
carried over, and is rebuilt only when asked. Building one artefact never erases another's numbers.
"""

from __future__ import annotations

from pathlib import Path

from figures.artefacts import ROOT, SCALES, Artefact

BEGIN = "<!-- python -m figures: generated section, do not edit by hand -->"
END = "<!-- end of the generated section -->"


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


CARRIED = "*(Carried over from an earlier build: no result for it under this checkout's results/.)*"


def earlier_blocks(text: str) -> dict[tuple[str, str], list[str]]:
    """The per-artefact blocks of an existing generated section, by (name, scale): each starts at its
    ``### name (scale): title`` line and runs to the next block or the list of what is not built."""
    if BEGIN not in text or END not in text:
        return {}
    body = text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()
    blocks, current = {}, None
    for line in body:
        if line.startswith("### ") and " (" in line and "):" in line:
            name, scale = line[4:].split(" (", 1)[0], line.split(" (", 1)[1].split(")", 1)[0]
            current = blocks.setdefault((name, scale), [])
        elif line.startswith(("Not built", "Left for a GPU")):
            current = None
        if current is not None and line != CARRIED:
            current.append(line)
    return blocks


def section(artefacts: dict[str, Artefact], root: Path = ROOT, earlier: dict | None = None) -> str:
    lines = [BEGIN, "## Artefacts (`python -m figures`)", ""]
    missing, earlier = [], earlier or {}
    for artefact in artefacts.values():
        for scale in SCALES:
            result = artefact.result(scale, root) if scale in artefact.scales else None
            if result is None and (artefact.name, scale) in earlier:
                heading, *rest = earlier[artefact.name, scale]
                while rest and not rest[0]:
                    rest.pop(0)
                lines += [heading, "", CARRIED, "", *rest]
                continue
            if result is None:
                if scale in artefact.scales:
                    missing.append(
                        (scale, f"`{artefact.name}` ({artefact.scales[scale]}; `{artefact.command(scale)}`)")
                    )
                continue
            claim = result["claim"]
            lines += [
                f"### {artefact.name} ({scale}): {result['title']}",
                "",
                f"Setting: {result['setting']}. Command: `{result['command']}` ({result['seconds']:.0f} s). "
                f"Figures: {', '.join(f'`{artefact.folder(scale, root) / f}`' for f in result['figures'])}.",
                "",
                "| " + " | ".join(result["headers"]) + " |",
                "|" + "---|" * len(result["headers"]),
                *("| " + " | ".join(cell(v) for v in row) + " |" for row in result["rows"]),
                "",
                f"**{'Claim held' if claim['held'] else 'Claim did not hold'}.** {claim['text']}",
                "",
            ]
    for scale, heading in (("cpu", "Not built yet at cpu scale (2 cores)"), ("paper", "Left for a GPU (paper scale)"),
                           ("quick", "Not built at quick scale (the tests build it)")):  # fmt: skip
        left = [m for s, m in missing if s == scale]
        if left:
            lines += [f"{heading}: " + "; ".join(left) + ".", ""]
    return "\n".join([*lines, END])


def regenerate(path: Path, artefacts: dict[str, Artefact], root: Path = ROOT) -> None:
    """Replace the generated section of ``path`` (or put it after the first heading when there is none), keeping
    the earlier blocks of artefacts that have no local result."""
    text = path.read_text() if path.exists() else "# Measured results\n"
    new = section(artefacts, root, earlier_blocks(text))
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + new + rest.split(END, 1)[1]
    else:
        first, _, rest = text.partition("\n")
        text = f"{first}\n\n{new}\n{rest}"
    path.write_text(text)
