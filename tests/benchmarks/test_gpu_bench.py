"""``bash scripts/gpu-bench.sh --dry`` (every part at tiny sizes on the CPU) and ``gpu-campaign.sh plan`` (the
lease's predicted minutes, on any machine), with the bench's rates in place of the planned ones."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # every part tiny, its graphs traced on the CPU: 26 s on 2 cores
def test_the_dry_bench_measures_every_part_and_the_plan_reads_its_rates(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run(["bash", "scripts/gpu-bench.sh", "--dry", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["dry"] and set(result["rates"]) == {"fl", "fl:convnet3", "dynafed", "ddpm"}
    assert all(rate > 0 for rate in result["rates"].values())
    parts = {row["part"] for row in result["rows"]}
    assert parts == {"peak", "fleet", "conv", "convnet3", "dynafed", "ddpm"}
    convnet3 = [(row["runs"], row["graphs"], row["batch"], row.get("conv", "grouped"))
                for row in result["rows"] if row["part"] == "convnet3"]  # fmt: skip
    # DynaFed's FL rounds, tiny, as the campaign runs them; then the fleet the other ways
    eager = [
        (1, "off", 4, "grouped"),
        (2, "off", 4, "grouped"),
        (2, "off", 4, "matmul"),
        (2, "off", 4, "cudnn-benchmark"),
    ]
    assert convnet3 == [(1, "on", 4, "grouped"), (2, "on", 4, "grouped"), *eager]
    convs = [(row["conv"], row["runs"], row["graphs"]) for row in result["rows"] if row["part"] == "conv"]
    assert convs == [("matmul", 2, "off"), ("cudnn-benchmark", 2, "off")]  # the fleet sizes past one run
    fleets = [row for row in result["rows"] if row["part"] == "fleet" and "runs" in row]
    # each arm and size with its steps replayed as a graph (on the CPU the traced stand-in) and eagerly
    # and a longer round (4 steps here, 100 on the device) both ways: a capture's cost spread over more steps
    short = [(arm, graphs, runs, 3) for graphs in ("on", "off") for runs in (1, 2) for arm in ("fedavg", "hfmds")]
    assert [(row["arm"], row["graphs"], row["runs"], row["steps"]) for row in fleets] == [
        *(row for row in short if row[0] == "fedavg"),
        ("fedavg", "on", 1, 4),
        ("fedavg", "off", 1, 4),
        *(row for row in short if row[0] == "hfmds"),
    ]
    assert all(0 < row["share_of_peak"] for row in fleets)
    dynafed = [(row["seeds"], row["path"]) for row in result["rows"] if row["part"] == "dynafed"]
    assert dynafed == [(1, "fast+instance_norm"), (3, "fast+instance_norm"), (3, "batched (3 runs)")]
    # on the CPU every row is in the default precision, whose rows give the plan's rates
    assert {row["precision"] for row in fleets} == {"default"}
    assert {row["precision"] for row in result["rows"] if row["part"] == "dynafed"} == {"auto"}
    assert [row["saved_gib"] > 0 for row in result["rows"] if row["part"] == "dynafed" and "saved_gib" in row] == [
        True,
        True,
    ]
    assert [row["clients"] for row in result["rows"] if row["part"] == "ddpm"] == [1, 2]
    plan = subprocess.run(["bash", "scripts/gpu-campaign.sh", "plan", "hfmds", "--rates", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "total (one H100, minutes)" in plan.stdout and f"from {out}" in plan.stdout


def test_the_whole_plan_sums_the_issue_target_apart():
    """The plan of every open task prints #49's target (DDPM sets, HFMDs, DynaFed seeds and seed 0's controls)
    beside the total: no more than the total, each row's minutes summed."""
    plan = subprocess.run(["bash", "scripts/gpu-campaign.sh", "plan"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    total = next(line for line in lines if line.startswith("total (one H100"))
    target = next(line for line in lines if line.startswith("#49 target"))
    numbers = [float(x) for x in total.split()[-2:]], [float(x) for x in target.split("  (goal")[0].split()[-2:]]
    assert all(0 < t <= a for t, a in zip(numbers[1], numbers[0]))
    # the target is the rows' sum without N = 3000's two tasks and the benchmark (summed here from the rows)
    rows = lines[lines.index(next(line for line in lines if line.startswith("task "))) + 1 : lines.index(total)]
    kept = [row.split()[2:4] for row in rows if not any(k in row.split()[0] for k in ("n3000", "from23", "bench"))]
    assert len(kept) < len(rows)
    sums = [sum(float(row[k]) for row in kept) for k in (0, 1)]
    assert abs(sums[0] - numbers[1][0]) <= 0.05 + 0.005 * len(kept)
    assert abs(sums[1] - numbers[1][1]) <= 0.05 + 0.05 * len(kept)
    if numbers[1][0] > 12:  # over the goal: the factor on every planned rate that meets it
        needed = next(line for line in lines if "the goal needs" in line)
        assert float(needed.split("needs ")[1].split("x")[0]) == pytest.approx(numbers[1][0] / 12, abs=0.01)


def test_the_plan_refuses_a_file_that_is_no_rates_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    done = subprocess.run(["bash", "scripts/gpu-campaign.sh", "plan", "--rates", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "not a rates file" in done.stderr and done.stderr.count("\n") == 1


def test_the_rates_come_from_the_rows_run_as_auto_runs_them():
    """The plan's fl rate is that of the work as fl.run and fleets do it: on CUDA one run's steps replayed, a
    fleet's eagerly (fl/graphs.py); on the CPU eagerly. The H100's rows of 2026-11-27 (ledger) give 2.74 TFLOP/s:
    16 runs eagerly at 100 steps a round."""
    from tests.benchmarks.test_bench_bad_inputs import load_bench

    bench = load_bench("gpu_bench")
    rows = [{"part": "fleet", "precision": "default", "graphs": graphs, "runs": runs, "tflops": tflops}
            for graphs, runs, tflops in [("on", 1, 1.0), ("off", 1, 0.5), ("on", 4, 9.0), ("off", 4, 3.0)]]  # fmt: skip
    rows += [{"part": "fleet", "precision": "bf16", "graphs": "off", "runs": 4, "tflops": 99.0}]
    rows += [{"part": "dynafed", "precision": "auto", "tflops": 15.0}, {"part": "ddpm", "tflops": 6.0}]
    rows += [{"part": "convnet3", "precision": "default", "graphs": "off", "runs": 6, "conv": "matmul", "tflops": 40.0}]
    assert bench.rates_of(rows, cuda=True) == {"fl": 3.0e12, "fl:convnet3": 0.0, "dynafed": 15.0e12, "ddpm": 6.0e12}
    assert bench.rates_of(rows[1:2], cuda=True)["fl"] == 0.0  # one run eagerly is not how CUDA runs it
    assert bench.rates_of(rows, cuda=False)["fl"] == 3.0e12
    lease = json.loads((ROOT / "results" / "ledger" / "bench" / "2026-11-27-h100" / "gpu.json").read_text())
    assert bench.rates_of(lease["rows"], cuda=True)["fl"] == pytest.approx(2.744e12, rel=1e-3)


def test_a_model_s_own_fl_rate_prices_the_fl_rounds_of_its_runs(tmp_path):
    """With ``fl:convnet3`` in the rates, DynaFed's arms (ConvNet-3) train at that rate and its synthesis at
    DynaFed's; a run of another model keeps the fleet's ``fl`` rate; a zero rate (not measured) is ignored."""
    from lab.campaign.predict import predict, rates_from
    from lab.campaign.tasks import plan

    tasks = {t.name: t for t in plan(tmp_path / "store")}
    arm, other = tasks["dynafed_fmnist_a001_fedavg_from19"], tasks["hfmds_fmnist_dir001_seed0_fedavg"]
    base = {"fl": 1e12, "dynafed": 1e13, "ddpm": 1e12}
    faster = base | {"fl:convnet3": 4e12}
    assert predict(arm, faster)[1] == pytest.approx(predict(arm, base)[1] / 4)
    assert predict(other, faster)[1] == predict(other, base)[1]
    given = tmp_path / "rates.json"
    given.write_text(json.dumps({"rates": {"fl": 2e12, "fl:convnet3": 0.0, "fl:mlp": 5e12, "other": 1.0}}))
    rates = rates_from(given, tmp_path / "no-bench-records")  # the given file over the assumed rates alone
    assert rates["fl"] == 2e12 and rates["fl:mlp"] == 5e12 and "fl:convnet3" not in rates and "other" not in rates


def test_a_bench_of_some_parts_overlays_the_ledger_s_records(tmp_path):
    """A rates file from a bench of some parts (the others 0) replaces only what it measured: the other kinds keep
    the ledger's records' rates (each kind its newest measurement), and each says where it comes from."""
    from lab.campaign.predict import rates_with_sources

    ledger = rates_with_sources(None)[0]
    partial = tmp_path / "gpu.json"
    partial.write_text(json.dumps({"rates": {"fl": 0.0, "fl:convnet3": 7e12, "dynafed": 0.0, "ddpm": 9e12}}))
    rates, sources = rates_with_sources(partial)
    assert rates["fl"] == ledger["fl"] and rates["dynafed"] == ledger["dynafed"]
    assert rates["fl:convnet3"] == 7e12 and rates["ddpm"] == 9e12
    assert sources["ddpm"] == f"from {partial}" and sources["fl"].startswith("from results/ledger/bench/")


def test_every_record_of_the_ledger_adds_its_measured_kinds_oldest_first(tmp_path):
    """Two records, the newer of some parts only: each kind its newest positive rate; another device's not read."""
    from lab.campaign.predict import bench_records, rates_with_sources

    def put(name: str, device: str, rates: dict) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "gpu.json").write_text(json.dumps({"device": device, "rates": rates, "rows": []}))

    put("2026-01-01-h100", "NVIDIA H100 80GB HBM3", {"fl": 1e12, "dynafed": 2e12, "ddpm": 3e12})
    put("2026-02-01-h100", "NVIDIA H100 80GB HBM3", {"fl": 0.0, "fl:convnet3": 4e12, "dynafed": 5e12, "ddpm": 0.0})
    put("2026-03-01-h200", "NVIDIA H200", {"fl": 9e12, "dynafed": 9e12, "ddpm": 9e12})
    assert [p.parent.name for p in bench_records(tmp_path, "H100")] == ["2026-01-01-h100", "2026-02-01-h100"]
    rates, sources = rates_with_sources(None, tmp_path)
    assert (rates["fl"], rates["fl:convnet3"], rates["dynafed"], rates["ddpm"]) == (1e12, 4e12, 5e12, 3e12)
    assert sources["fl"].endswith("01-01-h100/gpu.json") and sources["dynafed"].endswith("02-01-h100/gpu.json")
