"""FMDS / HFMDs (fl.methods.hfmds) against hand computations, and end to end through python -m fl.run on a tiny
CIFAR-10: a synthesis round with FedAvg and SCAFFOLD, bit-identical resume across it, the rounds before the first
synthesis equal to FedAvg's, ζ̂² = α²ζ² at the server model, FLOPs and communication, bad configs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl.config import build_algorithm
from fl.methods.base import CyclicBatches
from fl.methods.hfmds import (
    FMDS,
    HFMDs,
    Mixed,
    cam,
    hard_features,
    inversion_parts,
    invert,
    invert_together,
    psnr,
    update_prototypes,
)
from fl.run import main
from tests.fl.conftest import assert_close_tree, assert_one_line_config_error, interrupt_at


class Tiny(nn.Module):
    """A split model: features = tanh(A x) (3 -> 4), classifier = linear (4 -> 3)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Linear(3, 4).double()
        self.head = nn.Linear(4, 3).double()
        self.feature_dim = 4

    def features(self, x):
        return torch.tanh(self.body(x))

    def classifier(self, z):
        return self.head(z)

    def forward(self, x):
        return self.classifier(self.features(x))


def test_cam_of_a_linear_classifier_is_the_class_row_and_matches_autograd():
    head = nn.Linear(4, 3).double()
    z = torch.randn(5, 4, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 2, 0])
    g = cam(head, z, y)
    assert torch.allclose(g, head.weight.detach()[y], atol=0, rtol=0)  # g_z = W[y]
    # a nonlinear classifier: each row's own gradient, against autograd one row at a time
    mlp = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    g = cam(mlp, z, y)
    for j in range(5):
        zj = z[j : j + 1].clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(mlp(zj)[0, y[j]], zj)
        assert torch.allclose(g[j], expected[0], rtol=1e-12, atol=1e-14)


def test_hard_features_and_prototype_momentum_against_hand_values():
    z = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    prototypes = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    # (1 + mu) z - mu zbar with mu = 0.5: [1.5 - 0, 3 - 0.5], [4.5 - 0.5, -1.5 - 0.5]
    assert hard_features(z, prototypes, 0.5).tolist() == [[1.5, 2.5], [4.0, -2.0]]
    assert hard_features(z, prototypes, 0.0).tolist() == z.tolist()  # FMDS
    assert hard_features(z, prototypes, -0.5).tolist() == [[0.5, 1.5], [2.0, 0.0]]  # easy features
    sums = torch.tensor([[2.0, 4.0], [0.0, 0.0], [3.0, 3.0]])
    counts = torch.tensor([2.0, 0.0, 1.0])  # class means: [1, 2], -, [3, 3]
    first, seen = update_prototypes(None, None, sums, counts, 0.5)
    assert first.tolist() == [[1.0, 2.0], [0.0, 0.0], [3.0, 3.0]] and seen.tolist() == [True, False, True]
    sums2 = torch.tensor([[4.0, 0.0], [5.0, 5.0], [0.0, 0.0]])
    counts2 = torch.tensor([1.0, 1.0, 0.0])
    second, seen2 = update_prototypes(first, seen, sums2, counts2, 0.25)
    # class 0: 0.75 [4, 0] + 0.25 [1, 2]; class 1 new: its mean; class 2 unseen: kept
    assert second.tolist() == [[3.25, 0.5], [5.0, 5.0], [3.0, 3.0]] and seen2.tolist() == [True, True, True]


def test_psnr_against_hand_computation():
    a = torch.zeros(2, 1, 2, 2)
    b = torch.tensor([[[[0.1, 0.0], [0.0, 0.0]]], [[[0.0, 0.0], [0.0, 0.0]]]])
    values = psnr(b, a, 1.0)
    assert values[0].item() == pytest.approx(10 * math.log10(1 / (0.01 / 4)), rel=1e-6)
    assert values[1].item() == math.inf  # identical images
    # the data range is MAX: the same images in units of 2 give the same PSNR with range 2
    assert psnr(2 * b, 2 * a, 2.0)[0].item() == pytest.approx(values[0].item(), rel=1e-6)
    # one range per channel: differences divided channel by channel
    c, d = torch.zeros(1, 2, 1, 1), torch.tensor([[[[0.5]], [[3.0]]]])
    expected = 10 * math.log10(1 / ((0.25 + 1.0) / 2))  # (0.5/1)^2, (3/3)^2
    assert psnr(d, c, torch.tensor([1.0, 3.0]))[0].item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_inversion_lowers_its_objective(mu):
    model = Tiny()
    with torch.no_grad():
        model.head.weight.mul_(5)  # classes the features can separate: the CE term can get near 0
    x_real = torch.randn(12, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y_real = torch.arange(12) % 3
    prototypes = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)[y_real]
    x_hat, losses = invert(model, x_real, y_real, prototypes, mu, 200, 0.05, torch.Generator().manual_seed(0))
    assert x_hat.shape == x_real.shape and losses[-1] < 0.5 * losses[0]
    assert all(p.grad is None for p in model.parameters())  # the model stays fixed and untouched


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_clients_inverted_together_are_each_inverted_alone(dtype):
    """Several clients' inversions as one computation (what CUDA runs: one Adam over all pixels, the objective
    summed over the clients' means) give each client's x̂ and objective as its inversion alone: the model acts row by
    row and Adam element by element (float64: to 1e-12, the convolution's kernels may differ with the rows; the
    HFMDs CNN, clients of 17, 30 and 30 rows)."""
    from fl.models import build_model

    torch.manual_seed(0)
    model = build_model("hfmds-cnn", (1, 28, 28), 10).to(dtype)
    clients, alone = [], []
    for k, n in enumerate((17, 30, 30)):
        g = torch.Generator().manual_seed(k)
        x, y = torch.randn(n, 1, 28, 28, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)
        prototypes = torch.randn(n, model.feature_dim, generator=g, dtype=dtype)
        alone.append(invert(model, x, y, prototypes, 0.5, 4, 0.02, torch.Generator().manual_seed(10 + k)))
        start = torch.randn(x.shape, generator=torch.Generator().manual_seed(10 + k), dtype=dtype)
        clients.append((x, y, prototypes, start))
    together = invert_together(model, clients, 0.5, 4, 0.02)
    tolerance = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    for (x_alone, losses_alone), (x_together, losses_together) in zip(alone, together):
        torch.testing.assert_close(x_together, x_alone, **tolerance)
        assert len(losses_together) == 4 and losses_together == pytest.approx(losses_alone, rel=1e-6)
    assert not torch.equal(together[0][0], clients[0][3])  # the pixels moved
    assert all(p.grad is None for p in model.parameters())


def test_cuda_inverts_every_client_at_once_and_the_cpu_one_at_a_time():
    clients = ["a", "b", "c"]
    assert inversion_parts(clients, torch.device("cuda")) == [clients]
    assert inversion_parts(clients, torch.device("cpu")) == [["a"], ["b"], ["c"]]


def test_mixed_step_is_eq_6_and_accumulates_real_features():
    model = Tiny()
    x = torch.randn(4, 3, dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 2])
    pool = (torch.randn(6, 3, dtype=torch.float64), torch.tensor([2, 2, 0, 1, 0, 1]))
    generator = torch.Generator().manual_seed(3)
    task = Mixed(3, 0.1, pool, CyclicBatches(6, 4, generator, "cpu"), prototypes=True)
    loss = task.loss(model, x, y)
    order = torch.randperm(6, generator=torch.Generator().manual_seed(3))[:4]
    expected = 0.1 * F.cross_entropy(model(x), y) + 0.9 * F.cross_entropy(model(pool[0][order]), pool[1][order])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    z = model.features(x).detach()
    assert torch.allclose(task.sums, torch.stack([z[0], z[1] + z[2], z[3]]))
    assert task.counts.tolist() == [1.0, 2.0, 1.0]
    plain = Mixed(3)  # no pool, no prototypes: plain cross-entropy, nothing stored
    assert plain.loss(model, x, y).item() == pytest.approx(F.cross_entropy(model(x), y).item(), rel=1e-12)
    assert plain.sums is None


def hfmds_args(root, out, algorithm, method="hfmds", *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='hfmds-cnn'", "--set", "train.rounds=4",
        "--set", "train.batch_size=8", "--set", "train.checkpoint_every=2", "--set", "train.device='cpu'",
        "--set", "train.participation=0.5", "--set", "train.local_steps=3", "--set", "train.estimate_every=3",
        "--set", "train.estimate_samples=8",  # per-sample gradients of 8 a client: the 64 default took most of a run
        "--set", "train.momentum=0.9", "--set", "train.weight_decay=5e-4", "--set", "train.weighting='uniform'",
        "--set", f"algorithm.name='{algorithm}'", "--set", f"method.name='{method}'", "--set", "method.period=3",
        "--set", "method.n_synthetic=5", "--set", "method.steps=4", "--set", "method.synthetic_batch_size=6",
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def metrics(out):
    """The metrics rows without timings (also the synthesis log's)."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.get("method", {}).get("synthesis", {}).pop("seconds", None)
    return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in rows]


def strip(row):
    """A metrics row without the method's log and timings (what FedAvg and HFMDs share before a synthesis)."""
    return {k: v for k, v in row.items() if k not in ("method",)}


@pytest.mark.parametrize("algorithm", ["fedavg", pytest.param("scaffold", marks=pytest.mark.slow)])
def test_hfmds_synthesis_round_end_to_end_and_resume_bit_identical(cifar_root, tmp_path, monkeypatch, algorithm):
    straight, broken, plain = tmp_path / "straight", tmp_path / "broken", tmp_path / "plain"
    assert main(hfmds_args(cifar_root, straight, algorithm)) == 0
    rows = metrics(straight)
    synthesis = rows[2]["method"]["synthesis"]
    assert synthesis["round"] == 3 and synthesis["pool_size"] == 2 * 5  # 2 participants x B_g
    assert synthesis["loss_last"] < synthesis["loss_first"] and np.isfinite(synthesis["psnr_mean"])
    assert synthesis["flops_local_step_mixed"] > synthesis["flops_local_step_real"] > 0
    assert synthesis["flops_synthesis_per_client"] > 0
    d = 3 * 32 * 32
    assert synthesis["numbers_sent"] == 10 * d + 4 * 10 * d  # uploads + every client downloads the pool
    per_round = build_algorithm({"name": algorithm}).communication(
        json.loads((straight / "summary.json").read_text())["n_params"], 5130
    )
    assert rows[2]["communication"] - rows[1]["communication"] == 2 * per_round + synthesis["numbers_sent"]
    estimates = rows[2]["estimates"]  # at round 3, after the synthesis: ζ̂² = α² ζ² (one shared pool)
    assert estimates["zeta2_hat"] == pytest.approx(0.01 * estimates["zeta2"], rel=1e-9)
    assert "delta2" in estimates and "sigma2_synthetic" in estimates
    summary = json.loads((straight / "summary.json").read_text())
    assert [s["round"] for s in summary["syntheses"]] == [3] and (straight / "hfmds_pool.png").stat().st_size > 0
    # before the first synthesis HFMDs is FedAvg (or SCAFFOLD) bit for bit
    assert main(hfmds_args(cifar_root, plain, algorithm, "none")) == 0
    assert [strip(r) for r in metrics(plain)[:2]] == [strip(r) for r in rows[:2]]
    # interrupted in round 4 (checkpoint after round 3 holds the pool and the prototypes), resumed
    resume = interrupt_at(monkeypatch, 4)
    assert main(hfmds_args(cifar_root, broken, algorithm)) == 2
    saved = torch.load(broken / "checkpoint.pt", weights_only=True)
    assert saved["round"] == 4 and saved["method"]["server"]["pool_x"].shape[0] == 10
    assert all("prototypes" in c for c in saved["method"]["clients"].values())
    resume()
    assert main(["--resume", str(broken), "--quiet"]) == 0
    assert metrics(broken) == metrics(straight)
    a = torch.load(straight / "checkpoint.pt", weights_only=True)
    b = torch.load(broken / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["method"]["server"]["pool_x"], b["method"]["server"]["pool_x"])


def test_fmds_starts_from_a_fedavg_state_and_accumulates_its_pool(cifar_root, tmp_path):
    fedavg, fmds = tmp_path / "fedavg", tmp_path / "fmds"
    keep = ("--set", "train.keep_round=2", "--set", "train.rounds=6", "--set", "train.participation=1.0")
    assert main(hfmds_args(cifar_root, fedavg, "fedavg", "none", *keep)) == 0
    init = ("--init-from", str(fedavg / "checkpoint_round2.pt"), "--set", "method.pool='accumulate'")
    assert main(hfmds_args(cifar_root, fmds, "fedavg", "fmds", *keep, *init)) == 0
    rows = metrics(fmds)
    assert [r["method"]["synthesis"]["pool_size"] for r in rows if "synthesis" in r.get("method", {})] == [
        20,
        40,
    ]  # rounds 3, 6
    saved = torch.load(fmds / "checkpoint.pt", weights_only=True)
    assert saved["method"]["clients"] == {}  # FMDS keeps no prototypes
    # HFMDs keeps prototypes from round 1: it cannot start from a state the FedAvg run left without them
    assert main(hfmds_args(cifar_root, tmp_path / "hfmds", "fedavg", "hfmds", *keep, *init)) == 2


def test_method_classes_check_their_keys():
    assert FMDS().mu == 0 and HFMDs().mu == 0.5 and HFMDs().first_stateful_round() == 1
    assert FMDS().first_stateful_round() == 20


@pytest.mark.parametrize(
    "override, key",
    [
        ("method.period=0", "method.period"),
        ("method.n_synthetic=0", "method.n_synthetic"),
        ("method.steps=-1", "method.steps"),
        ("method.lr=0", "method.lr"),
        ("method.alpha=1.5", "method.alpha"),
        ("method.momentum=2", "method.momentum"),
        ("method.pool='keep'", "method.pool"),
        ("method.cam_relu=1", "method.cam_relu"),
        ("train.weight_decay=-1", "train.weight_decay"),
    ],
)
def test_bad_hfmds_config_is_one_line_exit_2(override, key, tmp_path, capsys):
    args = ["--set", "method.name='hfmds'", "--set", override, "--out", str(tmp_path / "run"), "--quiet"]
    assert_one_line_config_error(args, key, capsys)


def test_fmds_refuses_a_hard_feature_scale(tmp_path, capsys):
    args = ["--set", "method.name='fmds'", "--set", "method.mu=0.5", "--out", str(tmp_path / "run"), "--quiet"]
    assert main(args) == 2
    assert "method.name = 'hfmds'" in capsys.readouterr().err


def test_hfmds_with_another_alpha_starts_from_its_state_before_the_first_synthesis(cifar_root, tmp_path, capsys):
    """α = 0.5 from the α = 0.1 run's state after round 2 (the first synthesis is before round 3) equals α = 0.5 from
    round 1, prototypes and all; a state after the synthesis (the other α's pool) is refused."""
    source, fresh, branched = tmp_path / "a01", tmp_path / "a05", tmp_path / "a05_from_a01"
    keep = ("--set", "train.keep_round=2")
    half = ("--set", "method.alpha=0.5")
    assert main(hfmds_args(cifar_root, source, "fedavg", "hfmds", *keep)) == 0
    assert main(hfmds_args(cifar_root, fresh, "fedavg", "hfmds", *half)) == 0
    init = ("--init-from", str(source / "checkpoint_round2.pt"))
    assert main(hfmds_args(cifar_root, branched, "fedavg", "hfmds", *half, *init)) == 0
    assert metrics(branched) == metrics(fresh) != metrics(source)
    a = torch.load(fresh / "checkpoint.pt", weights_only=True)
    b = torch.load(branched / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["method"]["server"]["pool_x"], b["method"]["server"]["pool_x"])
    late = tmp_path / "late"
    assert main(hfmds_args(cifar_root, late, "fedavg", "hfmds", "--set", "train.keep_round=3")) == 0
    capsys.readouterr()
    args = hfmds_args(
        cifar_root, tmp_path / "x", "fedavg", "hfmds", *half, "--init-from", str(late / "checkpoint_round3.pt")
    )
    assert main(args) == 2 and "keeps state from round 1" in capsys.readouterr().err
    other_lambda = ("--set", "method.momentum=0.9", *init)
    assert main(hfmds_args(cifar_root, tmp_path / "y", "fedavg", "hfmds", *other_lambda)) == 2


UNEQUAL = ("--set", "train.local_steps=0", "--set", "train.local_epochs=1", "--set", "data.partition='dirichlet'",
           "--set", "data.alpha=0.5")  # fmt: skip


@pytest.mark.parametrize(
    "algorithm, method, extra",
    [
        ("fedavg", "hfmds", ()),  # 3 steps a client, prototypes from round 1, the pool from round 3
        ("scaffold", "fmds", UNEQUAL),  # a client's epoch: unequal K_i, its last batch shorter
    ],
)
def test_hfmds_trains_batched_to_float_rounding_of_the_sequential_backend(cifar_root, tmp_path, algorithm, method,
                                                                          extra):  # fmt: skip
    """HFMDs' mixed batches (real batch + pool batch, the last of a pass shorter), prototypes and the gradient
    share train in one vmapped call; every number of the rows and the final state equal the sequential backend's
    to float64 rounding."""
    runs = {}
    for backend in ("sequential", "batched"):
        runs[backend] = tmp_path / backend
        sets = ("--set", f"train.backend='{backend}'", "--set", "train.dtype='float64'", *extra)
        assert main([*hfmds_args(cifar_root, runs[backend], algorithm, method), *sets]) == 0
    rows = {backend: metrics(out) for backend, out in runs.items()}
    assert [row["backend"] for row in rows["batched"]] == ["batched"] * 4
    assert "backend_note" not in rows["batched"][0]
    assert len(rows["batched"][3]["method"]["pool_share"]) == 2  # round 4: the two participants' shares
    if extra:
        sizes = json.loads((runs["batched"] / "summary.json").read_text())["client_sizes"]
        assert len(set(sizes)) > 1
    for row in rows.values():
        for r in row:
            r.pop("backend")
    assert_close_tree(rows["batched"], rows["sequential"])
    seq, bat = (torch.load(out / "checkpoint.pt", weights_only=True) for out in runs.values())
    torch.testing.assert_close(bat["x"], seq["x"], rtol=1e-10, atol=1e-12)
    assert bat["method"]["clients"].keys() == seq["method"]["clients"].keys()
    for k, kept in seq["method"]["clients"].items():
        torch.testing.assert_close(bat["method"]["clients"][k], kept, rtol=1e-10, atol=1e-12)


def test_a_synthesis_with_every_client_inverted_at_once_gives_the_one_by_one_pool(cifar_root, tmp_path, monkeypatch):
    """What CUDA runs (every participant's inversion in one computation) on the CPU in float32: the run's pool, its
    synthesis log and the rounds after equal the one-by-one run's to float rounding."""
    import fl.methods.hfmds as hfmds_module

    alone, together = tmp_path / "alone", tmp_path / "together"
    assert main(hfmds_args(cifar_root, alone, "fedavg")) == 0
    calls = []

    def at_once(clients, device):
        calls.append(len(clients))
        return [clients]

    monkeypatch.setattr(hfmds_module, "inversion_parts", at_once)
    assert main(hfmds_args(cifar_root, together, "fedavg")) == 0
    assert calls == [2]  # one synthesis, its two participants in one computation
    pools = [
        torch.load(out / "checkpoint.pt", weights_only=True)["method"]["server"]["pool_x"] for out in (alone, together)
    ]
    torch.testing.assert_close(pools[1], pools[0], rtol=1e-4, atol=1e-4)
    assert_close_tree(metrics(together), metrics(alone), rel=1e-4)
