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


def test_every_subcommand_has_its_own_help_and_the_main_help_shows_a_rebuild(capsys):
    from figures.__main__ import main

    assert main(["status", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m figures status")
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "NAME" not in capsys.readouterr().out  # report takes no names
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--runs results/ledger" in out and "python -m figures check fedcog-table1" in out


def test_status_on_the_ledger_counts_the_hours_of_runs_that_stopped_short(tmp_path, capsys):
    import json

    from figures.__main__ import main

    run = tmp_path / "L" / "runs" / "dynafed_fmnist_a001_paper_n1000_dsa_seed1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {"rounds": 200}}))
    rows = [{"round": t, "seconds": 10.0 * t} for t in range(1, 151)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["status", "dynafed-table1", "--scale", "paper", "--runs", str(tmp_path / "L")]) == 0
    out = capsys.readouterr().out
    assert "stopped at round 150 of 200 (10.0 s per round where it ran, 0.14 h left)" in out
    assert out.splitlines()[-1].startswith("0.14 hours left")
