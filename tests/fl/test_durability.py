"""Every file a run writes reaches the disk before it counts (issue 44, class 10): fl.atomic.replace_durably (and
theory.output.write_text_atomically under it) fsyncs the new file before the rename and the folder after it, a
temporary is a new file of a random name (a user's NAME.tmp, a link included, is neither removed nor followed: issue
69, L3), and a failed writer leaves neither; an fl.run
run writes config.json, provenance.json, summary.json, checkpoint.pt and the rewritten metrics through that path,
and fsyncs metrics.jsonl before each checkpoint that continues it; a sweep's table.csv and sweep.json and
fl.remeasure's appended lines are fsynced too."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fl.run import main
from tests.fl.test_run import base_args
from theory.output import append_line_durably, replace_durably, write_csv, write_text_atomically


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths os.fsync is called on, in order (each still synced for real)."""
    calls: list[str] = []
    real = os.fsync

    def fsync(fd):
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def temporary_of(path: Path, suffix: str = ".tmp") -> re.Pattern:
    """The names replace_durably gives ``path``'s temporaries (theory.output.temporary_beside)."""
    return re.compile(re.escape(str(path)) + r"\.[0-9a-f]{16}" + re.escape(suffix))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_the_file_and_its_folder_are_synced(tmp_path, synced):
    replace_durably(tmp_path / "a.json", lambda tmp: tmp.write_text("{}"))
    assert len(synced) == 2 and temporary_of(tmp_path / "a.json").fullmatch(synced[0]) and synced[1] == str(tmp_path)
    assert (tmp_path / "a.json").read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_users_file_or_link_named_like_a_temporary_is_neither_removed_nor_followed(tmp_path):
    """Issue 69, L3: the temporary was NAME.tmp, and a file of that name was removed first (a user's own)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "summary.json.tmp").symlink_to(victim)
    (tmp_path / "notes.txt.tmp").write_text("my notes")
    write_text_atomically(tmp_path / "summary.json", "{}")
    write_text_atomically(tmp_path / "notes.txt", "new")
    assert victim.read_text() == "mine" and (tmp_path / "summary.json").read_text() == "{}"
    assert not (tmp_path / "summary.json").is_symlink() and (tmp_path / "summary.json.tmp").is_symlink()
    assert (tmp_path / "notes.txt.tmp").read_text() == "my notes" and (tmp_path / "notes.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt", "notes.txt.tmp", "summary.json", "summary.json.tmp", "victim.txt"
    ]  # fmt: skip


def test_the_temporary_keeps_the_suffix_and_the_umask_mode(tmp_path):
    """np.savez needs its ".npz"; the new file's mode is a new file's (not mkstemp's 0600)."""
    seen = []

    def write(tmp):
        seen.append(tmp)
        tmp.write_bytes(b"x")

    replace_durably(tmp_path / "set.npz", write, ".tmp.npz")
    assert temporary_of(tmp_path / "set.npz", ".tmp.npz").fullmatch(str(seen[0]))
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "set.npz").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "config.json").write_text("old")

    def half(tmp):
        tmp.write_text("ha")
        raise OSError("disk full")

    with pytest.raises(OSError):
        replace_durably(tmp_path / "config.json", half)
    assert (tmp_path / "config.json").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["config.json"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_run_writes_its_records_through_the_synced_path(cifar_root, tmp_path, synced):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out, "--workers", "1")) == 0
    files = {Path(p).name for p in synced}
    for name in ("config.json", "provenance.json", "summary.json", "checkpoint.pt", "metrics.jsonl"):
        assert any(temporary_of(out / name).fullmatch(p) for p in synced), f"{name} not written whole: {files}"
    assert "metrics.jsonl" in files and str(out) in synced  # the log before each checkpoint; the folder's entries
    checkpoint = next(k for k, p in enumerate(synced) if temporary_of(out / "checkpoint.pt").fullmatch(p))
    assert synced.index(str(out / "metrics.jsonl")) < checkpoint


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_table_is_written_whole_and_synced(tmp_path, synced):
    """fl.sweep's table.csv (theory.output.write_csv) goes through the same path; sweep.json through
    write_text_atomically."""
    write_csv(tmp_path / "table.csv", ["a", "b"], [[1, 2]])
    assert len(synced) == 2 and temporary_of(tmp_path / "table.csv").fullmatch(synced[0]) and synced[1] == str(tmp_path)
    assert (tmp_path / "table.csv").read_text().splitlines() == ["a,b", "1,2"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_line_appended_after_a_torn_one_stays_its_own_line(tmp_path, synced):
    """fl.remeasure's estimates_posthoc.jsonl: each line is fsynced; a torn last line (a crash mid-write) is ended
    first, so the next line is not swallowed by it."""
    log = tmp_path / "log.jsonl"
    append_line_durably(log, '{"round": 1}')
    log.write_bytes(log.read_bytes() + b'{"round": 2, "tor')
    append_line_durably(log, '{"round": 3}\n')
    assert log.read_text().splitlines() == ['{"round": 1}', '{"round": 2, "tor', '{"round": 3}']
    assert len(synced) == 2
