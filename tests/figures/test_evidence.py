"""REPORT's prose holds no hand-typed number: the evidence prose is generated with the claims table from the rebuilt
results (figures.evidence), its template's own text holds digits only in names and code, and what lies outside the
generated sections (the title and the opening paragraph) holds none; `figures report` drops the hand-written copy of
the prose the claims section now generates."""

from __future__ import annotations

import re
from pathlib import Path

from figures import evidence
from figures.report import BEGIN, CLAIMS_BEGIN, CLAIMS_END, END, write_sections

REPORT = Path(__file__).resolve().parents[2] / "results" / "REPORT.md"


def outside_generated(text: str) -> str:
    """``text`` without its two generated sections (markers included)."""
    for begin, end in ((CLAIMS_BEGIN, CLAIMS_END), (BEGIN, END)):
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            text = head + rest.split(end, 1)[1]
    return text


def test_the_template_types_no_number():
    assert not evidence.stray_digits(evidence.TEMPLATE)


def test_the_check_sees_a_typed_number_and_lets_names_pass():
    assert evidence.stray_digits("FedAvg needs 7 rounds")
    assert evidence.stray_digits("a gain of {gain} points, +0.9% at p = 0.3")
    for name in ("Fig. 2(c)", "Table A.2", "eq. B.2", "D-5 and D-10", "CIFAR-10, CINIC-10, VGG-11, ConvNet-3",
                 "an H100", "Fig. 5 (d)", "Sec. 5.3", "(1-p)²", "`python -m theory --p 0.1`", "{fig2_d}"):  # fmt: skip
        assert not evidence.stray_digits(name), name


def test_no_hand_typed_number_outside_the_generated_sections_of_the_report():
    text = REPORT.read_text()
    assert CLAIMS_BEGIN in text and BEGIN in text
    prose = outside_generated(text)
    assert not evidence.stray_digits(prose), evidence.stray_digits(prose)
    assert "## The evidence, claim by claim" not in prose  # generated, inside the claims section


def test_a_missing_result_reads_as_not_rebuilt_and_the_prose_still_renders():
    text = evidence.section({})
    assert evidence.ABSENT in text and not re.search(r"\{[a-z_0-9]+\}", text)  # every placeholder filled


def test_the_report_drops_the_hand_written_copy_once_the_claims_section_holds_the_prose(tmp_path):
    report = tmp_path / "REPORT.md"
    hand = "## The evidence, claim by claim\n\nFedAvg needs 7 rounds.\n\n## What none of this tests\n\nCIFAR.\n"
    report.write_text(
        f"# Measured results\n\nOpening.\n\n{CLAIMS_BEGIN}\nold\n{CLAIMS_END}\n\n{hand}\n{BEGIN}\nx\n{END}\n"
    )
    write_sections(report, f"{CLAIMS_BEGIN}\ntable\n\n## The evidence, claim by claim\n\ngenerated\n{CLAIMS_END}",
                   f"{BEGIN}\nblocks\n{END}")  # fmt: skip
    text = report.read_text()
    assert "FedAvg needs 7 rounds" not in text and text.count("## The evidence, claim by claim") == 1
    assert "Opening." in text and "blocks" in text and "generated" in text
    before = report.read_text()
    write_sections(report, f"{CLAIMS_BEGIN}\ntable\n{CLAIMS_END}", f"{BEGIN}\nblocks\n{END}")  # no prose: kept as is
    assert outside_generated(report.read_text()) == outside_generated(before)
