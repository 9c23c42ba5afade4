"""Flags that were silently ignored or misread (issue 44, class 6): ``--resume`` with an ``--out`` elsewhere or
``--overwrite`` (fl.run and fl.flower), ``--compare`` with flags that start a run, a misspelt or trailing flag of
scripts/gpu-check.sh, ``figures status`` on a missing run store, fl.flower's help text, and fl.data.fetch's
unpacking on a Python without tarfile's extraction filters (3.10 before 3.10.12).

The one-line refusals of the Python CLIs are also cases of tests/test_cli_bad_inputs.py; here each is checked for
what it names, and the shell script and the unpacking, which that test cannot call, are checked on their own."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECK = ROOT / "scripts" / "gpu-check.sh"


def one_line(capsys, tool: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m {tool}: error: "), err
    return err


# ------------------------------------------------------------------------------- fl.run and fl.flower flags


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--resume", "{run}", "--out", "{tmp}/other"], "drop --out"),
        (["--resume", "{run}", "--overwrite"], "--overwrite starts a run anew"),
        (["--compare", "{run}", "{run}", "--config", "configs/fmnist_quick.toml"], "drop --config"),
        (["--compare", "{run}", "{run}", "--out", "{tmp}/x"], "drop --out"),
        (["--compare", "{run}", "{run}", "--set", "train.rounds=3", "--device", "cpu"], "drop --set, --device"),
    ],
)
def test_fl_run_refuses_flags_it_would_ignore(argv, named, tmp_path, capsys):
    from fl.run import main

    run = tmp_path / "run"
    run.mkdir()  # not even a run: the flags are refused before the folder is looked at
    args = [a.replace("{run}", str(run)).replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(args) == 2
    assert named in one_line(capsys, "fl.run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and not any(run.iterdir())


def test_fl_run_resume_with_its_own_folder_as_out_is_not_refused(tmp_path, capsys):
    from fl.run import main

    assert main(["--resume", str(tmp_path / "run"), "--out", str(tmp_path / "." / "run")]) == 2
    assert "not a run directory" in one_line(capsys, "fl.run")  # past the flag check: the folder is no run


def test_fl_flower_refuses_resume_elsewhere_and_documents_its_flags(tmp_path, capsys):
    pytest.importorskip("flwr")
    from fl.flower.__main__ import main

    for extra, named in ((["--out", str(tmp_path / "other")], "drop --out"), (["--overwrite"], "--overwrite")):
        assert main(["--resume", str(tmp_path / "run"), *extra]) == 2
        assert named in one_line(capsys, "fl.flower")
    assert not any(tmp_path.iterdir())
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    for flag, words in [
        ("--config", "TOML config"), ("--set", "override a config value"), ("--out", "run directory"),
        ("--resume", "continue the interrupted run"), ("--overwrite", "replace an existing run directory"),
    ]:  # fmt: skip
        assert f"{flag} " in text and words in text, flag


# ------------------------------------------------------------------------------------- scripts/gpu-check.sh


STUB = """#!/bin/sh
# stands in for python: inline code (the script's own bookkeeping) runs; every part's command is only recorded
if [ "$1" = "-c" ]; then exec "{python}" "$@"; fi
echo "$@" >> "{log}"
"""


def gpu_check(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """scripts/gpu-check.sh ARGS with PYTHON a stub that records each part's command instead of running it."""
    log, stub = tmp_path / "commands.log", tmp_path / "python-stub"
    stub.write_text(STUB.format(python=sys.executable, log=log))
    stub.chmod(0o755)
    done = subprocess.run(
        ["bash", str(GPU_CHECK), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHON": str(stub)},
    )  # fmt: skip
    return done, (log.read_text().splitlines() if log.exists() else [])


@pytest.mark.parametrize("args", [["--dyr"], ["--dry", "--dyr"], ["-x", "OUT"], ["A", "B"], ["--dry", "A", "B"]])
def test_gpu_check_refuses_a_misspelt_flag_or_a_second_folder(args, tmp_path):
    done, commands = gpu_check([a if a.startswith("-") else str(tmp_path / a) for a in args], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("scripts/gpu-check.sh: error: "), done.stderr
    assert commands == [] and sorted(p.name for p in tmp_path.iterdir()) == ["python-stub"]


@pytest.mark.parametrize("order", ["flag first", "flag last"])
def test_gpu_check_honours_dry_before_or_after_the_folder(order, tmp_path):
    out = tmp_path / "check"
    done, commands = gpu_check(["--dry", str(out)] if order == "flag first" else [str(out), "--dry"], tmp_path)
    assert done.returncode == 0, done.stderr
    fedavg = next(c for c in commands if "configs/fmnist_quick.toml" in c)
    assert "train.rounds=1" in fedavg and "train.rounds=20" not in fedavg  # the dry sizes, not the 25-minute check
    assert f"--out {out}/fmnist_fedavg" in fedavg and (out / "parts.jsonl").exists()


# ----------------------------------------------------------------------------------------- figures status


def test_figures_status_names_a_missing_run_store(tmp_path, monkeypatch, capsys):
    from figures.__main__ import main

    monkeypatch.delenv("SHUFFLEFL_RUNS", raising=False)
    assert main(["status", "--runs", str(tmp_path / "nope"), "--root", str(tmp_path)]) == 2
    assert f"the run store {tmp_path / 'nope'} (--runs) is missing" in one_line(capsys, "figures")
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(tmp_path / "gone"))
    assert main(["status", "--root", str(tmp_path)]) == 2
    assert "($SHUFFLEFL_RUNS) is missing" in one_line(capsys, "figures")
    assert not (tmp_path / "nope").exists() and not (tmp_path / "gone").exists()


# ------------------------------------------------------------------------ fl.data.fetch on an older Python


def tarball(path: Path, members: dict[str, bytes | str | None]) -> Path:
    """A .tar.gz of ``members``: name -> bytes (a file), None (a folder) or str (a symlink to that target)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture()
def old_python(monkeypatch):
    """tarfile as on Python 3.10.0-3.10.11: no extraction filters, and extractall() takes no ``filter``."""
    monkeypatch.delattr(tarfile, "data_filter")
    original = tarfile.TarFile.extractall

    def extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
        if kwargs:
            raise TypeError(f"extractall() got an unexpected keyword argument {next(iter(kwargs))!r}")
        return original(self, path, members, numeric_owner=numeric_owner)

    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)


def test_fetch_unpacks_without_extraction_filters(old_python, tmp_path):
    from fl.data.fetch import extract_data

    path = tarball(tmp_path / "a.tar.gz", {"top": None, "top/data_batch_1": b"abc", "top/sub/x": b"y"})
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(path) as tar:
        extract_data(tar, root, path)
    assert (root / "top" / "data_batch_1").read_bytes() == b"abc" and (root / "top" / "sub" / "x").read_bytes() == b"y"


@pytest.mark.parametrize(
    "members",
    [
        {"top/ok": b"1", "../evil": b"x"},
        {"top/ok": b"1", "/tmp/evil-abs": b"x"},
        {"top/ok": b"1", "top/link": "/etc/passwd"},
        {"top/ok": b"1", "top/../../evil": b"x"},
    ],
    ids=["dot-dot", "absolute", "symlink", "nested dot-dot"],
)
def test_fetch_without_filters_refuses_what_the_data_filter_refuses(old_python, members, tmp_path):
    from fl.data import DataError
    from fl.data.fetch import extract_data

    path = tarball(tmp_path / "bad.tar.gz", members)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(path) as tar, pytest.raises(DataError, match="not unpacked"):
        extract_data(tar, root, path)
    assert not any(root.iterdir()) and not (tmp_path / "evil").exists()  # checked before anything is written
