"""A generator's files that would give meaningless numbers (issue 69, classes 5 and 6): a generator checkpoint or a
``resume.pt`` with NaN or infinite weights or moments (it would draw black images, reported as 0% noise) is refused
in one line naming the file; a cached synthetic set whose npy header claims 73 GiB, or other bytes than the member
holds, is refused from its header before anything is allocated (the bound fl.data.formats.npz_arrays puts on a run's
data, theory.output.npz_headers)."""

from __future__ import annotations

import resource

import numpy as np
import pytest
import torch

from fl.federation import split_clients
from fl.synthesis.fedssyn import FedssynConfig, load_weights, non_finite, read_set, synthesize, train_generator
from tests.fl.test_bounds_before_reading import lying_npz
from theory.errors import InputError

QUIET = {"log": lambda line: None}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def trained(data, tmp_path):
    """One client's stand-in generator trained and sampled into ``tmp_path``: (its D_i, config, folder)."""
    _, _, original = split_clients(data, "iid", 1, np.random.default_rng(0), val_fraction=0.0)
    config = FedssynConfig(n_tilde=6, epochs=1)
    synthesize(data, original, config, 0, tmp_path, **QUIET)
    (folder,) = tmp_path.iterdir()
    return original, config, folder


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_checkpoint_with_non_finite_weights_is_refused_naming_the_file(fake_generator, tiny_dataset, tmp_path, bad):
    data = tiny_dataset()
    original, config, folder = trained(data, tmp_path)
    weights = folder / "generator_epoch1.pt"
    state = torch.load(weights, weights_only=True)
    state["means"][2, 0, 3, 3] = bad
    torch.save(state, weights)
    for made in folder.glob("synthetic-*"):  # the set is drawn again from the checkpoint
        made.unlink()
    with pytest.raises(InputError) as error:
        synthesize(data, original, config, 0, tmp_path, **QUIET)
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{weights}: its weights hold values that are not finite")
    assert "in means" in text and "to train the generator again" in text
    assert not list(folder.glob("synthetic-*.npz"))  # no set of black images was written


def test_a_finite_checkpoint_still_loads(tmp_path):
    model = torch.nn.Linear(3, 2)
    torch.save(model.state_dict(), tmp_path / "generator_epoch1.pt")
    other = torch.nn.Linear(3, 2)
    load_weights(other, tmp_path / "generator_epoch1.pt", "ddpm", "cpu")
    assert torch.equal(other.weight, model.weight)
    assert non_finite({"a": [torch.zeros(2), {"b": torch.tensor([1.0, float("nan")])}]}) == "a.1.b"
    assert non_finite({"rng": torch.zeros(4, dtype=torch.uint8), "steps": 3, "lr": float("nan")}) is None  # tensors


TINY = {"timesteps": 50, "beta_start": 2e-3, "beta_end": 0.4, "base_channels": 8, "channel_mults": [1], "lr": 2e-3,
        "batch_size": 8, "weight_decay": 0.01}  # fmt: skip


@pytest.mark.parametrize("where", ["model", "optimizer"])
def test_a_resume_pt_with_non_finite_weights_or_moments_is_refused_naming_it(tiny_dataset, tmp_path, where):
    data = tiny_dataset(n_per_class=10)
    folder = tmp_path / "client0"
    folder.mkdir()
    bad = torch.tensor([1.0, float("nan")])
    saved = {
        "model": {"w": bad if where == "model" else torch.ones(2)}, "ema": {},
        "optimizer": {"state": {0: {"exp_avg_sq": bad if where == "optimizer" else torch.ones(2)}}, "param_groups": []},
        "generator_state": torch.Generator().get_state(), "rng_state": torch.get_rng_state(), "epochs": 2,
        "seconds": 1.0,
    }  # fmt: skip
    torch.save(saved, folder / "resume.pt")
    config = FedssynConfig(generator="ddpm", rho=0.5, n_tilde=6, epochs=4, sample_steps=2, generator_config=TINY)
    with pytest.raises(InputError) as error:
        train_generator(data.x_train, data.y_train, 4, config, 0, folder, **QUIET)
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{folder / 'resume.pt'}: its weights hold values that are not finite")
    assert ("in model.w" if where == "model" else "in optimizer.state.0.exp_avg_sq") in text
    assert f"delete {folder / 'resume.pt'} to resume from the last epoch" in text


def test_a_cached_set_whose_header_claims_73_gib_is_refused_before_allocation(tmp_path):
    path = tmp_path / "synthetic-0123456789abcdef.npz"
    lying_npz(path, (10, 1, 28, 70_000_000), names=("x", "y"))  # 78 GB of float32 over 1,000 bytes
    before = peak_mib()
    with pytest.raises(InputError) as error:
        read_set(path, (1, 8, 8), 4, 6)
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{path}: damaged synthetic set (the header of array 'x' claims")
    assert "the file holds 1,000" in text and peak_mib() - before < 200


def test_a_cached_set_of_the_right_header_over_other_bytes_is_refused(tmp_path):
    path = tmp_path / "synthetic-0123456789abcdef.npz"
    lying_npz(path, (6, 1, 8, 8), names=("x", "y"))  # 1,536 bytes claimed (float32), 1,000 held
    with pytest.raises(InputError, match=r"damaged synthetic set \(the header of array 'x' claims float32"):
        read_set(path, (1, 8, 8), 4, 6)
    good = tmp_path / "synthetic-fedcba9876543210.npz"
    np.savez_compressed(good, x=np.zeros((6, 1, 8, 8), np.uint8), y=np.arange(6) % 4)
    x, y = read_set(good, (1, 8, 8), 4, 6)
    assert x.shape == (6, 1, 8, 8) and y.dtype == np.int64 and y.tolist() == [0, 1, 2, 3, 0, 1]
