"""plots.figure.save, the drawing leaf's writer: a fresh temporary beside the figure, renamed over it; it removes
no file it did not create (a user's ``NAME.tmp`` survives) and replaces a planted link instead of following it."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt

from plots.figure import save


def test_save_keeps_a_users_file_named_like_the_old_temporary_and_replaces_a_link(tmp_path):
    users = tmp_path / "fig.png.tmp"
    users.write_text("a user's own file\n")
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("not the figure\n")
    target = tmp_path / "fig.png"
    target.symlink_to(victim)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save(fig, target, dpi=50)
    plt.close(fig)
    assert users.read_text() == "a user's own file\n" and victim.read_text() == "not the figure\n"
    assert not target.is_symlink() and target.read_bytes().startswith(b"\x89PNG")
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(os.listdir(tmp_path)) == ["elsewhere.txt", "fig.png", "fig.png.tmp"]
