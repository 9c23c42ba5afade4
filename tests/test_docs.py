"""The documentation (docs/, mkdocs.yml): it builds with warnings as errors (mkdocstrings reads every docstring it
shows), every link of README into docs/ resolves, and every block a guide marks ``<!-- tested -->`` runs: its
``# file: NAME`` Python blocks written first, then its bash commands in order, in a fresh folder holding a copy of
examples/ (as a reader runs them from a checkout)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = sorted((ROOT / "docs" / "guides").glob("*.md"))
TESTED = re.compile(r"<!-- tested -->\n```bash\n(.*?)```", re.S)
FILES = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.S)


def commands_marked_tested(text: str) -> list[str]:
    """The commands of the blocks marked tested, continuation lines joined, trailing comments dropped."""
    lines = [c for block in TESTED.findall(text) for c in block.replace("\\\n", " ").strip().splitlines()]
    return [c.split("  #")[0].strip() for c in lines if c.strip()]


def test_the_docs_build_with_warnings_as_errors(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "methods" / "index.html").read_text()
    assert "client_payload" in page and "before_client" in page  # the hooks' reference comes from the docstrings


def test_readme_links_into_the_docs_resolve_and_readme_stays_short():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)]+)\)", text)
    assert len(links) >= 8 and all((ROOT / link).is_file() for link in links)
    assert len(text.splitlines()) <= 80


def test_the_guides_with_tested_blocks():
    assert {p.name for p in GUIDES if commands_marked_tested(p.read_text())} >= {"extending.md", "sweeps.md", "runs.md"}


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in GUIDES if commands_marked_tested(p.read_text())], ids=lambda p: p.name)
def test_every_tested_block_of_a_guide_runs(page, tmp_path):
    pytest.importorskip("tensorboard")
    text = page.read_text()
    for folder in ("examples", "configs"):  # what the commands read, as from a checkout
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for name, source in FILES.findall(text):
        (tmp_path / name).write_text(source)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for command in commands_marked_tested(text):
        done = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    if page.name == "extending.md":
        assert (tmp_path / "runs" / "noisy" / "summary.json").exists() and (tmp_path / "runs" / "prox").is_dir()
        assert list((tmp_path / "runs" / "tb").rglob("events.out.tfevents.*"))
        runs = [
            (tmp_path / "runs" / run / "metrics.jsonl").read_text() for run in ("pooled", "pooled2", "pooled_flower")
        ]
        numbers = [[json.loads(row)["test_loss"] for row in run.splitlines()] for run in runs]
        assert numbers[0] == numbers[1] == numbers[2] and len(numbers[0]) == 3
