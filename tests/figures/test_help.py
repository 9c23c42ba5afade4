"""``python -m figures --help`` names its subcommands, one line each."""

from __future__ import annotations

import pytest

from figures.__main__ import main


def test_the_help_names_every_subcommand(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    for command in ("check", "report", "ledger", "status"):
        assert any(line.lstrip().startswith(command + " ") for line in lines if line.startswith("  ")), command
