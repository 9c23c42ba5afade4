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
ROLE = re.compile(r":(?:mod|class|meth|func|attr|data|obj|exc):")
NAV_PAGE = re.compile(r":\s*(\S+\.md)\s*$", re.M)


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
    built = {path: path.read_text() for path in (tmp_path / "site").rglob("*.html")}
    raw = {str(path.relative_to(tmp_path)): ROLE.findall(text) for path, text in built.items() if ROLE.search(text)}
    assert not raw, f"Sphinx roles left as raw text: {raw}"
    reference = tmp_path / "site" / "reference"
    contract = "".join(built[reference / page / "index.html"] for page in ("methods", "algorithms"))
    for name in ("ServerRound.clients", "ClientRound.task", "Setup.seed", "Split.original", "Method.not_distributed"):
        assert f'id="fl.methods.base.{name}"' in contract  # the plug-in contract, field by field
    assert 'id="fl.algorithms.base.Algorithm.server_keys"' in contract
    engine = built[tmp_path / "site" / "reference" / "engine" / "index.html"]
    assert 'href="../methods/#fl.methods.base"><code>fl.methods.base' in engine  # a role is a link
    config_page = built[tmp_path / "site" / "reference" / "config" / "index.html"]
    from fl.config_reference import every_key

    keys = [key for table in every_key().values() for key, *_ in table]
    assert len(keys) > 100 and all(f"<code>{key}</code>" in config_page for key in keys)


def test_readme_links_into_the_docs_resolve_and_readme_stays_short():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)]+)\)", text)
    assert len(links) >= 8 and all((ROOT / link).is_file() for link in links)
    assert len(text.splitlines()) <= 80


def test_the_readme_python_block_runs_and_prints_a_final_accuracy(tmp_path):
    """README's "From Python" block, run as a reader runs it from a checkout (examples/ beside it): fl.train's run
    of the toy data set, its final accuracy printed."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) == 1 and "fl.train(" in blocks[0]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
    assert re.fullmatch(r"final test accuracy 0\.\d{3} after 2 rounds\n", done.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["examples"]  # no run folder unless asked


def test_every_module_a_guide_names_has_a_reference_page():
    """A dotted name of ours in a guide (``fl.data.partition``, ``fl.experiment.trainer_threads``): the longest prefix
    that is a module has a ``::: module`` page (a namespace package: one of its modules has)."""
    import importlib.util

    def is_module(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a name inside a module that is no package
            return False

    pages = " ".join(p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md"))
    shown = set(re.findall(r"^::: (\S+)", pages, re.M))
    text = " ".join(p.read_text() for p in [*GUIDES, ROOT / "docs" / "getting-started.md", ROOT / "README.md"])
    missing = []
    for name in set(re.findall(r"\b(?:fl|theory|sims|figures|plots)(?:\.[a-z_]+)+", text)):
        parts = name.split(".")
        modules = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
        module = next(m for m in modules if is_module(m))
        if not any(s == module or s.startswith(module + ".") for s in shown):
            missing.append(f"{name} ({module})")
    assert not missing, f"modules the guides name with no reference page: {sorted(missing)}"


def test_the_home_page_links_every_page_of_the_nav():
    nav = set(NAV_PAGE.findall((ROOT / "mkdocs.yml").read_text())) - {"index.md"}
    home = set(re.findall(r"\]\(([^)]+\.md)\)", (ROOT / "docs" / "index.md").read_text()))
    assert nav and nav <= home, f"pages of the nav the home page does not link: {sorted(nav - home)}"


def test_the_config_reference_has_every_key_with_its_real_default_and_a_meaning():
    from dataclasses import fields

    from fl.algorithms import ALGORITHMS
    from fl.config_reference import SECTIONS, every_key, markdown
    from fl.methods import METHODS

    tables = every_key()
    for title, table in tables.items():
        for key, _, _, meaning in table:
            assert meaning, f"{title}: {key} has no meaning in its class docstring (write 'name: meaning.' there)"
    expected = {f"{s}.{f.name}": repr(getattr(cls(), f.name)) for s, cls in SECTIONS.items() for f in fields(cls)}
    for section, classes in (("algorithm", ALGORITHMS), ("method", METHODS)):
        for cls in classes.values():
            expected |= {f"{section}.{f.name}": repr(getattr(cls(), f.name)) for f in fields(cls)}
    found = {key: default for table in tables.values() for key, _, default, _ in table}
    assert found == expected
    assert "| `train.rounds` | int | `20` |" in markdown() and "| `data.p` | float | `0.0` |" in markdown()


def test_the_guides_with_tested_blocks():
    tested = {p.name for p in GUIDES if commands_marked_tested(p.read_text())}
    assert tested >= {"extending.md", "sweeps.md", "runs.md", "data.md"}


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
    if page.name == "data.md":
        assert json.loads((tmp_path / "runs" / "mine" / "summary.json").read_text())["rounds"] == 2
    if page.name == "extending.md":
        assert (tmp_path / "runs" / "noisy" / "summary.json").exists() and (tmp_path / "runs" / "prox").is_dir()
        assert list((tmp_path / "runs" / "tb").rglob("events.out.tfevents.*"))
        runs = [
            (tmp_path / "runs" / run / "metrics.jsonl").read_text() for run in ("pooled", "pooled2", "pooled_flower")
        ]
        numbers = [[json.loads(row)["test_loss"] for row in run.splitlines()] for run in runs]
        assert numbers[0] == numbers[1] == numbers[2] and len(numbers[0]) == 3
        adam = [(tmp_path / "runs" / run / "metrics.jsonl").read_text() for run in ("adam_builtin", "adam_plugin")]
        losses = [[json.loads(row)["test_loss"] for row in run.splitlines()] for run in adam]
        assert losses[0] == losses[1] and len(losses[0]) == 3  # the guide's plug-in is the built-in FedAdam
