"""Nothing runs from a data folder (issue 69, third sweep, cases 61, 62, 64): every package's entry point started in a
folder the package wrote takes the working directory off ``sys.path`` before anything is imported from it
(theory.datafolder, imported first by every package), so a ``numpy.py`` lying there never shadows the library."""

from __future__ import annotations

import subprocess
import sys

import pytest

import theory.datafolder as datafolder
from theory.cli import OWNER


@pytest.mark.parametrize("module", ["sims.quadratic", "figures", "lab.campaign", "theory", "fl.run", "fl.sweep"])
def test_an_entry_point_in_a_data_folder_imports_nothing_from_it(tmp_path, module):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / OWNER).write_text("sims.quadratic\n")  # an output folder of one of our CLIs
    marker = tmp_path / "imported"
    for name in ("numpy", "json", "argparse"):
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=folder, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert not marker.exists(), f"{module} imported {marker.read_text()} from the data folder"
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr[-2000:]  # help or usage


def test_a_users_folder_keeps_its_place_on_the_path(tmp_path):
    (tmp_path / "mine.py").write_text("VALUE = 7\n")
    done = subprocess.run([sys.executable, "-c", "import theory, mine; print(mine.VALUE)"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.stdout.strip() == "7", done.stderr


def test_the_marks_are_those_the_tools_write():
    from fl.sinks import OWNER as CURVES

    assert {OWNER, CURVES} <= set(datafolder.WRITTEN_MARKS)
    assert datafolder.is_cache_name("client3-0123456789abcdef")
    assert not datafolder.is_cache_name("client3-0123456789abcde") and not datafolder.is_cache_name("clientx-0" * 1)
