"""Record files are read only once seen to be regular files of a bounded size (issue 69, items 6-7; fourth sweep,
cases 20-34): a FIFO where a config, a run's rows, a summary or a fleet spec is expected is refused in one line at
once (never a read that blocks), and a file larger than any record is refused before it is read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from theory.errors import InputError
from theory.output import read_object, read_text_bounded


def test_a_fifo_a_folder_and_an_oversized_file_are_one_line_each(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_text_bounded(fifo, "config")
    with pytest.raises(InputError, match="a folder"):
        read_text_bounded(tmp_path, "config")
    big = tmp_path / "big.json"
    big.write_text("{" + " " * 100 + "}")
    with pytest.raises(InputError, match="more than any summary"):
        read_text_bounded(big, "summary", limit=50)
    assert read_text_bounded(big, "summary", limit=200).strip() == "{" + " " * 100 + "}"
    with pytest.raises(InputError, match="not a regular file"):
        read_object(fifo, "summary.json of a run")
    with pytest.raises(FileNotFoundError):
        read_text_bounded(tmp_path / "missing", "config")


@pytest.mark.parametrize("command", [["fl.run", "--config", "{fifo}", "--out", "{out}"], ["fl.fleet", "{fifo}"]])
def test_the_tools_refuse_a_fifo_at_once(tmp_path, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = [a.format(fifo=fifo, out=tmp_path / "out") for a in command]
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0


def test_json_and_toml_nested_deeper_than_python_recurses_are_one_line(tmp_path):
    """Fourth sweep, cases 75-80: nesting deeper than the recursion limit is refused as a damaged record."""
    from fl.config import load_config, parse_override

    deep = "[" * 100_000 + "]" * 100_000
    record = tmp_path / "summary.json"
    record.write_text(deep)
    with pytest.raises(InputError, match="summary"):
        read_object(record, "summary.json of a run")
    with pytest.raises(InputError, match="nested too deep"):
        parse_override(f"train.lr={deep}")
    config = tmp_path / "deep.toml"
    config.write_text(f"[train]\nlr = {deep}\n")
    with pytest.raises(InputError, match="nested too deep"):
        load_config(config)
