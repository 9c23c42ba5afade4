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


@pytest.mark.parametrize("module", ["sims.quadratic", "figures", "lab.campaign", "fl.run"])
def test_a_theory_package_planted_in_a_data_folder_never_runs(tmp_path, module):
    """Sweep 5 case 134: a package named as one of ours (``theory``) in a data folder: every package runs the guard
    by its file's path, not by the name a planted package would answer to."""
    folder = tmp_path / "out"
    (folder / "theory").mkdir(parents=True)
    (folder / OWNER).write_text("fl.run\n")
    marker = tmp_path / "imported"
    (folder / "theory" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('theory')\n")
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=folder, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert not marker.exists(), f"{module} imported the planted theory package"
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr[-2000:]


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


def test_processes_started_from_a_data_folder_import_nothing_from_it_either(tmp_path):
    """Fourth sweep, case 19: a spawned worker imports ``multiprocessing`` before it learns its parent's path; it
    starts with PYTHONSAFEPATH, which the parent sets once it sees its working directory is a data folder."""
    folder = tmp_path / "sweep"
    (folder / "multiprocessing").mkdir(parents=True)
    (folder / OWNER).write_text("fl.sweep\n")
    marker = tmp_path / "imported"
    (folder / "multiprocessing" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('ran')\n")
    code = ("import theory, os, multiprocessing as mp\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=os.getpid)\n"
            "    p.start(); p.join(); print(p.exitcode)\n")  # fmt: skip
    (tmp_path / "start.py").write_text(code)
    done = subprocess.run([sys.executable, str(tmp_path / "start.py")], cwd=folder, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert not marker.exists(), "a process imported multiprocessing from the data folder"
    assert done.stdout.strip() == "0", done.stderr[-2000:]


def test_a_plugins_search_leaves_no_data_folder_on_the_path(tmp_path, monkeypatch):
    """Fourth sweep, case 16: resolving a plug-in from inside a run folder searches it only to refuse what lies
    there; afterwards a library's optional ``import brotli`` finds nothing planted in it."""
    import fl.plugins as plugins

    (tmp_path / OWNER).write_text("fl.run\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    plugins.resolve("json:JSONDecoder", "method.name")
    assert str(tmp_path) not in sys.path
