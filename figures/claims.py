"""The claims table at the top of results/REPORT.md ("Where each claim stands"), generated from the artefacts'
results as rebuilt from the run ledger.

One row per claim: the paper's number, ours, the verdict, whether the evidence is in the ledger (and how many runs),
and the command that rebuilds it. Where a claim's artefact rebuilds from the ledger, "ours" and the verdict are its
claim sentence and judgement. Where it does not (its runs' records were lost before the ledger existed), the row
keeps the last number measured, marked "record lost", so a reader can tell which numbers can be rebuilt and which
cannot. Claims checked by no run (sympy identities, property tests) say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

from figures.fedssyn_table1 import COLUMNS as TABLE1_COLUMNS
from figures.report import CLAIMS_BEGIN, CLAIMS_END, table
from figures.verdict import (
    CONTRADICTED,
    DEFINITIONS,
    HELD,
    NOT_MEASURED,
    NOT_RESOLVED,
    SIZE_DEFINITIONS,
    check,
)

LEDGER = "results/ledger"
CATALOGUE = Path(__file__).with_name("claims.toml")
PAPERS = {"fedssyn_neurips": "Fedssyn", "fedssyn_revised": "Fedssyn (revised)", "fedcog": "FedCOG",
          "dynafed": "DynaFed", "hfmds": "HFMDs"}  # fmt: skip
OURS_CHARS = 240  # the claims table's "ours" cell: the sentence's start; the whole is in the artefact's block
HEADERS = ["claim", "paper", "ours", "verdict", "size (ours against the paper's)", "in the ledger", "rebuild"]
CATALOGUE_HEADERS = ["paper, where", "the paper's claim", "paper's number", "our measurement", "ours", "verdict",
                     "size (ours against the paper's)", "in the ledger", "rebuild or measure"]  # fmt: skip


@dataclass(frozen=True)
class ClaimRow:
    """``artefact``: (name, scale) whose rebuilt result gives "ours", the verdict and the size, or None.
    ``lost``: (the last number measured, its verdict) for a row whose runs were lost before the ledger existed and
    are not in it yet; the verdict is the lost build's judgement in :mod:`figures.verdict`'s words. A row with
    ledger evidence never falls back to it: it exists only for rows marked record lost from the start.
    ``rerun``: the command or campaign group that would make a lost row's runs again.
    ``fixed``: (ours, verdict, evidence, command) of a claim that no run checks.
    ``part``: a second claim of the same artefact (its result's ``numbers["parts"][part]``) judged apart from its
    main claim (Fig. 2c's bound and its "matches")."""

    claim: str
    paper: str
    artefact: tuple[str, str] | None = None
    lost: tuple[str, str] | None = None
    rerun: str = ""
    fixed: tuple[str, str, str, str] | None = None
    part: str = ""
    name: str = ""  # the key of a row with no artefact (the catalogue names rows by key)

    def __post_init__(self) -> None:
        for pair in (self.lost, self.fixed):
            if pair is not None:
                check(pair[1])

    @property
    def key(self) -> str:
        """How the catalogue (figures/claims.toml) names this row: "artefact/scale[/part]", or its ``name``."""
        if self.artefact is None:
            return self.name
        return "/".join((*self.artefact, *((self.part,) if self.part else ())))


ROWS = (
    ClaimRow(
        "Lemma 1: ζ̂²_p = (1-p)²ζ² for a shared D̃, σ̂²_p bound (Fedssyn D-5)",
        "identities",
        fixed=("sympy: exact; hypothesis property tests", HELD, "not a run", "`pytest tests/theory`"),
        name="lemma1-identities",
    ),
    ClaimRow("Lemma 1 on realised shuffles (least squares, full-batch local steps)", "bounds", ("lemma1", "cpu")),
    ClaimRow("Lemma 1 on realised shuffles, the authors' SGD", "bounds", ("lemma1", "paper")),
    ClaimRow(
        "Corollary I: A_p/A_0 ≤ (1-p)√(1-p+p·L_avg/L_max), the rounds' bound (Fig. 2c)", "Fig. 2", ("fig2", "cpu")
    ),
    ClaimRow("Corollary I's bound, the authors' single-sample SGD", "Fig. 2", ("fig2", "paper")),
    ClaimRow(
        "Fig. 2c: the fitted A_p/A_0 matches Corollary I's ratio for p ≤ 0.6",
        '"matches"',
        ("fig2", "cpu"),
        part="shape",
    ),
    ClaimRow("Fig. 2c's match, the authors' single-sample SGD", '"matches"', ("fig2", "paper"), part="shape"),
    ClaimRow("Fedssyn Fig. B.2: split-by-class loss falls with p, most at large E", "Fig. B.2", ("figB2", "cpu")),
    ClaimRow("Fedssyn Fig. 3: shuffled synthetic data boost FedAvg", "CIFAR-10, DDPM", ("fig3", "cpu")),
    *(
        ClaimRow(
            f"Table 1 at the paper's knobs, column {column} (Fashion-MNIST, 5 %)",
            "speed-ups per algorithm",
            ("table1-grid", "cpu"),
            part=column,
        )
        for column in TABLE1_COLUMNS
    ),
    ClaimRow(
        "Fedssyn Table 1, reduced protocol (1 local epoch, ñ = 1000, 20 rounds, m = 70 %)",
        "4.3-14.8× (CIFAR-10, α = 0.1)",
        ("table1", "cpu"),
    ),
    ClaimRow("Fedssyn Fig. 4: more ñ, larger ρ help", "Fig. 4", ("fig4", "cpu")),
    ClaimRow("Fedssyn Fig. 5: ζ̂²_p/ζ² falls with synthetic data", "Fig. 5", ("fig5", "cpu")),
    ClaimRow("Fedssyn (revised) Sec. 6: DP generators keep the speed-up", "Fig. 6", ("dp", "cpu")),
    ClaimRow("Lemma 1 and Corollary I against FL measurements", "Lemma 1, Cor. I", ("theory-fl", "cpu")),
    ClaimRow("All methods end above FedAvg on the same clients (Dir(0.1))", "each paper's gain", ("methods", "cpu")),
    ClaimRow(
        "FedCOG Table 1, FMNIST NIID-1 / NIID-2",
        "+4.27 / +9.57",
        ("fedcog-table1", "paper"),
        lost=(
            "code settings, 3 seeds: NIID-1 +2.23 ± 1.87, NIID-2 +0.79 ± 1.75 (last 5 rounds); paper setting: "
            "+0.10 ± 0.24 / +0.05 ± 2.30",
            NOT_RESOLVED,
        ),
        rerun="`bash scripts/fedcog-code-experiments.sh 0 1 2` and `bash scripts/fedcog-experiments.sh 0 1 2`, "
        "then `python -m figures ledger add`",
    ),
    ClaimRow(
        "DynaFed Table 1, FMNIST α = 0.01 (paper settings, 200 rounds)",
        "+13.02 (74.50 → 87.52)",
        ("dynafed-table1", "paper"),
    ),
    ClaimRow(
        "DynaFed Table 1, seed 0 on an H100",
        "+13.02",
        lost=("+10.74 (SE 2.49), 74.88 → 85.61 at round 200 (one seed)", NOT_RESOLVED),
        rerun="GPU lease: `bash scripts/gpu-campaign.sh start controls 540`",
        name="dynafed-table1-h100-seed0",
    ),
    ClaimRow(
        "DynaFed Table 1 in the reduced CPU protocol (width 32, 50 rounds, N = 300)",
        "+13.02",
        ("dynafed-table1", "cpu"),
    ),
    ClaimRow(
        "HFMDs Table 2 on FMNIST: Dir 0.01 / 2 classes per client",
        "+7.52 / +3.30 (CIFAR-10)",
        ("hfmds-fmnist", "paper"),
        lost=(
            "3 seeds: Dir 0.01 +1.87 ± 2.47 (within the spread); shards −2.50 ± 0.50, below FedAvg beyond the spread "
            "(FedAvg at lr/10 without the pool matches HFMDs)",
            CONTRADICTED,
        ),
        rerun="`bash scripts/hfmds-experiments.sh dir001 0 1 2` and `... shards 0 1 2`, then "
        "`python -m figures ledger add`",
    ),
)


def ours_text(claim: dict) -> str:
    """What follows the verdict in a claim sentence ("X's claim that ...: held: rest" -> "rest")."""
    text, verdict = claim["text"], claim.get("verdict")
    marker = f": {verdict}: " if verdict else None
    if marker and marker in text:
        return text.split(marker, 1)[1]
    return text


def row_cells(row: ClaimRow, built: dict[tuple[str, str], dict | str]) -> list[str]:
    if row.fixed is not None:
        ours, verdict, evidence, command = row.fixed
        return [row.claim, row.paper, ours, verdict, "-", evidence, command]
    name, scale = row.artefact if row.artefact else (None, None)
    command = f"`python -m figures {name} --scale {scale} --runs {LEDGER}`" if name else "-"
    outcome = built.get((name, scale)) if name else None
    if isinstance(outcome, dict):
        claim, runs = outcome["claim"], outcome.get("runs", [])
        if row.part:
            claim = outcome["numbers"].get("parts", {}).get(row.part)
            if claim is None:
                return [row.claim, row.paper, "-", NOT_MEASURED, "-", "no: not built", command]
        evidence = f"yes: {len(runs)} run(s)" if runs else "yes: the simulator's summary"
        verdict = check(claim["verdict"])
        return [row.claim, row.paper, ours_text(claim), verdict, claim.get("size") or "-", evidence, command]
    if row.lost is not None:
        ours, verdict = row.lost
        rerun = f"record lost: rerun with {row.rerun}" if row.rerun else "record lost"
        return [row.claim, row.paper, f"{ours} (record lost)", verdict, "-", "no: record lost", rerun]
    why = outcome if isinstance(outcome, str) else "not in the ledger"
    return [row.claim, row.paper, "-", NOT_MEASURED, "-", f"no: {short(why)}", command]


def catalogue() -> list[dict]:
    """The claims of the five papers' main tables and figures (figures/claims.toml), in the papers' order."""
    with CATALOGUE.open("rb") as file:
        return tomllib.load(file)["claim"]


def short(text: str, limit: int = OURS_CHARS) -> str:
    """``text`` cut at a word before ``limit`` characters, marked "…" when cut."""
    return text if len(text) <= limit else text[: text.rfind(" ", 0, limit)].rstrip(",;:") + " …"


def catalogue_rows(built: dict[tuple[str, str], dict | str], claims: list[dict] | None = None) -> list[list[str]]:
    """One row per (claim, measuring row): the claim, the paper's number, what we measured and its verdict, taken
    from the ROWS the catalogue names (rebuilt from the ledger); a claim no row measures is "not measured" with
    why and what would measure it."""
    by_key = {row.key: row for row in ROWS}
    out = []
    for claim in claims if claims is not None else catalogue():
        where = f"{PAPERS[claim['paper']]} {claim['where']}"
        head = [where, claim["claim"], claim["paper_number"]]
        if not claim.get("rows"):
            out.append([*head, "-", "-", NOT_MEASURED, "-", f"no: {claim['why']}", f"to measure: {claim['command']}"])
            continue
        for key in claim["rows"]:
            label, _, ours, verdict, size, evidence, command = row_cells(by_key[key], built)
            out.append([*head, label, short(ours), verdict, size, evidence, command])
            head = ["″", "″", "″"]  # the same claim, measured another way
    return out


def definitions() -> list[str]:
    """The verdict and size vocabulary, one line each, for the top of the claims section."""
    return [
        *(f"- **{word}**: {meaning}" for word, meaning in DEFINITIONS),
        "",
        "A claim with a size is judged twice: its direction by the words above, its size by "
        + "; ".join(f"*{word}* ({meaning})" for word, meaning in SIZE_DEFINITIONS)
        + ". A number marked ≥ (≤) is a lower (upper) bound: a run that never reached its target counts as its last "
        "round + 1, and a mean or ratio that includes one is a bound too.",
    ]


def claims_table(built: dict[tuple[str, str], dict | str]) -> str:
    """The generated claims section: the vocabulary, then one row per claim."""
    lines = [
        CLAIMS_BEGIN,
        "## Where each claim stands",
        "",
        "Generated by `python -m figures report` from the run ledger (`results/ledger`); `python -m figures check` "
        "fails when this table or the artefact blocks below differ from what the ledger gives, or when the ledger "
        "is damaged. Every verdict is one of these words, given by one rule from the numbers (`figures/verdict.py`); "
        '"beyond the seed spread" means the difference of the means exceeds sqrt(sd_a² + sd_b²) over the seeds:',
        "",
        *definitions(),
        "",
        '"record lost": the runs behind that number were lost before the ledger existed; the number is the last one '
        "measured, cannot be rebuilt, and the row names what would make it again.",
        "",
        "One row per claim of the five papers' main tables and figures (`figures/claims.toml`), and per way we "
        'measure it (″: the same claim); the full sentence behind each "ours" is in the artefact\'s block below.',
        "",
        *table(CATALOGUE_HEADERS, catalogue_rows(built)),
        "",
        CLAIMS_END,
    ]
    return "\n".join(lines)
