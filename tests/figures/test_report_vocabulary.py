"""Every verdict and size REPORT shows is a word of figures.verdict's vocabulary (the claims table's verdict and
size columns, each "**Verdict: ...**" line), and the phrases an audit found outside it are gone from the whole
report: the script below lists every verdict or size phrase, and fails on any other."""

from __future__ import annotations

import re
from pathlib import Path

from figures.verdict import SIZES, WORDS

REPORT = Path(__file__).resolve().parents[2] / "results" / "REPORT.md"
BANNED = ("indicative", "Open (GPU)", "(within)", "within the spread", "| paper gain (CIFAR-10) | verdict |")


def claims_rows(text: str) -> list[list[str]]:
    table = text.split("## Where each claim stands", 1)[1].split("<!-- end of the claims table -->", 1)[0]
    rows = [line.strip().strip("|").split(" | ") for line in table.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:] if not set(row[0]) <= {"-", " "}]


def without_parentheses(text: str) -> str:
    """``text`` with every parenthesised part (nested too) removed: what a part says in passing."""
    out, depth = [], 0
    for c in text:
        depth += c == "("
        if depth == 0:
            out.append(c)
        depth -= c == ")" and depth > 0
    return "".join(out)


def size_phrases(cell: str) -> list[str]:
    """The size words of a size cell: each "; "-separated part's words after its last ": " (parentheses aside)."""
    if cell == "-":
        return []
    return [part.rsplit(": ", 1)[-1].strip() for part in without_parentheses(cell).split("; ")]


def test_every_verdict_and_size_is_a_defined_word():
    text = REPORT.read_text()
    rows = claims_rows(text)
    assert rows
    for row in rows:
        claim, verdict, size = row[0], row[5], row[6]
        assert verdict in WORDS, (claim, verdict)
        for word in size_phrases(size):
            assert word in SIZES or word == "not resolved", (claim, word)  # "not comparable (why)": its word
    for verdict in re.findall(r"\*\*Verdict: ([^*]+?)\.\*\*", text):
        assert verdict in WORDS, verdict


def test_no_phrase_outside_the_vocabulary_anywhere_in_the_report():
    text = REPORT.read_text()
    for phrase in BANNED:
        assert phrase not in text, phrase
