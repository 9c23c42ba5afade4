"""Fixtures shared by the fl tests."""

from __future__ import annotations

import pytest


def assert_one_line_config_error(argv: list[str], key: str, capsys) -> None:
    """``python -m fl.run argv`` exits 2 with one line, "python -m fl.run: error: ...", naming ``key``."""
    from fl.run import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1 and key in err


def interrupt_at(monkeypatch, t: int):
    """Make ``python -m fl.run``'s round t raise KeyboardInterrupt (a Ctrl-C) before it computes anything; returns
    the undo (call it before resuming)."""
    import fl.experiment as experiment_module

    real_round = experiment_module.compute_round

    def interrupting(state, *args, **kwargs):
        if state.round == t:
            raise KeyboardInterrupt
        return real_round(state, *args, **kwargs)

    monkeypatch.setattr(experiment_module, "compute_round", interrupting)
    return lambda: monkeypatch.setattr(experiment_module, "compute_round", real_round)


def plugin_folder(tmp_path, monkeypatch, modules: dict[str, str]):
    """A folder outside the package holding each ``modules`` name's code (dedented) as ``NAME.py``, made the working
    directory (fl.plugins imports from there); an earlier test's module of the same name is forgotten first, and
    ``sys.path`` is restored after."""
    import sys
    import textwrap

    folder = tmp_path / "plug"
    folder.mkdir()
    for name, code in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(code))
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(folder)
    return folder


def assert_close_tree(a, b, rel=1e-9):
    """Two nested rows equal, their floats to ``rel`` (batched computations sum in another order)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_close_tree(a[key], b[key], rel)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            assert_close_tree(u, v, rel)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=rel, abs=1e-12)
    else:
        assert a == b
