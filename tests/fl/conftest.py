"""Fixtures shared by the fl tests."""

from __future__ import annotations


def assert_one_line_config_error(argv: list[str], key: str, capsys) -> None:
    """``python -m fl.run argv`` exits 2 with one line, "python -m fl.run: error: ...", naming ``key``."""
    from fl.run import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1 and key in err


def interrupt_at(monkeypatch, t: int):
    """Make ``python -m fl.run``'s round t raise KeyboardInterrupt (a Ctrl-C) before it computes anything; returns
    the undo (call it before resuming)."""
    import fl.run as run_module

    real_round = run_module.compute_round

    def interrupting(state, *args, **kwargs):
        if state.round == t:
            raise KeyboardInterrupt
        return real_round(state, *args, **kwargs)

    monkeypatch.setattr(run_module, "compute_round", interrupting)
    return lambda: monkeypatch.setattr(run_module, "compute_round", real_round)
