"""Live curves (fl.sinks): --tensorboard writes every round's row as TensorBoard scalars, read back here with
tensorboard's own event reader; a resumed run holds each round once; the numbers equal a run without the sink; a
sweep writes one TensorBoard run per arm and seed; without the package, one line naming the extra."""

from __future__ import annotations

import itertools
import json
import sys

import pytest

from fl.run import main
from fl.sweep import main as sweep_main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at
from tests.fl.test_run import base_args, metrics
from tests.fl.test_sweep import sets


def scalars(folder, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_tensorboard_holds_every_round_and_changes_no_number(cifar_root, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    plain, logged, curves = tmp_path / "plain", tmp_path / "logged", tmp_path / "tb"
    extra = ("--set", "train.estimate_every=2")
    assert main(base_args(cifar_root, plain, *extra)) == 0
    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, logged, *extra, "--tensorboard", str(curves))) == 2
    resume()
    assert main(["--resume", str(logged), "--quiet"]) == 0  # the folder is in its config.json: curves go on
    assert metrics(plain) == metrics(logged)
    written = rows(logged)
    accuracy = scalars(curves, "test_accuracy")
    assert [step for step, _ in accuracy] == [1, 2, 3, 4]  # every round, once
    assert [value for _, value in accuracy] == pytest.approx([r["test_accuracy"] for r in written])
    zeta2 = scalars(curves, "estimates/zeta2")
    assert [step for step, _ in zeta2] == [1, 2, 4]
    assert [v for _, v in zeta2] == pytest.approx([r["estimates"]["zeta2"] for r in written if "estimates" in r])
    assert [s for s, _ in scalars(curves, "test_loss")] == [1, 2, 3, 4]
    cumulative = [0.0] + [r["seconds"] for r in written]
    expected = [after - before for before, after in itertools.pairwise(cumulative)]
    assert [v for _, v in scalars(curves, "seconds_per_round")] == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_tensorboard_given_at_resume_writes_the_earlier_rounds_too(cifar_root, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    out, curves = tmp_path / "run", tmp_path / "tb"
    resume = interrupt_at(monkeypatch, 3)
    assert main(base_args(cifar_root, out)) == 2
    resume()
    assert main(["--resume", str(out), "--quiet", "--tensorboard", str(curves)]) == 0
    assert [step for step, _ in scalars(curves, "test_accuracy")] == [1, 2, 3, 4]


def test_a_sweep_writes_one_tensorboard_run_per_arm_and_seed(cifar_root, tmp_path):
    pytest.importorskip("tensorboard")
    args = [*sets(cifar_root), "--vary", "data.p=0.5", "--seeds", "0,1", "--out", str(tmp_path / "s"), "--quiet"]
    assert sweep_main([*args, "--tensorboard", str(tmp_path / "tb")]) == 0
    assert sweep_main([*args, "--tensorboard", str(tmp_path / "again")]) == 0  # reused runs: their rows, once
    for name in ("base", "data.p=0.5"):
        for seed in (0, 1):
            for root in ("tb", "again"):
                accuracy = scalars(tmp_path / root / name / f"seed{seed}", "test_accuracy")
                expected = [r["test_accuracy"] for r in rows(tmp_path / "s" / name / f"seed{seed}")]
                assert [s for s, _ in accuracy] == [1, 2] and [v for _, v in accuracy] == pytest.approx(expected)


def test_without_tensorboard_the_flag_is_one_line_naming_the_extra(cifar_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard raises ImportError
    out = tmp_path / "run"
    assert_one_line_config_error(base_args(cifar_root, out, "--tensorboard", str(tmp_path / "tb")),
                                 "pip install 'shufflefl[tensorboard]'", capsys)  # fmt: skip
    assert not out.exists() and not (tmp_path / "tb").exists()
