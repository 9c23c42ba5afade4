"""lab/cost.py: a run's FLOPs from its config, against closed forms."""

from __future__ import annotations

import pytest

from fl.config import load_config
from lab.cost import DYNAFED_ITERATION_FLOP, minutes, model_flops, run_cost


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


def test_hfmds_counts_its_pool_batches_and_inversions_from_the_round_it_starts():
    """Rounds 20-50 of an HFMDs arm (started from round 19): pool batches of 6 beside the real batches of 10 from
    round 20 on, syntheses at rounds 20 and 40 inverting B_g = 100 samples a participant for T_g = 500 steps."""
    sets = ["data.dataset='fmnist'", "model.name='mlp'", "data.clients=20", "train.rounds=50", "train.batch_size=10",
            "method.name='hfmds'", "method.synthetic_batch_size=6", "train.eval_every=1"]  # fmt: skip
    forward = model_flops("mlp", (1, 28, 28), 10)
    cost = run_cost(load_config(None, sets), start=19)
    real = 60_000 * 31  # every client, one epoch, rounds 20..50
    assert cost.train == pytest.approx(3 * forward * real * (1 + 6 / 10))
    assert cost.method == pytest.approx(3 * forward * 2 * 20 * 100 * 500)
    assert cost.eval == pytest.approx(forward * 10_000 * 31)
    before = run_cost(load_config(None, [*sets, "train.rounds=19"]))
    assert before.method == 0 and before.train == pytest.approx(3 * forward * 60_000 * 19)
    dynafed = ["data.dataset='fmnist'", "model.name='mlp'", "method.name='dynafed'", "train.rounds=30"]
    assert run_cost(load_config(None, dynafed), start=20).method == 0  # past its synthesis
