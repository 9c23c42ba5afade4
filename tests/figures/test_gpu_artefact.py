"""The report's gpu-bench block (figures/gpu.py) from a bench record in a ledger, and the ledger check of bench
records (lab.records.check.bench_entries)."""

from __future__ import annotations

import json

import pytest

from figures.artefacts import Build
from figures.gpu import ARTEFACT, graph_gains, records
from figures.gpu import build as build_gpu
from lab.records.check import bench_entries
from theory.errors import InputError


def record(device: str = "NVIDIA H100 80GB HBM3", rate: float = 1e12, seed_iterations: float = 5.0) -> dict:
    fleet = [{"part": "fleet", "arm": "fedavg", "precision": "default", "graphs": graphs, "runs": runs, "steps": 10,
              "replayed": "cuda" if graphs == "on" else None, "seconds": 1.0, "run_rounds_per_s": speed,
              "tflops": 1.0, "share_of_peak": 0.01, "cuda_peak_gib": 1.0, "cuda_reserved_peak_gib": 2.0}
             for graphs, runs, speed in [("on", 1, 20.0), ("off", 1, 10.0), ("on", 4, 30.0),
                                         ("off", 4, 40.0)]]  # fmt: skip
    rows = [{"part": "peak", "precision": "fp32", "n": 8192, "tflops": 50.0}, *fleet,
            {"part": "fleet", "arm": "fedavg", "precision": "bf16", "graphs": "off", "runs": 64, "steps": 10,
             "outcome": "out of memory"},
            {"part": "dynafed", "seeds": 1, "precision": "auto", "path": "fast",
             "seed_iterations_per_s": seed_iterations, "gflop_per_iteration": 2577.0, "tflops": 15.0},
            {"part": "dynafed", "seeds": 3, "precision": "auto", "outcome": "failed: out of memory"},
            {"part": "ddpm", "clients": 1, "batch": 128, "steps_per_s": 50.0, "tflops": 6.0}]  # fmt: skip
    return {"device": device, "rates": {"fl": rate, "dynafed": rate, "ddpm": rate}, "rows": rows}


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


def build(scale, folder):
    """The artefact at ``scale`` into ``folder`` (tmp_path/figs/NAME/SCALE), the run store tmp_path/store."""
    return build_gpu(Build(scale, folder, runs=folder.parents[2] / "store"))


def put(store, name: str, content: dict) -> None:
    folder = store / "bench" / name
    folder.mkdir(parents=True)
    (folder / "gpu.json").write_text(json.dumps(content))


def quality(store, seed: int, noise: float, accuracy: float) -> None:
    """A quality report of seed ``seed``'s DDPM sets at 2,000 steps (the fields the claim reads), and one of its
    20-epoch sets that the claim must not read."""
    (store / "quality").mkdir(exist_ok=True)
    report = {"generator": "ddpm", "dataset": "fmnist", "seed": seed, "min_steps": 2000, "noise_fraction": noise,
              "synthetic_trained_accuracy": accuracy, "real_trained_accuracy": 0.84}  # fmt: skip
    (store / "quality" / f"ddpm-fmnist-seed{seed}-steps2000.json").write_text(json.dumps(report))
    report |= {"min_steps": 0, "noise_fraction": 0.9}
    (store / "quality" / f"ddpm-fmnist-seed{seed}.json").write_text(json.dumps(report))


def folder(tmp_path):
    path = tmp_path / "figs" / "gpu-bench" / "paper"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_goals_are_bounds_judged_from_the_record(store, tmp_path):
    """At 1 TFLOP/s the open tasks take hours and a synthesis of 1000 iterations at 5 seed-iterations/s 200 s:
    both goals exceeded; at 1 EFLOP/s and 20 seed-iterations/s (50 s) both within."""
    put(store, "2026-01-01-h100", record())
    built = build("paper", folder(tmp_path))
    assert built.claim.verdict == "contradicted"
    assert built.numbers["synthesis_seconds"] == pytest.approx(200.0)
    assert built.numbers["target_minutes"] > 12 and "goal ≤ 60 s; contradicted" in built.claim.text
    assert built.numbers["graph_gains"] == {"fedavg x1 (10 steps)": 2.0, "fedavg x4 (10 steps)": 0.75}
    rows = {(r[0], r[1], r[3]): r for r in built.rows}
    assert rows["fleet", "1 x fedavg (10 steps)", "graph"][4:] == ["20 run-rounds/s", 1.0, "1 %", "1.0 / 2.0"]
    assert rows["fleet", "64 x fedavg (10 steps)", "eager"][4] == "out of memory"
    assert rows["dynafed", "3 seed(s): -", "-"][4] == "failed: out of memory"
    assert (folder(tmp_path) / "fleet.png").stat().st_size > 0
    assert "no quality report of DDPM sets at 2,000 steps a client in the ledger" in built.claim.text
    put(store, "2026-02-01-h100", record(rate=1e18, seed_iterations=20.0))  # the newest record is the one read
    built = build("paper", folder(tmp_path))
    assert built.claim.verdict == "not resolved"  # the DDPM goal not measured
    quality(store, 0, 0.03, 0.83)
    built = build("paper", folder(tmp_path))
    assert built.claim.verdict == "held" and built.numbers["target_minutes"] < 0.01
    assert (
        "(seed 0) hold 3.0 % noise images and train a classifier to 83.0 % on real test (goals ≤ 5 % and ≥ 82 %; held; "
        "the same classifier trained on as many real images of the same clients: 84.0 %)" in built.claim.text
    )
    quality(store, 1, 0.02, 0.81)  # one seed's classifier below 82 %
    built = build("paper", folder(tmp_path))
    assert built.claim.verdict == "contradicted" and "(seed 0, 1) hold 3.0 %, 2.0 % noise" in built.claim.text
    assert built.numbers["ddpm_sets"][1] == {"noise_fraction": 0.02, "synthetic_trained_accuracy": 0.81}
    assert built.numbers["records"] == ["bench/2026-02-01-h100/gpu.json"]  # it measured every part again


def test_the_records_of_the_device_and_none_is_one_line(store, tmp_path):
    put(store, "2026-01-01-h100", record())
    put(store, "2026-03-01-h200", record(device="NVIDIA H200"))
    assert [p.parent.name for p in records(store / "bench")[0]] == ["2026-01-01-h100"]
    assert [p.parent.name for p in records(store / "bench", "H200")[0]] == ["2026-03-01-h200"]
    with pytest.raises(InputError, match="no gpu-bench record of an A100"):
        records(store / "bench", "A100")
    assert ARTEFACT.name == "gpu-bench" and "paper" in ARTEFACT.scales


def test_a_bench_of_some_parts_adds_to_the_records_before_it(store, tmp_path):
    """The 2026-11-28 lease benched conv and convnet3 alone: each part's rows (and rate) come from the newest
    record that measured it, the rest from the one before; both records are named."""
    put(store, "2026-01-01-h100", record(seed_iterations=5.0))
    convnet3 = {"part": "convnet3", "arm": "fedavg", "precision": "default", "graphs": "off", "runs": 6,
                "steps": 24, "replayed": None, "seconds": 3.0, "run_rounds_per_s": 2.0, "tflops": 15.0,
                "share_of_peak": 0.04}  # fmt: skip
    peak = {"part": "peak", "precision": "fp32", "n": 8192, "tflops": 51.5}
    partial = {"device": "NVIDIA H100 80GB HBM3", "rates": {"fl": 0.0, "fl:convnet3": 15e12, "dynafed": 0.0,
               "ddpm": 0.0}, "rows": [peak, convnet3]}  # fmt: skip
    put(store, "2026-02-01-h100", partial)
    paths, device, rows = records(store / "bench")
    assert [p.parent.name for p in paths] == ["2026-01-01-h100", "2026-02-01-h100"] and "H100" in device
    assert [r["part"] for r in rows] == ["peak", *["fleet"] * 5, "convnet3", "dynafed", "dynafed", "ddpm"]
    assert rows[0]["tflops"] == 51.5  # the newest peaks
    built = build("paper", folder(tmp_path))
    assert built.numbers["synthesis_seconds"] == pytest.approx(200.0)  # the older record's synthesis
    assert built.numbers["rates"]["fl"] == 1e12 and built.numbers["rates"]["fl:convnet3"] == 15e12
    assert built.numbers["records"] == ["bench/2026-01-01-h100/gpu.json", "bench/2026-02-01-h100/gpu.json"]
    assert "records bench/2026-01-01-h100, bench/2026-02-01-h100" in built.notes[0]
    assert "Rates: FL 1 (ConvNet-3's 15), DynaFed 1, DDPM 1 TFLOP/s." in built.claim.text


def test_a_record_before_the_replayed_field_reads_its_graphs_setting():
    rows = [{"part": "fleet", "arm": "hfmds", "precision": "default", "graphs": graphs, "runs": 16, "steps": 10,
             "seconds": 1.0, "run_rounds_per_s": speed}
            for graphs, speed in [("auto", 21.0), ("off", 20.0)]]  # fmt: skip
    assert graph_gains(rows) == {"hfmds x16 (10 steps)": pytest.approx(1.05)}


@pytest.mark.parametrize(
    "name, content, said",
    [
        ("gpu.json", "{", "not JSON"),
        ("gpu.json", json.dumps({"device": "H100", "rates": {}}), "rows missing"),
        ("gpu.json", json.dumps([1]), "device missing"),
        ("model.pt", "x", "stray file"),
    ],
)
def test_the_ledger_check_catches_a_damaged_bench_record(tmp_path, name, content, said):
    entry = tmp_path / "bench" / "2026-01-01-h100"
    entry.mkdir(parents=True)
    if name != "gpu.json":
        (entry / "gpu.json").write_text(json.dumps(record()))
    (entry / name).write_text(content)
    flagged: list[str] = []
    bench_entries(tmp_path / "bench", lambda path, what: flagged.append(f"{path.name}: {what}"))
    assert len(flagged) == 1 and said in flagged[0] and flagged[0].startswith(name)


def test_the_ledger_check_wants_a_folder_with_its_gpu_json(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "loose.json").write_text("{}")
    (tmp_path / "bench" / "2026-01-01-h100").mkdir()
    flagged: list[str] = []
    bench_entries(tmp_path / "bench", lambda path, what: flagged.append(f"{path.name}: {what}"))
    assert flagged == ["gpu.json: missing: a gpu-bench record holds its gpu.json",
                       "loose.json: stray file (bench/ holds a folder per gpu-bench)"]  # fmt: skip
    bench_entries(tmp_path / "nothing", lambda path, what: flagged.append(what))  # no bench/: nothing to check
    assert len(flagged) == 2
