"""Several clients' DDPMs in one computation (fl/synthesis/generators/ddpm_together.py) equal each client's own
``DDPM.fit`` to float32 rounding: unequal data sizes (short last batches), unequal epochs (finished clients masked),
gradient clipping, AdamW with weight decay, the EMA's warm-up, the per-epoch hooks and histories; refusals in one
line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fl.synthesis.generators.ddpm import DDPM, DDPMConfig
from fl.synthesis.generators.ddpm_together import fit_together
from theory.errors import InputError

SIZES, EPOCHS = (7, 12, 5), (2, 1, 3)
CONFIG = DDPMConfig.tiny(batch_size=4, weight_decay=0.01, grad_clip=0.5, attn_levels=(0,))
TOL = {"rtol": 2e-4, "atol": 2e-6}


def clients(config=CONFIG):
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 256, (n, 1, 8, 8), dtype=np.uint8), rng.integers(0, 3, n)) for n in SIZES]
    models = []
    for k in range(len(SIZES)):
        torch.manual_seed(10 + k)
        models.append(DDPM((1, 8, 8), 3, config))
    return models, data


def hooks(calls, k):
    def on_epoch(epoch, model):
        calls.append((k, epoch, model.steps_done, next(model.model.parameters()).detach().clone()))

    return on_epoch


def test_ddpms_trained_together_equal_their_own_fits():
    alone, data = clients()
    alone_calls, histories = [], []
    for k, (model, (x, y)) in enumerate(zip(alone, data)):
        generator = torch.Generator().manual_seed(100 + k)
        histories.append(model.fit(x, y, EPOCHS[k], generator, on_epoch=hooks(alone_calls, k)))
    together, _ = clients()
    calls = []
    generators = [torch.Generator().manual_seed(100 + k) for k in range(len(SIZES))]
    result = fit_together(together, data, EPOCHS, generators, [hooks(calls, k) for k in range(len(SIZES))])
    assert [len(h) for h in result] == list(EPOCHS)
    for mine, theirs in zip(result, histories):
        assert [r["loss"] for r in mine] == pytest.approx([r["loss"] for r in theirs], rel=1e-4)
    # each client's hooks in its own order, at the same step counts, with the same weights
    for k in range(len(SIZES)):
        mine, theirs = [c for c in calls if c[0] == k], [c for c in alone_calls if c[0] == k]
        assert [c[1:3] for c in mine] == [c[1:3] for c in theirs]
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a[3], b[3], **TOL)
    for a, b in zip(together, alone):
        assert (a.steps_done, a.epochs_done) == (b.steps_done, b.epochs_done)
        for p, q in zip(a.model.parameters(), b.model.parameters()):
            torch.testing.assert_close(p, q, **TOL)
        for p, q in zip(a.ema_model.parameters(), b.ema_model.parameters()):
            torch.testing.assert_close(p, q, **TOL)
        state_a = [a.optimizer.state[p] for p in a.model.parameters()]
        state_b = [b.optimizer.state[p] for p in b.model.parameters()]
        for s, u in zip(state_a, state_b):
            assert float(s["step"]) == float(u["step"])
            torch.testing.assert_close(s["exp_avg"], u["exp_avg"], rtol=1e-3, atol=1e-6)
    assert not torch.equal(next(together[0].model.parameters()), next(clients()[0][0].model.parameters()))


def test_fit_together_refuses_what_it_cannot_batch():
    models, data = clients(DDPMConfig.tiny(dropout=0.1))
    generators = [torch.Generator() for _ in models]
    with pytest.raises(InputError, match="dropout"):
        fit_together(models, data, EPOCHS, generators)
    models, data = clients()
    with pytest.raises(InputError, match="one \\(data, epochs, generator\\)"):
        fit_together(models, data[:2], EPOCHS, generators)
    models[1].fit(*data[1], 1, torch.Generator())
    with pytest.raises(InputError, match="optimiser state"):
        fit_together(models, data, EPOCHS, generators)
    other = DDPM((1, 8, 8), 3, DDPMConfig.tiny(batch_size=8))
    with pytest.raises(InputError, match="share config"):
        fit_together([clients()[0][0], other], data[:2], EPOCHS[:2], generators[:2])


def test_fedssyn_trains_its_clients_ddpms_together_with_their_own_keys(tmp_path):
    """``method.train_together``: one computation for every client's DDPM, each folder as train_generator leaves it
    (checkpoints, generator.json), the weights those of the clients trained one by one (another cache key)."""
    from fl.federation import split_clients
    from fl.synthesis.fedssyn import FedssynConfig, synthesize
    from tests.fl.synthesis.conftest import make_tiny_dataset

    data = make_tiny_dataset(n_per_class=12)
    _, _, original = split_clients(data, "dirichlet", 3, np.random.default_rng(0), val_fraction=0.0,
                                   partition_params={"alpha": 0.5})  # fmt: skip
    tiny = {"timesteps": 50, "beta_start": 2e-3, "beta_end": 0.4, "base_channels": 8, "channel_mults": [1],
            "lr": 2e-3, "batch_size": 4}  # fmt: skip
    settings = {"generator": "ddpm", "rho": 0.5, "n_tilde": 4, "epochs": 2, "sample_steps": 2, "generator_config": tiny}
    quiet = {"log": lambda line: None}
    together = FedssynConfig(**settings, train_together=True)
    sets, infos = synthesize(data, original, together, 0, tmp_path, **quiet)
    _, alone = synthesize(data, original, FedssynConfig(**settings), 0, tmp_path, **quiet)
    assert [i["trained_together"] for i in infos] == [3, 3, 3] and all("trained_together" not in i for i in alone)
    assert [len(y) for _, y in sets] == [4, 4, 4]
    folders = sorted(p for p in tmp_path.iterdir() if (p / "generator.json").exists())
    assert len(folders) == 6  # two cache keys per client
    weights = {}
    for folder in folders:
        info = json.loads((folder / "generator.json").read_text())
        state = torch.load(folder / "generator_epoch2.pt", weights_only=True)
        weights.setdefault(folder.name.split("-")[0], []).append((info.get("trained_together", 0), state["model"]))
    for pair in weights.values():
        (_, alone_w), (_, together_w) = sorted(pair, key=lambda p: p[0])
        for key in alone_w:
            torch.testing.assert_close(together_w[key], alone_w[key], **TOL)
    with pytest.raises(InputError, match="train_together"):
        FedssynConfig(**{**settings, "generator": "gan"}, train_together=True).check()
