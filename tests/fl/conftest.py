"""Fixtures shared by the fl tests."""

from __future__ import annotations


def assert_one_line_config_error(argv: list[str], key: str, capsys) -> None:
    """``python -m fl.run argv`` exits 2 with one line, "python -m fl.run: error: ...", naming ``key``."""
    from fl.run import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1 and key in err
