"""A fleet (fl/fleet.py, ``fl.sweep --fleet``): many runs in one process, their clients trained together (batched
runs in one vmapped computation, the others side by side), each run's numbers those of ``fl.run`` of its config
alone, bit for bit in float64 on the CPU; interrupted, it resumes to the same numbers; methods with a per-client
objective (FedCOG, HFMDs) and DynaFed's server work equal their runs alone."""

from __future__ import annotations

import json

import pytest
import torch

import fl.batched as batched_module
import fl.fleet as fleet_module
from fl.config import load_config
from fl.fleet import Rendezvous, run_fleet
from fl.graphs import graph_kind
from fl.loop import execute
from fl.sweep import main as sweep_main
from fl.sweep import prepare_run
from tests.fl.conftest import assert_close_tree
from tests.fl.methods.test_dynafed import dynafed_args
from tests.fl.methods.test_fedcog import fedcog_args
from tests.fl.methods.test_hfmds import hfmds_args
from theory.errors import InputError


def tiny(root, seed, algorithm="fedavg", *extra):
    sets = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='dirichlet'", "data.alpha=0.5",
        "data.clients=4", "model.name='mlp'", "train.rounds=4", "train.batch_size=16", "train.device='cpu'",
        "train.dtype='float64'", "train.checkpoint_every=1", "train.participation=0.75", f"train.seed={seed}",
        "train.workers=1", f"algorithm.name='{algorithm}'", *extra,
    ]  # fmt: skip
    return load_config(None, sets)


def from_args(args: list[str], seed: int):
    """The config of a methods test's ``fl.run`` arguments (its --set pairs), in float64 with this seed."""
    sets = [args[k + 1] for k, a in enumerate(args) if a == "--set"]
    return load_config(None, [*sets, "train.dtype='float64'", f"train.seed={seed}", "train.workers=1"])


def alone(config, out):
    prepare_run(config, out)
    execute(config, out, quiet=True)
    return out


def fleet(runs):
    for config, out in runs:
        prepare_run(config, out)
    return run_fleet([(config, out, False) for config, out in runs])


def numbers(out):
    """Every number a run's rows hold but its timings and the fleet's own note, and its final server model."""
    rows = [untimed(json.loads(line)) for line in (out / "metrics.jsonl").read_text().splitlines()]
    x = torch.load(out / "checkpoint.pt", weights_only=False)["x"]
    return rows, x


def untimed(tree):
    """A row without its timings (any key starting "seconds", at any depth) and the fleet's size."""
    if isinstance(tree, dict):
        return {k: untimed(v) for k, v in tree.items() if not k.startswith("seconds") and k != "fleet"}
    return [untimed(v) for v in tree] if isinstance(tree, list) else tree


def use_graphs(monkeypatch, setting: str) -> None:
    """The batched steps of the calls that follow replayed under the ``train.graphs`` value ``setting``, whatever
    setting the caller hands :func:`fl.graphs.graph_kind` (so the same configs run graphed in the fleet and eager
    alone)."""

    def kind(device, runs=1, _="auto"):
        return graph_kind(device, runs, setting)

    monkeypatch.setattr(batched_module, "graph_kind", kind)


def graphs_on(monkeypatch, on: bool) -> list:
    """train.graphs on or off; the list of recorded replays (their kinds) that the calls append to."""
    use_graphs(monkeypatch, "on" if on else "off")
    replays, real = [], batched_module.replay

    def counting(advance, state, start, stop, kind):
        replays.append(kind)
        return real(advance, state, start, stop, kind)

    monkeypatch.setattr(batched_module, "replay", counting)
    return replays


def assert_same(a, b):
    rows_a, x_a = numbers(a)
    rows_b, x_b = numbers(b)
    assert rows_a == rows_b
    assert torch.equal(x_a, x_b)


@pytest.mark.parametrize("backend", ["batched", "sequential", "batched-graphed"])
def test_a_fleet_of_two_seeds_and_two_algorithms_equals_the_runs_alone(cifar_root, tmp_path, backend, monkeypatch):
    """Batched: the four runs' clients in one vmapped computation a step; sequential (the CPU's default): each
    run's clients one after another, the runs side by side on the cores. The four runs hold one copy of the data.
    batched-graphed: the fleet's steps after the first of a round recorded once and replayed (fl/graphs.py; on the
    CPU a traced graph), the runs alone eager."""
    graphed = backend.endswith("-graphed")
    backend = backend.removesuffix("-graphed")
    configs = {
        (s, a): tiny(cifar_root, s, a, f"train.backend='{backend}'") for s in (0, 1) for a in ("fedavg", "scaffold")
    }
    made = []

    class Recorded(fleet_module.SharedTensors):
        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(fleet_module, "SharedTensors", Recorded)
    replays = graphs_on(monkeypatch, graphed)
    fleet([(c, tmp_path / f"fleet_{s}_{a}") for (s, a), c in configs.items()])
    use_graphs(monkeypatch, "off")
    assert (len(replays) == 4) if graphed else not replays  # one recording a round, the four runs' clients in it
    (shared,) = made
    assert len(shared._kept) == 4 and shared.saved > 0  # x, y, test x, test y: once for the four runs
    assert shared.saved == 3 * sum(t.numel() * t.element_size() for t in shared._kept)  # the 3 later runs' copies
    for (s, a), config in configs.items():
        assert_same(tmp_path / f"fleet_{s}_{a}", alone(config, tmp_path / f"alone_{s}_{a}"))
        rows = [json.loads(line) for line in (tmp_path / f"fleet_{s}_{a}" / "metrics.jsonl").read_text().splitlines()]
        assert all(row["backend"] == backend and row["fleet"] == (4 if backend == "batched" else True) for row in rows)
        assert (tmp_path / f"fleet_{s}_{a}" / "summary.json").is_file()


def test_a_fleet_stopped_midway_resumes_to_the_same_numbers(cifar_root, tmp_path, monkeypatch):
    configs = [tiny(cifar_root, 0, "fedavg"), tiny(cifar_root, 1, "fedprox", "algorithm.mu=0.1")]
    outs = [tmp_path / "run0", tmp_path / "run1"]
    real, calls = fleet_module.Rendezvous._compute, []

    def stopping(self, requests):  # the third computation is cut by Ctrl-C
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, requests)

    monkeypatch.setattr(fleet_module.Rendezvous, "_compute", stopping)
    with pytest.raises(InputError, match="run the same command again"):
        fleet(list(zip(configs, outs)))
    assert all(not (out / "summary.json").exists() for out in outs)
    monkeypatch.setattr(fleet_module.Rendezvous, "_compute", real)
    run_fleet([(config, out, True) for config, out in zip(configs, outs)])
    for k, (config, out) in enumerate(zip(configs, outs)):
        assert_same(out, alone(config, tmp_path / f"alone{k}"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", ["fedcog", "hfmds", "dynafed", "hfmds-batched", "hfmds-batched-graphed", "dynafed-batched-graphed"]
)
def test_a_fleet_with_a_method_equals_its_runs_alone(cifar_root, tmp_path, method, monkeypatch):
    """hfmds-batched: HFMDs' mixed batches and prototypes (fl.methods.base.BatchedTask) in the shared vmapped call;
    graphed: the steps after a round's first recorded and replayed (fl/graphs.py), the runs alone eager (DynaFed:
    its FL rounds batched and graphed)."""
    graphed = method.endswith("-graphed")
    replays = graphs_on(monkeypatch, graphed)
    method = method.removesuffix("-graphed")
    make = {"fedcog": fedcog_args, "hfmds": hfmds_args, "dynafed": dynafed_args, "hfmds-batched": hfmds_args,
            "dynafed-batched": dynafed_args}[method]  # fmt: skip
    backend = ["--set", "train.backend='batched'"] if method.endswith("batched") else []
    configs = [from_args([*make(cifar_root, tmp_path, "fedavg"), *backend], seed) for seed in (0, 1)]
    fleet([(c, tmp_path / f"fleet{k}") for k, c in enumerate(configs)])
    use_graphs(monkeypatch, "off")
    for k, config in enumerate(configs):
        assert_same(tmp_path / f"fleet{k}", alone(config, tmp_path / f"alone{k}"))
    assert bool(replays) == graphed
    if backend:
        rows = [json.loads(line) for line in (tmp_path / "fleet0" / "metrics.jsonl").read_text().splitlines()]
        assert {row["fleet"] for row in rows} == {2}
        assert "pool_share" in rows[-1]["method"] if method.startswith("hfmds") else rows[-1]["backend"] == "batched"


def test_a_model_with_dropout_is_refused_in_one_line(cifar_root, tmp_path):
    config = tiny(cifar_root, 0, "fedavg", "model.name='vgg11'", "train.rounds=1", "train.dtype='float32'")
    with pytest.raises(InputError, match="dropout"):
        fleet([(config, tmp_path / "vgg")])


def test_rendezvous_packs_whole_groups_up_to_the_row_limit():
    class Group:
        def __init__(self, m):
            self.indices = [0] * m

    class Flat:
        def __init__(self, n_params, cuda=False):
            self.n_params, self.params = n_params, torch.empty(0, device="meta") if cuda else torch.empty(0)

    small = {k: (Flat(10), Group(m)) for k, m in enumerate([3, 2, 4, 1])}
    assert Rendezvous(4, rows=5)._calls([0, 1, 2, 3], small) == [[0, 1], [2, 3]]
    assert Rendezvous(4)._calls([0, 1, 2, 3], small) == [[0, 1, 2, 3]]
    big = {k: (Flat(fleet_module.CPU_NUMBERS // 4), Group(m)) for k, m in enumerate([3, 2, 4, 1])}
    assert Rendezvous(4)._calls([0, 1, 2, 3], big) == [[0], [1], [2], [3]]  # at most 4 rows of these on the CPU


def test_sweep_fleet_writes_the_table_and_refuses_jobs(cifar_root, tmp_path, capsys):
    sets = [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{cifar_root}'", "--set", "data.clients=2",
        "--set", "model.name='mlp'", "--set", "train.rounds=2", "--set", "train.batch_size=32",
        "--set", "train.device='cpu'",
    ]  # fmt: skip
    out = tmp_path / "sweep"
    vary = ["--vary", "algorithm.name=scaffold", "--seeds", "0,1", "--fleet", "--quiet"]
    assert sweep_main([*sets, *vary, "--out", str(out)]) == 0
    assert "fleet: 4 runs" in capsys.readouterr().out
    assert (out / "table.csv").is_file()
    config = json.loads((out / "algorithm.name=scaffold" / "seed1" / "config.json").read_text())
    assert config["train"]["backend"] == "auto"  # the runs' configs as given: a fleet changes no number
    assert sweep_main([*sets, "--fleet", "--jobs", "2", "--out", str(tmp_path / "other")]) == 2
    assert "drop --jobs" in capsys.readouterr().err


def test_python_m_fl_fleet_starts_continues_and_leaves_finished_runs(cifar_root, tmp_path, capsys):
    """A spec of fl.run argument lists: a finished run is left as it is, the others start (one from another run's
    kept checkpoint, --init-from) and equal the same fl.run runs alone; a bad entry is one line naming it."""
    from fl.fleet import main as fleet_main
    from fl.run import main as run_main

    sets = [arg for s in ("data.dataset='cifar10'", f"data.data_root='{cifar_root}'", "data.clients=2",
                          "model.name='mlp'", "train.rounds=3", "train.batch_size=32", "train.device='cpu'",
                          "train.workers=1", "train.keep_round=1") for arg in ("--set", s)]  # fmt: skip
    assert run_main([*sets, "--out", str(tmp_path / "done"), "--quiet"]) == 0
    kept = tmp_path / "done" / "checkpoint_round1.pt"
    spec = [
        [*sets, "--out", str(tmp_path / "done")],
        [*sets, "--set", "algorithm.name='scaffold'", "--out", str(tmp_path / "a")],
        [*sets, "--set", "train.lr=0.01", "--init-from", str(kept), "--out", str(tmp_path / "b")],
    ]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    before = (tmp_path / "done" / "metrics.jsonl").read_text()
    assert fleet_main([str(tmp_path / "spec.json")]) == 0
    assert (tmp_path / "done" / "metrics.jsonl").read_text() == before
    for name, entry in (("a", spec[1]), ("b", spec[2])):
        alone = [*entry[:-1], str(tmp_path / f"{name}_alone"), "--quiet"]
        assert run_main(alone) == 0
        assert_same(tmp_path / name, tmp_path / f"{name}_alone")
    (tmp_path / "bad.json").write_text(json.dumps([["--rounds", "3"]]))
    capsys.readouterr()
    assert fleet_main([str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "entry 1" in err


def synthesis_args(root, tmp_path, seed, *extra):
    """DynaFed with DSA, a learned α and learned labels: 6 matching iterations, progress saved every 2."""
    args = dynafed_args(
        root, tmp_path, "fedavg", "--set", "method.iterations=6", "--set", "method.save_every=2", *extra
    )
    return from_args(args, seed)


@pytest.mark.slow
def test_three_seeds_syntheses_batched_equal_three_single_ones(cifar_root, tmp_path, monkeypatch):
    """method.matching = "batched" in a fleet: the three seeds' syntheses are one vmapped computation; every row,
    D_syn and α equal the runs alone on the reference path to float64 rounding."""
    path = {m: ("--set", f"method.matching='{m}'") for m in ("reference", "batched")}
    singles = [alone(synthesis_args(cifar_root, tmp_path, seed, *path["reference"]), tmp_path / f"alone{k}")
               for k, seed in enumerate((0, 1, 2))]  # fmt: skip
    configs = [synthesis_args(cifar_root, tmp_path, seed, *path["batched"]) for seed in (0, 1, 2)]
    fleet([(config, tmp_path / f"fleet{k}") for k, config in enumerate(configs)])
    for k, single in enumerate(singles):
        rows = {name: numbers(out)[0] for name, out in (("fleet", tmp_path / f"fleet{k}"), ("alone", single))}
        synthesis = rows["fleet"][2]["method"]["synthesis"]
        assert synthesis.pop("path") == "batched (3 runs)" and rows["alone"][2]["method"]["synthesis"].pop("path")
        assert_close_tree(rows["fleet"], rows["alone"])
        a, b = (torch.load(out / "checkpoint.pt", weights_only=True) for out in (tmp_path / f"fleet{k}", single))
        for key in ("x_syn", "y_syn", "alpha"):
            torch.testing.assert_close(a["method"]["server"][key], b["method"]["server"][key], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(a["x"], b["x"], rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_a_batched_synthesis_stopped_at_an_iteration_resumes_bit_for_bit(cifar_root, tmp_path, monkeypatch):
    """Cut at its 5th matching iteration (saved every 2), the fleet resumes both seeds' syntheses from iteration 4
    and ends bit for bit as the fleet that was not stopped."""
    import fl.methods.dynafed as dynafed

    configs = [synthesis_args(cifar_root, tmp_path, seed, "--set", "method.matching='batched'") for seed in (0, 1)]
    straight = [tmp_path / f"straight{k}" for k in range(2)]
    fleet(list(zip(configs, straight)))
    real, calls = dynafed.unroll_many, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dynafed, "unroll_many", stopping)
    broken = [tmp_path / f"broken{k}" for k in range(2)]
    with pytest.raises(InputError, match="run the same command again"):
        fleet(list(zip(configs, broken)))
    assert [torch.load(out / dynafed.Progress.FILE, weights_only=True)["iteration"] for out in broken] == [4, 4]
    monkeypatch.setattr(dynafed, "unroll_many", real)
    run_fleet([(config, out, True) for config, out in zip(configs, broken)])
    for a, b in zip(straight, broken):
        assert_same(a, b)
        x_a, x_b = (torch.load(out / "checkpoint.pt", weights_only=True)["method"]["server"]["x_syn"] for out in (a, b))
        assert torch.equal(x_a, x_b)


def test_on_cuda_a_fleets_jobs_run_one_after_another(cifar_root, monkeypatch):
    """A CUDA graph's capture (fl/graphs.py, DynaFed's matching) must not meet another thread's CUDA work: a fleet
    with a run on CUDA computes its jobs one at a time; on the CPU side by side on the cores (or as asked)."""
    cpu = tiny(cifar_root, 0)
    assert fleet_module.side_by_side([cpu], 3) == 3
    assert fleet_module.side_by_side([cpu], 0) == len(fleet_module.os.sched_getaffinity(0))
    cuda = tiny(cifar_root, 0, "fedavg", "train.device='cuda'")
    assert fleet_module.side_by_side([cpu, cuda], 3) == 1
    auto = tiny(cifar_root, 0, "fedavg", "train.device='auto'")
    monkeypatch.setattr(fleet_module.torch.cuda, "is_available", lambda: True)
    assert fleet_module.side_by_side([auto], 3) == 1
    monkeypatch.setattr(fleet_module.torch.cuda, "is_available", lambda: False)
    assert fleet_module.side_by_side([auto], 3) == 3
