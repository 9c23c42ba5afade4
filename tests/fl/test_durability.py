"""Every file a run writes reaches the disk before it counts (issue 44, class 10): fl.atomic.replace_durably (and
theory.output.write_text_atomically under it) fsyncs the new file before the rename and the folder after it, a
leftover temporary file (a link included) is removed, never followed, and a failed writer leaves neither; an fl.run
run writes config.json, provenance.json, summary.json, checkpoint.pt and the rewritten metrics through that path,
and fsyncs metrics.jsonl before each checkpoint that continues it; a sweep's table.csv and sweep.json and
fl.remeasure's appended lines are fsynced too."""

from __future__ import annotations

import os
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


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_the_file_and_its_folder_are_synced(tmp_path, synced):
    replace_durably(tmp_path / "a.json", lambda tmp: tmp.write_text("{}"))
    assert synced == [str(tmp_path / "a.json.tmp"), str(tmp_path)]
    assert (tmp_path / "a.json").read_text() == "{}" and not (tmp_path / "a.json.tmp").exists()


def test_a_leftover_temporary_link_is_removed_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "summary.json.tmp").symlink_to(victim)
    write_text_atomically(tmp_path / "summary.json", "{}")
    assert victim.read_text() == "mine" and (tmp_path / "summary.json").read_text() == "{}"
    assert not (tmp_path / "summary.json").is_symlink()


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
        assert f"{name}.tmp" in files, f"{name} not written whole and synced: {sorted(files)}"
    assert "metrics.jsonl" in files and str(out) in synced  # the log before each checkpoint; the folder's entries
    assert synced.index(str(out / "metrics.jsonl")) < synced.index(str(out / "checkpoint.pt.tmp"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_table_is_written_whole_and_synced(tmp_path, synced):
    """fl.sweep's table.csv (theory.output.write_csv) goes through the same path; sweep.json through
    write_text_atomically."""
    write_csv(tmp_path / "table.csv", ["a", "b"], [[1, 2]])
    assert synced == [str(tmp_path / "table.csv.tmp"), str(tmp_path)]
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
