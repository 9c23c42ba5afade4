"""``python -m fl.run --overwrite`` removes every file fl.run or fl.remeasure wrote in the run folder (checkpoints,
post-hoc estimates, the per-client table and picture, a temporary a crash left, a link planted at one of those
names), so none is read as the new run's, and nothing else (a user's notes and folders stay); and the list of names
it removes (fl.runfolder.RUN_FILES) holds what the run, its methods and fl.remeasure write. (Never while another process
runs in the folder: tests/fl/test_run.py::test_a_run_folder_in_use_is_refused_in_one_line.)"""

from __future__ import annotations

import re
from pathlib import Path

from fl import remeasure
from fl.methods.dynafed import Progress
from fl.metrics import CLIENTS_CSV
from fl.run import main
from fl.runfolder import RUN_FILE, RUN_LOCK
from tests.fl.test_run import base_args
from theory.cli import OWNER

ROOT = Path(__file__).resolve().parents[2]
THE_RUNS = {OWNER, RUN_LOCK}  # the folder's mark and lock: kept (the start rewrites one and holds the other)


def test_overwrite_removes_every_file_of_the_earlier_run_and_nothing_else(cifar_root, tmp_path):
    out = tmp_path / "run"
    extra = ("--set", "train.keep_round=2", "--set", "train.client_eval_every=2", "--set", "data.val_fraction=0.2")
    assert main(base_args(cifar_root, out, *extra)) == 0
    assert [line["round"] for line in remeasure.remeasure(out, samples=2, quiet=True)] == [2, 4]
    (out / "checkpoint.pt.0123456789abcdef.tmp").write_bytes(b"cut short")  # what a write cut short leaves
    (out / "checkpoint.pt.tmp").write_bytes(b"a user's")  # a name no write of the package's leaves: the user's
    written = {p.name for p in out.iterdir()} - THE_RUNS - {"checkpoint.pt.tmp"}
    assert {"checkpoint_round2.pt", CLIENTS_CSV, "clients.png", remeasure.OUT} <= written
    assert all(RUN_FILE.fullmatch(name) for name in written), written  # every file the run made is one of its own
    (out / "NOTES.md").write_text("mine")
    (tmp_path / "elsewhere.pt").write_bytes(b"not the run's")
    (out / "checkpoint_round3.pt").symlink_to(tmp_path / "elsewhere.pt")  # a link at a name of the run's: removed
    (out / "plots").mkdir()
    (out / "plots" / "clients.png").write_bytes(b"mine too")
    (out / "checkpoint_round7.pt").write_bytes(b"a user's copy")  # a round the run never kept (sweep 5, case 102)
    assert main(base_args(cifar_root, out, "--set", "train.rounds=2", "--overwrite")) == 0
    left = {p.name for p in out.iterdir()} - THE_RUNS
    assert left == {"config.json", "provenance.json", "metrics.jsonl", "checkpoint.pt", "summary.json", "curve.png",
                    "NOTES.md", "plots", "checkpoint.pt.tmp", "checkpoint_round7.pt"}  # fmt: skip
    assert (out / "NOTES.md").read_text() == "mine" and (out / "plots" / "clients.png").read_bytes() == b"mine too"
    assert (tmp_path / "elsewhere.pt").read_bytes() == b"not the run's"  # the link went, never what it points to
    assert (out / "checkpoint_round7.pt").read_bytes() == b"a user's copy"
    (out / "checkpoint_round7.pt").unlink()  # remeasure refuses another run's checkpoint: the user moves it out
    assert [line["round"] for line in remeasure.remeasure(out, samples=2, quiet=True)] == [
        2
    ]  # the new run's model, measured


def test_the_names_overwrite_removes_hold_every_picture_and_file_a_method_or_remeasure_writes():
    sources = [*(ROOT / "fl" / "methods").rglob("*.py"), ROOT / "fl" / "loop.py"]  # the run loop draws one too
    pictures = {name for path in sources for name in re.findall(r'Picture\(\s*"([^"]+)"', path.read_text())}
    assert {"hfmds_pool.png", "dynafed_dsyn.png", "synthetic_samples.png"} <= pictures
    for name in [*pictures, Progress.FILE, remeasure.OUT, "checkpoint_round49.pt", "summary.json.0123456789abcdef.tmp"]:
        assert RUN_FILE.fullmatch(name), name
    for name in [
        "NOTES.md",
        "checkpoint_roundx.pt",
        "snapshots",
        "metrics.jsonl.bak",
        "summary.json.tmp",
        OWNER,
        RUN_LOCK,
    ]:
        assert not RUN_FILE.fullmatch(name), name


def test_overwrite_refused_for_missing_data_leaves_the_earlier_run_whole(cifar_root, tmp_path, capsys):
    """Fourth sweep, case 98: the new run's data is found before the earlier run's files go."""
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != RUN_LOCK}
    capsys.readouterr()
    missing = f"data.dataset=npz:{tmp_path / 'typo.npz'}"
    assert main(base_args(cifar_root, out, "--set", missing, "--overwrite")) == 2
    assert "not found" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != RUN_LOCK} == before
