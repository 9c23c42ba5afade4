"""No link planted at a file ``python -m figures`` or ``python -m fl.quality`` writes is ever written through (issue
69, item 1; tests/test_links.py has the other commands): each command runs for real, every file it made is replaced
by a link to a file outside its folders, and the command runs again. Each file is then replaced whole (a temporary
file renamed over the link) or the command refuses, the linked file keeping its content: in one line and exit 2 for
a command-wide refusal; ``figures ledger add`` and ``ledger seal`` refuse as they refuse any damaged ledger (a line
per run, or per damaged file, and exit 1; the ledger's check names any link in it as damage)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from figures.__main__ import main as figures_main
from fl.quality import main as quality_main
from tests.figures.test_ledger import make_run
from tests.fl.test_quality import blobs, fake_cache
from tests.test_links import assert_replaced, one_line, relink, victim_of
from theory.cli import OWNER

ROOT = Path(__file__).resolve().parents[1]
QUALITY = ROOT / "results" / "ledger" / "quality" / "ddpm-fmnist-seed0.json"  # a quality report the ledger holds


def build(tmp_path: Path, *names: str) -> tuple[Path, list[str]]:
    """``python -m figures NAMES --scale quick`` into a new root (its run store beside it): (the root, the argv)."""
    root = tmp_path / "root"
    argv = [*names, "--scale", "quick", "--root", str(root), "--runs", str(tmp_path / "store")]
    assert figures_main(argv) == 0
    return root, argv


def test_figures_rebuilds_an_artefact_over_the_links_planted_at_its_files(tmp_path, capsys):
    root, argv = build(tmp_path, "fig2", "lemma1")
    victim = victim_of(tmp_path, "figures\n")
    folders = [root / "fig2" / "quick", root / "lemma1" / "quick"]  # fig2's figures are its simulator run's
    names = {folder: relink(folder, victim) for folder in folders}
    assert list(names.values()) == [[OWNER, "result.json"], [OWNER, "lemma1.pdf", "lemma1.png", "result.json"]]
    capsys.readouterr()
    assert figures_main(argv) == 2  # a linked result.json is no result of the tool's: never read as one
    one_line(capsys.readouterr().err, "symbolic link", str(folders[0] / "result.json"), "--force")
    assert victim.read_text() == "figures\n"
    assert figures_main([*argv, "--force"]) == 0
    for folder, planted in names.items():
        assert_replaced(folder, planted, victim, "figures\n")
        assert json.loads((folder / "result.json").read_text())["scale"] == "quick"
    for text in ("{", '{"rows": []}'):  # a damaged result.json, or one of no build: one line too, no traceback
        (folders[1] / "result.json").write_text(text)
        capsys.readouterr()
        assert figures_main(argv) == 2
        one_line(capsys.readouterr().err, str(folders[1] / "result.json"), "--force")


def test_figures_never_follows_a_link_in_its_simulators_run_folder(tmp_path, capsys):
    root, argv = build(tmp_path, "fig2")
    run = root / "fig2" / "quick" / "run"
    victim = victim_of(tmp_path, "sims.quadratic\n")  # the owner file's link names the simulator: still its folder
    names = relink(run, victim)
    assert {".shufflefl-output", "summary.json", "fig2.png", "fig2.pdf", "table.csv"} <= set(names)
    capsys.readouterr()
    assert figures_main([*argv, "--force"]) == 2  # a linked summary is no summary: refused, not run over
    one_line(capsys.readouterr().err, str(run / "summary.json"))
    assert victim.read_text() == "sims.quadratic\n" and all((run / name).is_symlink() for name in names)
    (run / "summary.json").unlink()  # an interrupted simulator run: the simulator runs again into its folder
    assert figures_main([*argv, "--force"]) == 0
    assert_replaced(run, names, victim, "sims.quadratic\n")


def test_an_artefact_folder_that_is_a_link_to_a_users_folder_is_refused(tmp_path, capsys):
    """Fourth sweep, case 49: ROOT/fig2/quick replaced by a link to a user's folder: nothing written into it."""
    root, argv = build(tmp_path, "fig2")
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes").write_text("mine\n")
    (root / "fig2" / "quick").rename(root / "fig2" / "old")
    (root / "fig2" / "quick").symlink_to(user, target_is_directory=True)
    capsys.readouterr()
    assert figures_main([*argv, "--force"]) == 2
    one_line(capsys.readouterr().err, "symbolic link", str(root / "fig2" / "quick"))
    assert sorted(p.name for p in user.iterdir()) == ["notes"]


def tiny_ledger(tmp_path: Path) -> tuple[Path, Path]:
    """A ledger made by ``figures ledger add`` of a small run and a quality report: (the ledger, the run)."""
    ledger, run = tmp_path / "L", make_run(tmp_path / "store" / "runs" / "a_run")
    assert figures_main(["ledger", "add", str(run), str(QUALITY), "--ledger", str(ledger)]) == 0
    return ledger, run


def files_of(ledger: Path) -> list[str]:
    return sorted(str(p.relative_to(ledger)) for p in ledger.rglob("*") if p.is_file() and not p.is_symlink())


PLANTS = {  # where the links go in the ledger (its files, relative to it)
    "its mark": lambda files: [".ledger"],
    "its manifest": lambda files: ["manifest.json"],
    "its entries' files": lambda files: [f for f in files if "/" in f],
    "every file": lambda files: files,
}


def plant(ledger: Path, names: list[str], victim: Path) -> dict[str, bytes]:
    """A link to ``victim`` at each of ``names``; the bytes of every file of the ledger left as it is."""
    for name in names:
        (ledger / name).unlink()
        (ledger / name).symlink_to(victim)
    return {name: (ledger / name).read_bytes() for name in files_of(ledger)}


def assert_untouched(ledger: Path, names: list[str], victim: Path, kept: dict[str, bytes]) -> None:
    assert victim.read_text() == "figures ledger\n"
    assert all((ledger / name).is_symlink() for name in names)  # refused: each link left as it was
    assert {name: (ledger / name).read_bytes() for name in files_of(ledger)} == kept


@pytest.mark.parametrize("where", PLANTS)
def test_figures_ledger_add_refuses_every_link_planted_in_the_ledger(tmp_path, capsys, where):
    ledger, run = tiny_ledger(tmp_path)
    files = files_of(ledger)
    assert files == [".ledger", "manifest.json", f"quality/{QUALITY.name}", "runs/a_run/config.json",
                     "runs/a_run/ledger.json", "runs/a_run/metrics.jsonl", "runs/a_run/provenance.json",
                     "runs/a_run/summary.json"]  # fmt: skip
    victim = victim_of(tmp_path, "figures ledger\n")
    names = PLANTS[where](files)
    kept = plant(ledger, names, victim)
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())  # the same run, added again
    capsys.readouterr()
    code = figures_main(["ledger", "add", str(run), str(QUALITY), "--ledger", str(ledger)])
    out, err = capsys.readouterr()
    if ".ledger" in names:  # the ledger is no ledger: the whole command, in one line
        assert code == 2
        one_line(err, "symbolic link", str(ledger / ".ledger"))
    else:  # each source refused in its line (as for a damaged ledger), and the count
        lines = out.splitlines()
        assert code == 1 and len(lines) == 3 and lines[-1] == "figures ledger: 2 of 2 run(s) refused", out
        linked = [str(ledger / name) for name in names]
        assert all("link" in line and any(f"{path}:" in line for path in linked) for line in lines[:2]), out
        assert "Traceback" not in err
    assert_untouched(ledger, names, victim, kept)


@pytest.mark.parametrize("where", ["its mark", "its manifest", "its entries' files"])
def test_figures_ledger_seal_refuses_a_ledger_with_a_planted_link(tmp_path, capsys, where):
    ledger, _ = tiny_ledger(tmp_path)
    victim = victim_of(tmp_path, "figures ledger\n")
    names = PLANTS[where](files_of(ledger))
    kept = plant(ledger, names, victim)
    capsys.readouterr()
    code = figures_main(["ledger", "seal", "--ledger", str(ledger), "--report", str(tmp_path / "REPORT.md")])
    out, err = capsys.readouterr()
    if where == "its mark":
        assert code == 2
        one_line(err, "symbolic link", str(ledger / ".ledger"))
    else:  # the ledger's check: one line per link, then why nothing was sealed
        lines = out.splitlines()
        assert code == 1 and "no manifest written" in lines[-1] and "Traceback" not in err, out
        named = {line.split(": ", 1)[0] for line in lines[:-1] if "(a link?)" in line}
        assert named == {str(ledger / name) for name in names}, out  # each link named (and what it broke, maybe)
    assert_untouched(ledger, names, victim, kept)


def test_figures_report_replaces_a_linked_report_whole_or_refuses_it(tmp_path, capsys):
    ledger, _ = tiny_ledger(tmp_path)
    report = tmp_path / "REPORT.md"
    argv = ["report", "--ledger", str(ledger), "--report", str(report)]
    assert figures_main(argv) == 0
    written = report.read_text()
    victim = victim_of(tmp_path, written)  # the report itself, elsewhere: what the tool would take for its own
    assert relink(tmp_path, victim) == ["REPORT.md"]
    assert figures_main(argv) == 0
    assert_replaced(tmp_path, ["REPORT.md"], victim, written)
    assert report.read_text() == written

    victim.write_text("figures report\n")  # a user's file, no report: refused, in one line
    report.unlink()
    report.symlink_to(victim)
    capsys.readouterr()
    assert figures_main(argv) == 2
    one_line(capsys.readouterr().err, str(report), "left as it is")
    assert victim.read_text() == "figures report\n" and report.is_symlink()


def test_fl_quality_refuses_a_link_planted_at_its_report(tmp_path, capsys):
    cache = fake_cache(tmp_path / "cache", 0)
    (x, y), (xt, yt) = blobs(200, 0), blobs(60, 1)
    np.savez(tmp_path / "real.npz", x_train=x, y_train=y, x_test=xt, y_test=yt)
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    argv = [str(cache), "--seed", "0", "--dataset", f"npz:{tmp_path / 'real.npz'}", "--epochs", "1", "--out", str(out)]
    assert quality_main(argv) == 0
    written = out.read_text()
    victim = victim_of(tmp_path, written)  # one of its own reports, elsewhere: still never written through
    assert relink(out.parent, victim) == ["report.json"]
    capsys.readouterr()
    assert quality_main(argv) == 2
    one_line(capsys.readouterr().err, "symbolic link", str(out))
    assert victim.read_text() == written and out.is_symlink()
