"""scripts/gpu-bench.sh (benchmarks/gpu_bench.py) ends in one line, never a traceback (issue 69, class 7): an
``--out`` that is a device or a pipe is refused before any work (as root, writing "through" /dev/full replaced the
device with a file), a write that fails (a full disk) names the file, exit 2, and Ctrl-C or SIGTERM says so, exit
130, the parts measured before kept in ``--out``."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat

import pytest

from tests.benchmarks.test_bench_bad_inputs import load_bench


@pytest.fixture()
def bench(monkeypatch):
    """gpu_bench with its DDPM part a stand-in (the peak part, --dry, takes a second)."""
    module = load_bench("gpu_bench")
    monkeypatch.setattr(module, "ddpm", lambda device, sizes: [{"part": "ddpm", "tflops": 1.0}])
    return module


def test_an_out_that_is_a_pipe_is_refused_before_any_work(bench, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as done:
        bench.main(["--dry", "--parts", "ddpm", "--out", str(fifo)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "not a regular file" in err and str(fifo) in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and "device:" not in capsys.readouterr().out


def test_a_write_that_fails_is_one_line_naming_the_file(bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu.json"

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(bench, "write_text_atomically", full)
    assert bench.main(["--dry", "--parts", "ddpm", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gpu-bench.sh: error: {out}: No space left on device"), err


def test_ctrl_c_is_one_line_and_keeps_the_parts_measured_before(bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu.json"

    def interrupted(device, sizes):
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the signal did not stop the part")

    monkeypatch.setattr(bench, "ddpm", interrupted)
    assert bench.main(["--dry", "--parts", "ddpm", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err == f"gpu-bench.sh: interrupted; the parts measured before are in {out}\n"
    assert [row["part"] for row in json.loads(out.read_text())["rows"]] == ["peak"]
