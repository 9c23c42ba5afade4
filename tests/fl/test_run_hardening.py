"""python -m fl.run against what a careless or hostile user does to a run folder: resume checks the metrics rows
against the checkpoint (a torn last line is dropped, anything else refused), an edited config.json is refused,
corrupt JSON files are one-line errors, ``--out`` never writes over a folder fl.run did not make, non-finite numbers
and bad seeds are refused, a named data root must exist, provenance records the data and device, and a run's
numbers do not depend on ``train.workers`` or the thread count."""

from __future__ import annotations

import json
import os

import pytest
import torch

from fl.run import main
from tests.fl.conftest import interrupt_at
from tests.fl.test_run import base_args, metrics, same_run


def one_line_error(capsys, *fragments: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.fixture
def finished(cifar_root, tmp_path):
    out = tmp_path / "run"
    assert main(base_args(cifar_root, out)) == 0
    return out


@pytest.fixture
def stopped(cifar_root, tmp_path, monkeypatch):
    """A run stopped (Ctrl-C) before round 3: rows 1-2 and a checkpoint after round 2."""
    out = tmp_path / "stopped"
    undo = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, out)) == 2
    undo()
    return out


def test_emptied_metrics_of_a_finished_run_are_refused_and_its_summary_kept(finished, capsys):
    summary = (finished / "summary.json").read_text()
    (finished / "metrics.jsonl").write_text("")
    capsys.readouterr()
    assert main(["--resume", str(finished), "--quiet"]) == 2
    one_line_error(capsys, "no rows where its checkpoint needs rounds 1-4")
    assert (finished / "summary.json").read_text() == summary


def test_missing_rows_of_an_unfinished_run_are_refused(stopped, capsys):
    rows = (stopped / "metrics.jsonl").read_text().splitlines()
    (stopped / "metrics.jsonl").write_text(rows[1] + "\n")  # round 2 only
    capsys.readouterr()
    assert main(["--resume", str(stopped), "--quiet"]) == 2
    one_line_error(capsys, "holds rounds 2-2 (1 rows) where its checkpoint needs rounds 1-2")


def test_a_torn_last_line_is_dropped_with_a_warning_and_the_run_repeats_the_straight_one(
    cifar_root, stopped, finished, capsys
):
    with (stopped / "metrics.jsonl").open("a") as log:
        log.write('{"round": 3, "comm')
    capsys.readouterr()
    assert main(["--resume", str(stopped), "--quiet"]) == 0
    assert "dropped its torn last line" in capsys.readouterr().err
    same_run(finished, stopped)


def test_a_damaged_line_inside_the_metrics_is_refused(stopped, capsys):
    rows = (stopped / "metrics.jsonl").read_text().splitlines()
    (stopped / "metrics.jsonl").write_text("\n".join(["{oops", rows[1]]) + "\n")
    capsys.readouterr()
    assert main(["--resume", str(stopped), "--quiet"]) == 2
    one_line_error(capsys, "line 1 is not JSON")


@pytest.mark.parametrize(
    ("key", "value"),
    [("algorithm", {"name": "fedprox", "mu": 0.1}), ("algorithm", {"name": "scaffold"}), ("train", "lr")],
)
def test_an_edited_config_is_refused_against_the_checkpoint(stopped, capsys, key, value):
    tree = json.loads((stopped / "config.json").read_text())
    if value == "lr":
        tree["train"]["lr"] = [0.5]
    else:
        tree[key] = value
    (stopped / "config.json").write_text(json.dumps(tree))
    before = (stopped / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(["--resume", str(stopped), "--quiet"]) == 2
    one_line_error(capsys, "differs from the config its checkpoint was trained with")
    assert (stopped / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("text", ["{not json", "[1]", "", '"a string"'])
def test_corrupt_json_files_are_one_line_errors(stopped, finished, capsys, text):
    (stopped / "config.json").write_text(text)
    capsys.readouterr()
    assert main(["--resume", str(stopped), "--quiet"]) == 2
    one_line_error(capsys, "config.json")
    (finished / "summary.json").write_text(text)
    assert main(["--compare", str(finished), str(finished)]) == 2
    one_line_error(capsys, "summary.json")


def test_out_on_a_folder_fl_run_did_not_make_is_refused(cifar_root, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.json").write_text('{"mine": 1}')
    assert main(base_args(cifar_root, mine)) == 2
    one_line_error(capsys, "not made by fl.run", "summary.json", "another --out")
    assert main(base_args(cifar_root, mine, "--overwrite")) == 2  # a run would replace the user's summary.json
    one_line_error(capsys, "not made by fl.run", "(--overwrite too)")
    assert (mine / "summary.json").read_text() == '{"mine": 1}'
    (mine / "summary.json").rename(mine / "notes.json")  # nothing a run writes: --overwrite makes it fl.run's
    assert main(base_args(cifar_root, mine)) == 2
    assert "--overwrite" not in one_line_error(capsys, "not made by fl.run", "notes.json", "another --out")
    assert main(base_args(cifar_root, mine, "--overwrite")) == 0
    assert (mine / "notes.json").read_text() == '{"mine": 1}'


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.lr=inf", "train.lr: must be a finite number"),
        ("train.lr=nan", "train.lr: must be a finite number"),
        ("algorithm.mu=-inf", "algorithm.mu: must be a finite number"),
        ("train.seed=-1", "train.seed: must be a whole number from 0"),
        ("train.seed=4294967296", "train.seed: must be a whole number from 0"),
    ],
)
def test_non_finite_numbers_and_bad_seeds_are_refused(cifar_root, tmp_path, capsys, override, fragment):
    assert main(base_args(cifar_root, tmp_path / "r", "--set", override)) == 2
    one_line_error(capsys, fragment)
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_a_named_data_root_that_does_not_exist_is_an_error(cifar_root, tmp_path, capsys):
    args = base_args(cifar_root, tmp_path / "r", "--set", f"data.data_root='{tmp_path / 'no' / 'such'}'")
    assert main(args) == 2
    one_line_error(capsys, "does not exist")


def test_provenance_records_the_data_and_the_device(finished, cifar_root):
    entry = json.loads((finished / "provenance.json").read_text())
    assert entry["device"] == "cpu" and entry["trainer_threads"] == 1 and entry["cpu_count"] == os.cpu_count()
    assert entry["graphs"] == "auto"  # train.graphs
    assert entry["data"]["dataset"] == "cifar10" and entry["data"]["folder"].startswith(str(cifar_root))
    assert entry["data"]["train"] > 0 and entry["data"]["test"] > 0


def test_numbers_do_not_depend_on_workers_under_the_default_threads(fmnist_float32_args, tmp_path):
    """workers = 1 (training in this process) and 2 (two one-thread worker processes), with this process at the
    machine's default thread count: the same numbers, bit for bit."""
    torch.set_num_threads(os.cpu_count() or 1)  # undo the tests' one-thread default: a user's process
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*fmnist_float32_args, "--out", str(one), "--workers", "1"]) == 0
    assert main([*fmnist_float32_args, "--out", str(two), "--workers", "2"]) == 0
    rows = [[{k: v for k, v in r.items() if k != "backend"} for r in metrics(f)] for f in (one, two)]
    assert rows[0] == rows[1] and rows[0][-1]["test_accuracy"] > 0.3  # it trains: threads would show


@pytest.fixture
def fmnist_float32_args():
    from fl.data.datasets import locate

    try:
        locate("fmnist")
    except Exception:
        pytest.skip("no Fashion-MNIST copy (scripts/test-data.sh installs it)")
    return [
        "--config", "configs/fmnist_quick.toml", "--set", "train.rounds=3", "--set", "data.subsample=6000",
        "--set", "data.test_subsample=500", "--set", "data.clients=4", "--set", "train.device='cpu'", "--quiet",
    ]  # fmt: skip


class Crafted:
    """A pickle that would run a command on load (it touches ``marker``): what a weights-only load must refuse."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("content", ["crafted", "garbage", "foreign"])
def test_a_crafted_or_foreign_checkpoint_is_one_line_without_torchs_advice(stopped, cifar_root, tmp_path, capsys,
                                                                           content):  # fmt: skip
    """--resume, --init-from and fl.remeasure on a checkpoint that does not load safely (a pickle that would run
    code, bytes that are no checkpoint, a torch file of something else): one line naming the file, nothing run,
    never torch's advice to load it with weights_only=False (fl.torchfiles.load_safely)."""
    from fl.remeasure import main as remeasure

    checkpoint, marker = stopped / "checkpoint.pt", tmp_path / "ran"
    if content == "crafted":
        torch.save({"round": 3, "x": Crafted(marker)}, checkpoint)
    elif content == "garbage":
        checkpoint.write_bytes(b"not a checkpoint at all")
    else:
        torch.save({"weights": torch.zeros(2)}, checkpoint)
    for command in (
        lambda: main(["--resume", str(stopped), "--quiet"]),
        lambda: main(base_args(cifar_root, tmp_path / "from", "--init-from", str(checkpoint))),
        lambda: remeasure([str(stopped), "--quiet"]),
    ):
        assert command() == 2
        err = one_line_error(capsys, str(checkpoint))
        assert "weights_only" not in err and "torch.load" not in err
    assert not marker.exists()
    assert not (tmp_path / "from").exists()  # --init-from is checked before its run folder is made


def test_a_bad_graphs_setting_is_refused_in_one_line_before_any_round(cifar_root, tmp_path, capsys, monkeypatch):
    assert main(base_args(cifar_root, tmp_path / "r", "--set", "train.graphs='yes'")) == 2
    one_line_error(capsys, "config train.graphs: 'yes': expected one of auto, on, off")
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
    monkeypatch.setenv("SHUFFLEFL_GRAPHS", "on")  # the variable that chose it before: refused, naming the key
    assert main(base_args(cifar_root, tmp_path / "r")) == 2
    one_line_error(capsys, "set train.graphs in the config")
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
