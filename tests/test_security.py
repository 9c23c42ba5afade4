"""The package's security promise (docs/guides/artefacts.md, "Security"): no code runs from a data file (a
config read from a run folder, the ledger or a lease imports a plug-in only from where its user put it, and a
changed one is refused before it is imported), nothing is written through a symbolic link planted in a folder the
package writes, and every archive it takes is read with bounds (a property test feeds the reader random tars)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lab.records.lease as lease
from figures.__main__ import main as figures_main
from fl import plugins
from fl.atomic import locked
from fl.run import main as run_main
from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
MARKER = "PWNED"
PAYLOAD = textwrap.dedent(
    f"""
    from pathlib import Path
    Path(__file__).resolve().parents[3].joinpath("{MARKER}").write_text("ran")
    from dataclasses import dataclass
    from fl.methods import Method

    @dataclass(frozen=True)
    class M(Method):
        name = "m"
    """
)


@pytest.fixture()
def user(tmp_path, monkeypatch):
    """A user's working directory (the import path fl.plugins appends), with sys.path restored after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m == "results" or m.startswith("results.")]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def evil_run(folder: Path, spec: str = "results.runs.evilrun.pwn:M") -> Path:
    run = folder / "results" / "runs" / "evilrun"
    run.mkdir(parents=True)
    (run / "pwn.py").write_text(PAYLOAD)
    (run / "config.json").write_text(json.dumps({"method": {"name": spec}, "train": {"rounds": 2}}))
    (run / "metrics.jsonl").write_text("")
    return run


def test_a_plugin_that_came_with_a_run_folder_is_refused_before_import(user, capsys):
    run = evil_run(user)
    assert run_main(["--resume", str(run.relative_to(user)), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a folder this package writes" in err and "nothing imported" in err
    assert not (user / MARKER).exists() and "results.runs.evilrun.pwn" not in sys.modules


@pytest.mark.parametrize("mark", ["provenance.json", "sweep.json", ".ledger", ".shufflefl-intake", "ledger.json"])
def test_every_folder_the_package_writes_counts(user, mark):
    folder = user / "store" / "deep"
    folder.mkdir(parents=True)
    (folder / "mod.py").write_text("X = 1\n")
    (user / "store" / mark).write_text("{}")
    assert plugins.written_folder(folder / "mod.py") == user / "store"
    with pytest.raises(InputError, match="a folder this package writes"):
        plugins.resolve("store.deep.mod:X", "method.name")


def test_a_run_store_named_by_the_environment_counts_however_bare(user, monkeypatch):
    (user / "bare").mkdir()
    (user / "bare" / "mod.py").write_text("X = 1\n")
    assert plugins.written_folder(user / "bare" / "mod.py") is None
    monkeypatch.setenv("SHUFFLEFL_RUNS", str(user / "bare"))
    assert plugins.written_folder(user / "bare" / "mod.py") == user / "bare"


def test_a_changed_plugin_is_refused_before_its_module_runs(user):
    (user / "mine_changed.py").write_text(PAYLOAD.replace("parents[3]", "parents[0]"))
    recorded = {"method.name": {"spec": "mine_changed:M", "sha256": "0123456789ab"}}
    with plugins.expecting(recorded), pytest.raises(InputError, match="refused before importing it"):
        plugins.resolve("mine_changed:M", "method.name")
    assert not (user / MARKER).exists() and "mine_changed" not in sys.modules


def lease_with(folder: Path, archive: str, members: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / archive, "w:gz" if archive.endswith(".tgz") else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return folder


@pytest.mark.parametrize("archive", ["state-1.tar", "records-1.tgz"])
def test_code_in_a_lease_archive_is_refused_and_never_unpacked(user, archive):
    config = json.dumps({"method": {"name": "results.runs.evilrun.pwn:M"}}).encode()
    members = {"runs/evilrun/config.json": config, "runs/evilrun/pwn.py": PAYLOAD.encode()}
    folder = lease_with(user / "lease", archive, members)
    store = user / "results"
    assert figures_main(["ledger", "add", "--from-lease", str(folder), "--runs", str(store),
                         "--ledger", str(user / "ledger")]) == 2  # fmt: skip
    assert not list(store.rglob("pwn.py")) and not (user / MARKER).exists()


def test_the_run_lock_is_never_written_through_a_planted_link(tmp_path, capsys):
    run, target = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    target.write_text("mine")
    (run / ".running").symlink_to(target)
    (run / "config.json").write_text("{}")
    assert run_main(["--resume", str(run), "--quiet"]) == 2
    assert "symbolic link" in capsys.readouterr().err and target.read_text() == "mine"
    with pytest.raises(InputError, match="symbolic link"), locked(run / ".running", busy="run"):
        pass


def test_gpu_check_never_writes_through_a_planted_link(tmp_path):
    out, target = tmp_path / "out", tmp_path / "precious.txt"
    out.mkdir()
    target.write_text("mine")
    (out / ".shufflefl-output").write_text("gpu-check\n")
    (out / "parts.jsonl").symlink_to(target)
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "symbolic link" in done.stderr and target.read_text() == "mine"


def tar_bytes(members: list[tuple[str, int, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE][kind]
            info.size = len(data) if kind == 0 else 0
            info.linkname = "../../etc/passwd" if kind in (2, 3) else ""
            tar.addfile(info, io.BytesIO(data) if kind == 0 else None)
    return buffer.getvalue()


NAMES = st.text(alphabet=st.sampled_from("ab./-_\\x00é"), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    members=st.lists(st.tuples(NAMES, st.integers(0, 3), st.binary(max_size=300)), max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 4000)),
    flip=st.one_of(st.none(), st.integers(0, 4000)),
)
def test_the_archive_reader_on_random_tars_never_a_traceback_never_outside_never_past_its_cap(
    tmp_path, members, cut, flip
):  # fmt: skip
    data = bytearray(tar_bytes(members))
    if flip is not None and flip < len(data):
        data[flip] ^= 0xFF
    if cut is not None:
        data = data[:cut]
    folder = Path(tempfile.mkdtemp(prefix="case", dir=tmp_path))
    path = folder / "state-1.tar"
    path.write_bytes(bytes(data))
    try:
        files = lease.read_archive(path, max_member=200, max_members=4, max_total=500)
    except InputError as error:
        assert "\n" not in str(error)
        return
    assert sum(len(v) for v in files.values()) <= 500 and all(len(v) <= 200 for v in files.values())
    assert len(files) <= 4
    into = folder / "into"
    for name in files:
        assert not Path(name).is_absolute() and ".." not in Path(name).parts
    try:
        lease.extract(path, into)
    except (InputError, OSError):
        pass
    outside = {p for p in tmp_path.rglob("*") if not str(p).startswith(str(folder))}
    assert all(p.name.startswith("case") for p in outside if p.parent == tmp_path)
    assert not os.path.lexists(tmp_path / "etc")
