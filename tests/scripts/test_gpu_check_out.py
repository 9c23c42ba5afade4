"""scripts/gpu-check.sh writes only into its own folder (issue 44, class 3): an OUT that holds a user's files
(summary.json, parts.jsonl) and was not made by the check is refused in one line, before any part runs; its own
folder (its .shufflefl-output says gpu-check) is reused. Python is a stand-in whose parts fail at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def check(out: Path, tmp_path: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    stub = tmp_path / "python"
    stub.write_text(
        "#!/bin/bash\n# every part and the summary end at once; the -c bookkeeping runs for real\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\nexit 1\n'
    )
    stub.chmod(0o755)
    env = os.environ | {"PYTHON": str(stub)}
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry", str(out)], cwd=cwd, capture_output=True,
        text=True, timeout=60, env=env,
    )  # fmt: skip


def test_a_users_folder_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.json").write_text('{"mine": 1}')
    (out / "parts.jsonl").write_text('{"my": "row"}\n')
    done = check(out, tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "not made by gpu-check" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["parts.jsonl", "summary.json"]
    assert (out / "summary.json").read_text() == '{"mine": 1}' and (
        out / "parts.jsonl"
    ).read_text() == '{"my": "row"}\n'


def test_its_own_folder_is_reused(tmp_path):
    out = tmp_path / "check"
    first = check(out, tmp_path)
    assert (out / ".shufflefl-output").read_text() == "gpu-check\n" and "error:" not in first.stderr
    again = check(out, tmp_path)
    assert "not made by gpu-check" not in again.stderr and len((out / "parts.jsonl").read_text().splitlines()) == 4


def test_a_relative_out_is_the_callers(tmp_path):
    """OUT relative to where the script was called from, not to the checkout it moves into."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine").write_text("x")
    done = check(Path("configs"), tmp_path, cwd=tmp_path)
    assert done.returncode == 2 and f"OUT {tmp_path / 'configs'} is not empty" in done.stderr
    check(Path("fresh"), tmp_path, cwd=tmp_path)
    assert (tmp_path / "fresh" / ".shufflefl-output").read_text() == "gpu-check\n"
