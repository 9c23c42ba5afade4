"""FedCOG (fl.methods.fedcog) against hand computations, and end to end through python -m fl.run on a tiny CIFAR-10:
every algorithm of its Table 3, bit-identical resume, starting from another run's kept state, bad configs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl.config import build_algorithm, load_config
from fl.methods.fedcog import (
    Distillation,
    FedCOG,
    disagreement_loss,
    generate,
    js_divergence,
    kl,
    kl_logs,
    starting_noise,
    target_labels,
)
from fl.run import main
from tests.fl.conftest import assert_one_line_config_error, interrupt_at
from theory.errors import InputError


def hand_js(p: np.ndarray, q: np.ndarray) -> float:
    m = (p + q) / 2
    kl = lambda a, b: float(np.sum(np.where(a > 0, a * np.log(a / b), 0.0)))  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def test_js_divergence_gradient_is_finite_where_a_softmax_underflows():
    """A confident model in float32 gives probabilities of exactly 0 (here softmax of a logit gap of 200); the JS
    divergence's gradient must stay finite there (it was NaN through F.kl_div's target gradient, 0·∞: FedCOG's
    generation on NIID-2, seed 1, round 51, diverged on it). Away from underflow it agrees with finite
    differences (float64)."""
    a = torch.tensor([[200.0, 0.0, -5.0], [1.0, 2.0, 3.0]], requires_grad=True)
    b = torch.tensor([[0.0, 1.0, 2.0], [3.0, 2.0, 1.0]], requires_grad=True)
    assert (F.softmax(a.detach(), 1) == 0).any()
    value = js_divergence(a, b)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u, v: js_divergence(u, v, 2.0), (x, y))


def test_kl_logs_equals_kl_and_keeps_its_gradient_finite():
    log_p = F.log_softmax(torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64), 1)
    log_q = F.log_softmax(torch.tensor([[1.0, 0.0, -1.0]], dtype=torch.float64), 1)
    assert float(kl_logs(log_p, log_q)) == pytest.approx(float(kl(log_p.exp(), log_q)), rel=1e-12)
    z = torch.tensor([[300.0, 0.0, 1.0]], requires_grad=True)
    kl_logs(F.log_softmax(z, 1), F.log_softmax(torch.zeros(1, 3), 1)).sum().backward()
    assert torch.isfinite(z.grad).all()


def test_js_divergence_against_hand_computation():
    a = torch.tensor([[2.0, 0.0, -1.0], [0.3, 0.3, 0.3]], dtype=torch.float64)
    b = torch.tensor([[-1.0, 1.0, 0.5], [5.0, -5.0, 0.0]], dtype=torch.float64)
    pa, pb = F.softmax(a, 1).numpy(), F.softmax(b, 1).numpy()
    expected = np.mean([hand_js(pa[r], pb[r]) for r in range(2)])
    assert float(js_divergence(a, b)) == pytest.approx(expected, rel=1e-12)
    assert float(js_divergence(b, a)) == pytest.approx(expected, rel=1e-12)  # symmetric
    assert float(js_divergence(a, a)) == pytest.approx(0.0, abs=1e-15)  # zero for equal outputs
    assert float(
        js_divergence(torch.tensor([[50.0, -50.0]]).double(), torch.tensor([[-50.0, 50.0]]).double())
    ) == pytest.approx(math.log(2), rel=1e-9)  # at most log 2
    assert float(disagreement_loss(a, b)) == pytest.approx(1 - expected, rel=1e-12)  # eq. 2
    # temperature T: the JS of the softened outputs
    expected_t = np.mean([hand_js(*(F.softmax(v / 3, 1).numpy()[r] for v in (a, b))) for r in range(2)])
    assert float(js_divergence(a, b, 3.0)) == pytest.approx(expected_t, rel=1e-12)


def test_target_labels_uniform_and_complementary():
    uniform = target_labels(np.array([5, 0, 9]), 256, "uniform")
    assert np.bincount(uniform.numpy()).tolist() == [86, 85, 85] and uniform.tolist() == sorted(uniform.tolist())
    counts = np.array([500, 0, 400, 200, 400])  # A.1.1's example: d^ = max(d) - d = [0, 500, 100, 300, 100]
    assert np.bincount(target_labels(counts, 1000, "complement").numpy(), minlength=5).tolist() == [
        0, 500, 100, 300, 100,
    ]  # fmt: skip
    balanced = target_labels(np.array([7, 7, 7]), 6, "complement")  # nothing to complement: uniform
    assert np.bincount(balanced.numpy()).tolist() == [2, 2, 2]


def test_hyper_parameter_free_weights():
    counts = np.array([500, 0, 400, 200, 400])  # N_real = 1500, N_gen = 1000 (A.2.2)
    assert FedCOG(kd_weighting="balanced").weights(counts) == pytest.approx((0.6, 0.4))
    assert FedCOG(lambda_kd=0.05).weights(counts) == (1.0, 0.05)


def linear(seed: int, d: int = 6, k: int = 4) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(d, k).double()


def test_generation_lowers_its_objective_and_raises_disagreement():
    global_model, local_model = linear(0), linear(1)
    labels = torch.arange(16) % 4
    generator = torch.Generator().manual_seed(0)
    noise = starting_noise(len(labels), (6,), generator, "cpu", torch.float64)
    x_hat, losses = generate(global_model, local_model, noise, labels, 60, 0.05, 0.1, 1.0)
    assert losses[-1] < 0.5 * losses[0]
    noise = torch.randn((16, 6), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    before = js_divergence(global_model(noise), local_model(noise))
    after = js_divergence(global_model(x_hat), local_model(x_hat))
    assert after > before
    assert (global_model(x_hat).argmax(1) == labels).float().mean() > 0.9


def test_kd_term_vanishes_when_local_equals_global():
    """Lemma 5.5: the distillation term toward the model itself is zero, and so is its gradient (the estimators
    rely on this: at the server model FedCOG's objective gradient is w_ce·∇f_k)."""
    model = linear(0)
    x_hat = torch.randn(10, 6, dtype=torch.float64)
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 4, (5,))
    with torch.no_grad():
        teacher = F.softmax(model(x_hat), 1)
    task = Distillation(x_hat, teacher, 0.7, 0.3, 4, 1.0, torch.Generator().manual_seed(0))
    kd = task.kd_loss(model, torch.arange(10))
    assert float(kd.detach()) == pytest.approx(0.0, abs=1e-15)
    grads = torch.autograd.grad(kd, list(model.parameters()))
    assert all(float(g.abs().max()) < 1e-15 for g in grads)
    assert float(task.loss(model, x, y).detach()) == pytest.approx(
        0.7 * float(F.cross_entropy(model(x), y).detach()), rel=1e-12
    )
    # the x-hat batches cycle through permutations: every x-hat once per pass
    task = Distillation(x_hat, teacher, 0.7, 0.3, 4, 1.0, torch.Generator().manual_seed(0))
    seen = torch.cat([task.next_batch() for _ in range(3)])
    assert sorted(seen.tolist()) == list(range(10))


def fedcog_args(root, out, algorithm, *extra):
    return [
        "--set", "data.dataset='cifar10'", "--set", f"data.data_root='{root}'", "--set", "data.partition='iid'",
        "--set", "data.clients=4", "--set", "model.name='fedcog-cnn'", "--set", "train.rounds=4",
        "--set", "train.batch_size=16", "--set", "train.checkpoint_every=2", "--set", "train.device='cpu'",
        "--set", "train.participation=0.5", "--set", "train.local_steps=3", "--set", "train.estimate_every=2",
        "--set", f"algorithm.name='{algorithm}'", "--set", "method.name='fedcog'", "--set", "method.start_round=2",
        "--set", "method.n_generate=12", "--set", "method.generate_steps=3", "--set", "method.kd_batch_size=5",
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def metrics(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in rows]


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "scaffold", "feddyn"])
def test_fedcog_with_each_algorithm_resumes_bit_identically(cifar_root, tmp_path, monkeypatch, algorithm):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert main(fedcog_args(cifar_root, straight, algorithm)) == 0
    rows = metrics(straight)
    assert "method" not in rows[0] and all(len(r["method"]["generation_loss"]) == 2 for r in rows[1:])
    assert rows[-1]["communication"] == 4 * 2 * build_algorithm({"name": algorithm}).communication(
        json.loads((straight / "summary.json").read_text())["n_params"], 850
    )  # FedCOG sends nothing beyond the algorithm
    resume = interrupt_at(monkeypatch, 4)
    assert main(fedcog_args(cifar_root, broken, algorithm)) == 2  # checkpoint after round 3: holds local models
    saved = torch.load(broken / "checkpoint.pt", weights_only=True)
    assert saved["round"] == 4 and len(saved["method"]["clients"]) >= 2
    resume()
    assert main(["--resume", str(broken), "--quiet"]) == 0
    assert metrics(broken) == metrics(straight)
    a = torch.load(straight / "checkpoint.pt", weights_only=True)
    b = torch.load(broken / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["x"], b["x"])
    for i in a["method"]["clients"]:
        assert torch.equal(a["method"]["clients"][i]["local"], b["method"]["clients"][i]["local"])


def test_fedcog_from_a_fedavg_runs_kept_state_equals_fedcog_from_scratch(cifar_root, tmp_path):
    """The paper's protocol without repeating the FedAvg rounds: FedAvg with keep_round = 1, then FedCOG
    (start_round = 3) from its state after round 1 gives the run FedCOG would give from round 1."""
    scratch, fedavg, forked = tmp_path / "scratch", tmp_path / "fedavg", tmp_path / "forked"
    keep = ("--set", "train.keep_round=1", "--set", "method.start_round=3")
    assert main(fedcog_args(cifar_root, scratch, "fedavg", *keep)) == 0
    plain = [a.replace("name='fedcog'", "name='none'") for a in fedcog_args(cifar_root, fedavg, "fedavg", *keep)]
    assert main(plain) == 0  # FedCOG's keys are another method's: ignored
    assert (fedavg / "checkpoint_round1.pt").exists()
    init = ("--init-from", str(fedavg / "checkpoint_round1.pt"))
    assert main(fedcog_args(cifar_root, forked, "fedavg", *keep, *init)) == 0
    assert metrics(forked) == metrics(scratch)
    a = torch.load(scratch / "checkpoint.pt", weights_only=True)
    b = torch.load(forked / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["x"], b["x"])
    (forked / "checkpoint.pt").unlink()  # as if killed before its first checkpoint: it starts from the same state
    assert main(["--resume", str(forked), "--quiet"]) == 0
    assert metrics(forked) == metrics(scratch)
    # FedCOG that needs the local models of round 1 (start_round = 2) cannot start after round 1
    late = fedcog_args(cifar_root, tmp_path / "late", "fedavg", *keep, *init, "--set", "method.start_round=2")
    assert main(late) == 2
    # another model cannot start from it
    other = fedcog_args(cifar_root, tmp_path / "other", "fedavg", *keep, *init, "--set", "train.momentum=0.5")
    assert main(other) == 2


@pytest.mark.parametrize(
    "override, key",
    [
        ("method.labels='random'", "method.labels"),
        ("method.kd_weighting='auto'", "method.kd_weighting"),
        ("method.start_round=0", "method.start_round"),
        ("method.temperature=0", "method.temperature"),
        ("method.n_generate=1.5", "method.n_generate"),
        ("method.lambda_kd=-1", "method.lambda_kd"),
        ("train.local_steps=-1", "train.local_steps"),
        ("train.momentum=1", "train.momentum"),
        ("train.optimizer='rmsprop'", "train.optimizer"),
    ],
)
def test_bad_fedcog_config_is_one_line_exit_2(override, key, tmp_path, capsys):
    args = ["--set", "method.name='fedcog'", "--set", override, "--out", str(tmp_path / "run"), "--quiet"]
    assert_one_line_config_error(args, key, capsys)


def test_earlier_synthetic_section_reads_as_method(tmp_path):
    old = tmp_path / "old.toml"
    old.write_text('[synthetic]\nmethod = "fedssyn"\ngenerator = "vae"\nn_tilde = 300\n')
    new = tmp_path / "new.toml"
    new.write_text('[method]\nname = "fedssyn"\ngenerator = "vae"\nn_tilde = 300\n')
    assert load_config(old) == load_config(new)
    assert load_config(old).method["n_tilde"] == 300
    both = tmp_path / "both.toml"
    both.write_text('[synthetic]\nn_tilde = 3\n[method]\nname = "fedssyn"\nn_tilde = 300\n')
    with pytest.raises(InputError, match=r"method\.n_tilde"):
        load_config(both)


def test_a_sweep_over_method_names_keeps_the_other_methods_keys_out(capsys):
    config = load_config(None, ["method.name='none'", "method.generator='vae'"])
    assert config.method == {"name": "none"}
    assert "ignored" in capsys.readouterr().err
