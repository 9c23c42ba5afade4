"""The claims catalogue (figures/claims.toml): every claim of the five papers' main tables and figures has a row in
REPORT's claims table, measured by the rows it names or "not measured" with why and what would measure it; no claims
row drops out without the catalogue saying so; every verdict is a word of the vocabulary."""

from __future__ import annotations

from figures import claims
from figures.verdict import WORDS


def test_every_claim_is_whole_and_named_once():
    catalogue = claims.catalogue()
    assert len(catalogue) >= 60
    ids = [c["id"] for c in catalogue]
    assert len(ids) == len(set(ids))
    for c in catalogue:
        assert {"id", "paper", "where", "claim", "paper_number", "setting"} <= set(c), c["id"]
        assert c["paper"] in claims.PAPERS, c["id"]
        assert "status" not in c and "verdict" not in c, f"{c['id']}: a verdict is never typed, it is rebuilt"
        if not c.get("rows"):
            assert c.get("why") and c.get("command"), f"{c['id']}: not measured needs why and a command"


def test_the_catalogue_and_the_rows_name_each_other():
    keys = [row.key for row in claims.ROWS]
    assert len(keys) == len(set(keys)) and all(keys)
    named = {key for c in claims.catalogue() for key in c.get("rows", ())}
    assert named <= set(keys), f"the catalogue names rows that do not exist: {named - set(keys)}"
    assert set(keys) <= named, f"claims rows no catalogue claim names (they would drop out): {set(keys) - named}"


def test_every_row_of_the_table_has_a_verdict_of_the_vocabulary():
    rows = claims.catalogue_rows({})  # nothing rebuilt: every measured claim falls back as its row says
    assert len(rows) >= len(claims.catalogue())
    assert all(row[5] in WORDS for row in rows)
    unmeasured = claims.catalogue_rows({}, [c for c in claims.catalogue() if not c.get("rows")])
    assert all(row[5] == "not measured" and row[7].startswith("no: ") for row in unmeasured)
    assert all(len(row[4]) <= claims.OURS_CHARS + 2 for row in rows)  # one short cell: the block has the rest
