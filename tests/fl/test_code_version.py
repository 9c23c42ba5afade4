"""One source, one code version, under every supported Python (fl.provenance.canonical), and a resume whose recorded
git commit holds this checkout's source goes on without --accept-code-change, recording the device it moved to."""

from __future__ import annotations

import ast
import json
import subprocess

import pytest

from fl import provenance
from theory.errors import InputError

SOURCE = 'def f(x: int) -> int:\n    """doc"""\n    return x + 1  # comment\n\n\nclass C:\n    y = f"{1!r:>4}"\n'


def test_the_dump_ignores_the_empty_fields_one_python_adds_and_another_omits():
    plain, later = ast.parse(SOURCE), ast.parse(SOURCE)
    for node in ast.walk(later):  # what Python 3.12 adds to every def and class
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node.type_params = []
            node._fields = (*node._fields, "type_params")
    assert provenance.canonical(plain) == provenance.canonical(later)
    reformatted = SOURCE.replace("x + 1  # comment", "(x+1)").replace('"""doc"""', "'''other doc'''")
    assert provenance.source_digest([("a.py", SOURCE.encode())]) == provenance.source_digest(
        [("a.py", reformatted.encode())]
    )
    assert provenance.source_digest([("a.py", SOURCE.encode())]) != provenance.source_digest(
        [("a.py", SOURCE.replace("x + 1", "x + 2").encode())]
    )


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout with fl/ and theory/ as this package's root, its code version uncached."""
    root = tmp_path / "checkout"
    for name, text in {"fl/a.py": SOURCE, "theory/b.py": "Z = 1\n", "docs/c.py": "ignored = 1\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", root)
    provenance.code_version.cache_clear()
    yield root, commit
    provenance.code_version.cache_clear()


def run_folder(tmp_path, **entry) -> object:
    out = tmp_path / "run"
    out.mkdir()
    (out / "provenance.json").write_text(json.dumps({"synthetic_sha256": None, "changes": [], **entry}))
    return out


def test_a_run_recorded_under_another_python_resumes_when_its_commit_holds_this_source(tmp_path, checkout):
    _, commit = checkout
    assert provenance.commit_code_version(commit) == provenance.code_version()
    # the hash another Python's ast.dump gave the same source: not ours, but its commit is this source
    out = run_folder(tmp_path, code_version="f258d95133f7", git=commit, device="cuda (NVIDIA H100 80GB HBM3)")
    note = provenance.check_resume(out, None, 29, accept_code_change=False, where={"device": "cpu", "cpu_count": 2})
    assert note == f"{out}: rounds from 29 on run on cpu; recorded"
    changes = json.loads((out / "provenance.json").read_text())["changes"]
    assert changes[0]["same_source"] and changes[0]["code_version"] == provenance.code_version()
    assert changes[1] == {"round": 29, "device": "cpu", "torch": None, "cpu_count": 2, "trainer_threads": None}
    assert provenance.last_device(json.loads((out / "provenance.json").read_text())) == "cpu"
    # again on the same device: nothing more to record
    assert provenance.check_resume(out, None, 35, False, {"device": "cpu"}) is None


def test_another_source_is_still_refused_without_the_flag(tmp_path, checkout):
    root, commit = checkout
    out = run_folder(tmp_path, code_version="f258d95133f7", git=commit)
    (root / "fl" / "a.py").write_text(SOURCE.replace("x + 1", "x + 2"))
    provenance.code_version.cache_clear()
    with pytest.raises(InputError, match="--accept-code-change"):
        provenance.check_resume(out, None, 29, accept_code_change=False)
    assert provenance.commit_code_version("not a commit; rm -rf /") is None


def test_a_deleted_provenance_no_longer_bypasses_the_code_check(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(InputError, match=r"no provenance\.json, so the code that computed rounds 1-4 is unknown"):
        provenance.check_resume(out, None, 5, accept_code_change=False)
    assert not (out / "provenance.json").exists()
    note = provenance.check_resume(out, None, 5, accept_code_change=True)
    assert "recorded from round 5" in note
    assert json.loads((out / "provenance.json").read_text())["recorded_from_round"] == 5
