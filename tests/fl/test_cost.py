"""fl/cost.py: a run's FLOPs from its config, against closed forms."""

from __future__ import annotations

import pytest

from fl.config import load_config
from fl.cost import DYNAFED_ITERATION_FLOP, minutes, model_flops, run_cost


def test_the_mlp_forward_counts_its_matrix_products():
    assert model_flops("mlp", (1, 28, 28), 10) == 2 * (784 * 200 + 200 * 200 + 200 * 10)


def test_a_run_costs_three_forwards_per_sample_trained_and_one_per_sample_tested():
    config = load_config(None, ["data.dataset='fmnist'", "model.name='mlp'", "data.clients=10", "train.rounds=4",
                                "train.participation=0.5", "train.local_epochs=2", "data.subsample=6000",
                                "data.test_subsample=1000", "train.eval_every=2"])  # fmt: skip
    forward = 2 * (784 * 200 + 200 * 200 + 200 * 10)
    cost = run_cost(config)
    assert cost.train == pytest.approx(3 * forward * 6000 * 0.5 * 2 * 4)  # half the clients, 2 epochs, 4 rounds
    assert cost.eval == pytest.approx(forward * 1000 * 2) and cost.method == 0
    steps = run_cost(load_config(None, ["data.dataset='fmnist'", "model.name='mlp'", "data.clients=10",
                                        "train.rounds=1", "train.local_steps=7", "train.batch_size=16"]))  # fmt: skip
    assert steps.train == pytest.approx(3 * forward * 10 * 7 * 16)


def test_dynafed_adds_its_synthesis_scaled_from_the_paper_settings():
    base = ["data.dataset='fmnist'", "model.name='mlp'", "method.name='dynafed'", "train.rounds=30"]
    paper = run_cost(load_config(None, [*base, "method.iterations=10"]))
    assert paper.method == pytest.approx(10 * DYNAFED_ITERATION_FLOP)
    half = run_cost(load_config(None, [*base, "method.iterations=10", "method.inner_steps=10"]))
    assert half.method == pytest.approx(paper.method / 2)
    assert minutes(6e12, 1e11) == pytest.approx(1.0)
