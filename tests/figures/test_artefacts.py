"""python -m figures: every artefact at quick scale end to end, reuse without rerunning, the claim sentences
flipping with the numbers, the regenerated report section, and one-line errors for bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

import figures.catalogue as catalogue
from figures.__main__ import main
from figures.report import BEGIN, END


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every artefact at quick scale, into one temporary root (built once for the module)."""
    tmp = tmp_path_factory.mktemp("figures")
    report = tmp / "REPORT.md"
    report.write_text("# Measured results\n\nHand-written text that must survive.\n")
    assert main(["all", "--scale", "quick", "--root", str(tmp / "root"), "--report", str(report)]) == 0
    return tmp


@pytest.mark.slow
def test_every_artefact_builds_at_quick_scale(built):
    root = built / "root"
    for name in catalogue.ARTEFACTS:
        result = json.loads((root / name / "quick" / "result.json").read_text())
        assert result["command"] == f"python -m figures {name} --scale quick"
        assert result["rows"] and all(len(row) == len(result["headers"]) for row in result["rows"])
        assert result["claim"]["text"] and isinstance(result["claim"]["held"], bool)
        for figure in result["figures"]:
            path = root / name / "quick" / figure
            assert path.exists() and path.stat().st_size > 0, path
        assert {f.rsplit(".", 1)[1] for f in result["figures"]} >= {"png", "pdf"}
    assert [r[0] for r in json.loads((root / "fig2/quick/result.json").read_text())["rows"]] == [0, 0.25, 0.5]


@pytest.mark.slow
def test_report_section_is_regenerated_and_hand_text_kept(built):
    text = (built / "REPORT.md").read_text()
    assert "Hand-written text that must survive." in text
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    for name in catalogue.ARTEFACTS:
        assert f"### {name} (quick)" in text and f"`python -m figures {name} --scale quick`" in text
    assert "Not built yet:" in text  # the cpu and paper scales


@pytest.mark.slow
def test_a_second_invocation_reuses_everything(built, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a simulator ran again")

    monkeypatch.setattr(catalogue, "simulate", refuse)
    before = (built / "REPORT.md").read_text()
    assert main(["all", "--scale", "quick", "--root", str(built / "root"), "--report", str(built / "REPORT.md")]) == 0
    assert capsys.readouterr().out.count("reused") == len(catalogue.ARTEFACTS)
    assert (built / "REPORT.md").read_text() == before
    assert main(["--root", str(built / "root")]) == 0
    listing = capsys.readouterr().out
    assert "done" in listing and "missing" in listing


def test_fig2_claim_flips_with_the_numbers():
    p = np.array([0.0, 0.2, 0.4, 0.6])
    theory = np.array([1.0, 0.75, 0.5, 0.3])
    assert catalogue.fig2_claim(p, theory * 1.01, theory).held
    square = (1 - p) ** 2
    claim = catalogue.fig2_claim(p, square, theory)
    assert not claim.held and "did not hold" in claim.text


def test_lemma1_claim_flips_with_the_numbers():
    p = np.array([0.0, 0.5, 0.8])
    bound = np.array([1.0, 0.3, 0.1])
    l_bound = np.array([10.0, 9.0, 8.0])
    claim = catalogue.lemma1_claim(p, bound * 0.99, bound, l_bound, l_bound)
    assert claim.held and "at 3 of 3 values" in claim.text
    claim = catalogue.lemma1_claim(p, bound * np.array([1, 1, 1.2]), bound, l_bound, l_bound)
    assert not claim.held and "+20.0% at p = 0.8" in claim.text and "at 2 of 3 values" in claim.text
    assert not catalogue.lemma1_claim(p, bound, bound, l_bound * 1.1, l_bound).held


def test_figb2_claim_flips_with_the_numbers():
    good = {"split_E1_monotone_in_p": True, "split_E5_monotone_in_p": True}
    good |= {"split_E1_speedup_at_pmax": 1.5, "split_E5_speedup_at_pmax": 2.0}
    assert catalogue.figb2_claim(good, [1, 5]).held
    assert not catalogue.figb2_claim(good | {"split_E5_speedup_at_pmax": 1.0}, [1, 5]).held
    assert not catalogue.figb2_claim(good | {"split_E1_monotone_in_p": False}, [1, 5]).held


def test_unknown_artefact_is_one_line_exit_2(tmp_path, capsys):
    assert main(["nosuch", "--root", str(tmp_path), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown artefact 'nosuch'" in err


def test_unknown_scale_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fig2", "--scale", "huge", "--root", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scale" in err
