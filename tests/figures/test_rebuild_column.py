"""Every command in the rebuild column of REPORT's claims table works on a fresh clone: the figures commands name an
artefact and scale that `figures check` rebuilds from the ledger (tests/figures/test_ledger.py runs that check in
full), `pytest tests/theory` collects the theory tests, and a record-lost row's rerun command names scripts that
exist and parse (they would train for hours, so they are not run) and CLIs whose --help works."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

from figures.catalogue import ARTEFACTS
from figures.claims import CATALOGUE_HEADERS
from figures.report import CLAIMS_BEGIN, CLAIMS_END, between

REPO = Path(__file__).resolve().parents[2]


def rebuild_commands() -> list[str]:
    section = between((REPO / "results" / "REPORT.md").read_text(), CLAIMS_BEGIN, CLAIMS_END)
    column = CATALOGUE_HEADERS.index("rebuild or measure")
    commands = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| paper, where "):
            cell = [c.strip() for c in line.strip("|").split(" | ")][column]
            if cell.startswith("to measure: ") or cell == "″":  # what would measure it (prose); a part (↳): above
                continue
            found = re.findall(r"`([^`]+)`", cell)
            assert found or cell == "-", f"a rebuild cell without a command: {cell!r}"
            commands += found
    return commands


def test_every_rebuild_command_works_on_a_fresh_clone():
    commands = rebuild_commands()
    assert commands
    for command in commands:
        words = shlex.split(command)
        if words[:3] == ["python", "-m", "figures"] and words[3] not in ("ledger", "report", "check"):
            name, scale = words[3], words[words.index("--scale") + 1]
            assert name in ARTEFACTS and scale in ARTEFACTS[name].scales, command
            assert words[words.index("--runs") + 1] == "results/ledger", command
        elif words[:1] == ["pytest"]:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", *words[1:], "--collect-only", "-q", "-p", "no:cacheprovider"],
                cwd=REPO, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout[-2000:]
            assert re.search(r"(\d+) tests? collected", done.stdout), done.stdout[-500:]
            assert int(re.search(r"(\d+) tests? collected", done.stdout).group(1)) > 100
        elif words[:1] == ["bash"]:
            script = REPO / words[1]
            assert script.is_file(), command
            assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, command
        elif words[:3] == ["python", "-m", "figures"]:
            done = subprocess.run(
                [sys.executable, "-m", "figures", *words[3:4], "--help"], cwd=REPO, capture_output=True, text=True
            )
            assert done.returncode == 0, command
        else:
            assert words[0] == "...", f"a rebuild command this test does not know: {command!r}"
