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


# Every claim and claims row the catalogue has known (issue 66): one that leaves it must move to [[retired]] with why.
KNOWN_CLAIMS = """
fedssyn-fig1c-real-vs-synthetic fedssyn-lemma1-bounds fedssyn-lemma1-proof fedssyn-fig2a-noise fedssyn-fig2bc-rounds
fedssyn-figB2-split fedssyn-figB2-iid fedssyn-table1-c10-n10-a01 fedssyn-table1-c10-n10-a001
fedssyn-table1-c10-n10-c04 fedssyn-table1-c10-n40-n100 fedssyn-table1-c100 fedssyn-table1-algorithms-alike
fedssyn-fig3-boost fedssyn-fig3-centralised fedssyn-fig3-alpha fedssyn-fig3-clients fedssyn-fig4a fedssyn-fig4b
fedssyn-fig4c fedssyn-fig5-zeta fedssyn-fig5-sigma fedssyn-fig5-p-accuracy fedssyn-theory-dnn fedssyn-rev-fig2-zeta-star
fedssyn-rev-comm-generator fedssyn-rev-tableA2-c10-n10 fedssyn-rev-tableA2-c10-partial fedssyn-rev-tableA2-c100
fedssyn-rev-fig3-own-synthetic fedssyn-rev-table2-accuracy fedssyn-rev-table2-cost fedssyn-rev-fig6-dp
fedcog-table1-fmnist fedcog-table1-cifar fedcog-table1-baselines fedcog-table2-flair fedcog-table3-cifar10
fedcog-table3-flair fedcog-fig2a-model-difference fedcog-fig2bc-local-models fedcog-table4-cost
fedcog-fig3a-heterogeneity fedcog-table5-generation fedcog-table5-soft-labels fedcog-fig3bc-lambdas
dynafed-table1-fmnist-a001 dynafed-table1-fmnist-a004-a016 dynafed-table1-cifar-cinic dynafed-table1-baselines
dynafed-fig2-convergence dynafed-table2-cifar100 dynafed-fig3-4-global-info dynafed-fig5-trajectory-length
dynafed-fig5-dsyn-size dynafed-table3-local-epochs dynafed-table4-rounds dynafed-table5-mlp dynafed-fig6-left-distance
dynafed-fig6-right-dsyn-alone hfmds-fig2-table2-baselines hfmds-fig4-tsne hfmds-table2-dir001 hfmds-table2-2class
hfmds-table2-dir005 hfmds-table2-cifar100 hfmds-table2-vs-fmds hfmds-table3-psnr hfmds-table3-flops
hfmds-fig5-convergence hfmds-table4-losses hfmds-fig6-7-mu hfmds-fig8-9-clients hfmds-fig10-11-epochs
""".split()
KNOWN_ROWS = """
lemma1-identities lemma1/cpu lemma1/paper fig2/cpu fig2/paper fig2/cpu/shape fig2/paper/shape figB2/cpu fig3/cpu
table1-grid/cpu/a01 table1-grid/cpu/a001 table1-grid/cpu/c04_a01 table1-grid/cpu/c04_a001 table1-grid/cpu/n40_a01
table1-grid/cpu/n40_a001 table1-grid/cpu/n100_a01 table1-grid/cpu/n100_a001 table1/cpu fig4/cpu fig5/cpu dp/cpu
theory-fl/cpu methods/cpu fedcog-table1/paper dynafed-table1/paper dynafed-table1-h100-seed0 dynafed-table1/cpu
hfmds-fmnist/paper fig3/cpu/real-shuffle fig2/cpu/zeta-star fig2/paper/zeta-star figB2/cpu/iid table1/cpu/alike
fig5/cpu/sigma fig3/cpu/generator table1/cpu/communication fig4/cpu/epochs fedcog-table1/paper/table3
fedcog-table1/paper/cost dynafed-table1/paper/rounds dynafed-table1/cpu/rounds dynafed-table1/paper/convergence
dynafed-table1/cpu/convergence hfmds-fmnist/paper/fmds hfmds-fmnist/paper/psnr hfmds-fmnist/paper/fig5
""".split()
# The claims issue 66 measured beyond the 19 the catalogue measured before it: each must stay measured (a row that
# names it) unless the catalogue retires the row, saying why.
NEWLY_MEASURED = (
    "fedssyn-fig1c-real-vs-synthetic fedssyn-rev-fig2-zeta-star fedssyn-figB2-iid fedssyn-table1-algorithms-alike "
    "fedssyn-fig5-sigma fedssyn-rev-comm-generator fedssyn-rev-tableA2-c10-n10 fedssyn-fig4b fedcog-table3-cifar10 "
    "fedcog-table4-cost dynafed-table4-rounds dynafed-fig2-convergence hfmds-table2-vs-fmds hfmds-table3-psnr "
    "hfmds-fig5-convergence"
).split()


def test_no_claim_or_row_drops_out_without_the_catalogue_saying_so():
    retired = claims.retired()
    assert all(r.get("why") and (r.get("id") or r.get("row")) for r in retired), "a retirement says what and why"
    ids = {c["id"] for c in claims.catalogue()} | {r["id"] for r in retired if r.get("id")}
    keys = {row.key for row in claims.ROWS} | {r["row"] for r in retired if r.get("row")}
    assert not set(KNOWN_CLAIMS) - ids, f"claims gone from the catalogue unretired: {set(KNOWN_CLAIMS) - ids}"
    assert not set(KNOWN_ROWS) - keys, f"claims rows gone unretired: {set(KNOWN_ROWS) - keys}"
    assert len(NEWLY_MEASURED) >= 15
    rows_of = {c["id"]: c.get("rows", []) for c in claims.catalogue()}
    for claim in NEWLY_MEASURED:
        assert rows_of.get(claim), f"{claim}: measured by issue 66, no row measures it now"


def test_a_row_built_from_parts_shows_each_part_and_the_header_says_how_they_combine():
    by_key = {row.key: row for row in claims.ROWS}
    for key in ("hfmds-fmnist/paper", "fedcog-table1/paper"):
        assert len(by_key[key].parts) >= 2, key
    part = {"verdict": "contradicted", "held": False, "text": "X's claim: contradicted: shards -2.5", "size": "s"}
    outcome = {"claim": {"verdict": "not resolved", "text": "c"}, "runs": ["a"],
               "numbers": {"parts": {"shards": part}}}  # fmt: skip
    rows = claims.catalogue_rows({("hfmds-fmnist", "paper"): outcome},
                                 [c for c in claims.catalogue() if c["id"] == "hfmds-table2-2class"])  # fmt: skip
    shown = [r for r in rows if r[3].startswith("↳")]
    assert [r[5] for r in shown] == ["not measured", "contradicted"]  # dir001 absent here, shards judged
    assert shown[1][4] == "shards -2.5" and shown[1][6] == "s"
    header = claims.claims_table({})
    assert "held when every part held, contradicted when any part is" in header
    assert "never held" in header  # the rule for a claim of no difference
