"""Fedssyn's protocol (Algorithm I) with a stand-in generator: class counts (uniform under DP, independent of the
private labels), the server's shuffle, caching (keys with and without DP), checkpoints per epoch, p = ñ/(n_i+ñ),
and one-line errors through python -m fl.run."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

import fl.synthesis.fedssyn as fedssyn
from fl.federation import assemble, split_clients
from fl.synthesis.fedssyn import FedssynConfig, class_counts, synthesize, synthetic_labels
from theory.errors import InputError


@pytest.mark.parametrize("n_tilde", [0, 1, 7, 100, 1001])
def test_class_counts_sum_to_n_tilde_and_follow_frequencies(n_tilde):
    labels = np.array([0] * 50 + [1] * 30 + [3] * 20)
    counts = class_counts(labels, n_tilde, 5)
    assert counts.sum() == n_tilde and counts[2] == 0 and counts[4] == 0
    assert np.all(np.abs(counts - n_tilde * np.array([0.5, 0.3, 0, 0.2, 0])) < 1)


def test_protocol_counts_shuffle_and_p(fake_generator, tmp_path, tiny_dataset):
    data = tiny_dataset()
    rng = np.random.default_rng(0)
    train, val, original = split_clients(data, "split-by-class", 4, rng, val_fraction=0.0)
    config = FedssynConfig(generator="ddpm", rho=0.5, n_tilde=12, epochs=3)
    sets, infos = synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    for (x, y), info, index in zip(sets, infos, original):
        assert x.shape == (12, 1, 8, 8) and x.dtype == np.uint8 and len(y) == 12
        assert info["subset"] == round(0.5 * len(index))
        subset_counts = np.array(info["class_counts_subset"])
        assert np.array_equal(np.bincount(y, minlength=4), class_counts(np.repeat(np.arange(4), subset_counts), 12, 4))
    clients = assemble(data, train, val, original, rng, synthetic=sets, synthetic_mode="shuffle")
    n_real = len(data.y_train)
    pool = torch.cat(clients.received)
    assert sorted(pool.tolist()) == list(range(n_real, n_real + 48))  # every synthetic sample dealt exactly once
    assert [len(r) for r in clients.received] == [12, 12, 12, 12]  # equal parts
    # Split by class: after the server's shuffle a client's synthetic share holds other classes too.
    labels = [set(clients.y[r].tolist()) for r in clients.received]
    assert any(len(s) > 1 for s in labels)
    p = [len(r) / len(t) for r, t in zip(clients.received, clients.train)]
    np.testing.assert_allclose(p, [12 / (30 + 12)] * 4)


@pytest.mark.parametrize("n_tilde", [0, 1, 7, 50, 1001])
def test_synthetic_labels_follow_the_subset_without_dp_and_are_uniform_under_dp(n_tilde):
    subset_counts = [20, 20, 10, 0]
    plain = synthetic_labels(FedssynConfig(n_tilde=n_tilde), subset_counts, 4)
    expected = class_counts(np.repeat(np.arange(4), subset_counts), n_tilde, 4)
    assert np.array_equal(np.bincount(plain, minlength=4), expected)
    private = synthetic_labels(FedssynConfig(n_tilde=n_tilde, dp=True), subset_counts, 4)
    assert np.array_equal(private, np.sort(private)) and len(private) == n_tilde
    counts = np.bincount(private, minlength=4)
    assert counts.max() - counts.min() <= (n_tilde % 4 > 0)
    # Under DP the counts do not depend on the subset's at all (even a class the client does not have).
    assert np.array_equal(private, synthetic_labels(FedssynConfig(n_tilde=n_tilde, dp=True), [0, 0, 0, 7], 4))


@pytest.mark.parametrize("dp", [True, False])
def test_neighbouring_datasets_release_the_same_labels_under_dp(fake_generator, tmp_path, tiny_dataset, dp):
    """Two datasets differing in one label (sample 3: class 0 -> class 3), same seed, ρ = 1 so that the changed
    sample is in the generator's subset. Under DP the synthetic labels sent (and their class counts) are identical
    and uniform: nothing released besides the DP-trained generator depends on the private labels. Without DP
    they follow the subset's counts, (20, 20, 10, 0) against (19, 20, 10, 1), and differ: the test can fail."""
    data = tiny_dataset(n_per_class=20)
    neighbour = data.y_train.copy()
    neighbour[3] = 3
    original = [np.arange(50)]
    config = FedssynConfig(n_tilde=50, epochs=1, rho=1.0, dp=dp)
    released = []
    for name, y in (("a", data.y_train), ("b", neighbour)):
        (sent,), (info,) = synthesize(dataclasses.replace(data, y_train=y), original, config, 0, tmp_path / name, print)
        released.append((sent[1], info["class_counts_synthetic"]))
    (labels_a, counts_a), (labels_b, counts_b) = released
    if dp:
        assert np.array_equal(labels_a, labels_b) and counts_a == counts_b == [13, 13, 12, 12]
    else:
        assert counts_a == [20, 20, 10, 0] and counts_b == [19, 20, 10, 1]


def test_cache_keys_accountant_and_delta_out_dp_label_rules_in():
    base = FedssynConfig(dp=True)
    for other in (FedssynConfig(dp=True, dp_accountant="rdp"), FedssynConfig(dp=True, dp_delta=1e-3)):
        assert other.training_key() == base.training_key() and other.sampling_key() == base.sampling_key()
    assert "dp_accountant" not in base.training_key()
    # Keys as before for everything whose training did not change; a DP GAN's names its uniform fake labels.
    assert base.training_key() == {
        "generator": "ddpm", "rho": 0.75, "epochs": 5, "generator_config": {}, "dp": True,
        "dp_noise_multiplier": 1.906, "dp_max_grad_norm": 1.0,
    }  # fmt: skip
    assert FedssynConfig(generator="gan").training_key() == {**FedssynConfig().training_key(), "generator": "gan"}
    gan = FedssynConfig(generator="gan", dp=True).training_key()
    assert gan == {**base.training_key(), "generator": "gan", "gan_fake_labels": "uniform"}
    assert FedssynConfig().sampling_key() == {"n_tilde": 500, "sample_epoch": 5, "sample_steps": 50}  # unchanged
    assert base.sampling_key() == {**FedssynConfig().sampling_key(), "labels": "uniform"}


def test_own_mode_keeps_each_clients_set(fake_generator, tmp_path, tiny_dataset):
    data = tiny_dataset()
    rng = np.random.default_rng(0)
    train, val, original = split_clients(data, "split-by-class", 4, rng, val_fraction=0.0)
    sets, _ = synthesize(data, original, FedssynConfig(n_tilde=5), 0, tmp_path, log=print)
    clients = assemble(data, train, val, original, rng, synthetic=sets, synthetic_mode="own")
    for i, received in enumerate(clients.received):
        assert set(clients.y[received].tolist()) == {int(data.y_train[original[i][0]])}


def test_cache_and_epoch_checkpoints(fake_generator, tmp_path, tiny_dataset):
    data = tiny_dataset()
    _, _, original = split_clients(data, "iid", 2, np.random.default_rng(0), val_fraction=0.0)
    config = FedssynConfig(n_tilde=6, epochs=2)
    first, _ = synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    assert fake_generator.fits == 2
    folders = sorted(tmp_path.iterdir())
    assert len(folders) == 2
    for folder in folders:
        names = {f.name for f in folder.iterdir()}
        assert {"generator_epoch1.pt", "generator_epoch2.pt", "generator.json"} <= names
        assert sum(n.startswith("synthetic-") and n.endswith(".npz") for n in names) == 1
        torch.load(folder / "generator_epoch2.pt", weights_only=True)
    again, infos = synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    assert fake_generator.fits == 2 and all(info["cached"] for info in infos)
    for (x1, y1), (x2, y2) in zip(first, again):
        assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    # A different ñ or sample epoch is sampled from the saved checkpoints, not retrained.
    more, _ = synthesize(data, original, FedssynConfig(n_tilde=7, epochs=2), 0, tmp_path, print)
    early, _ = synthesize(
        data,
        original,
        FedssynConfig(n_tilde=6, epochs=2, sample_epoch=1),
        0,
        tmp_path,
        print,
    )
    assert fake_generator.fits == 2 and [len(s[1]) for s in more] == [7, 7] and [len(s[1]) for s in early] == [6, 6]
    assert all(
        sum(n.name.startswith("synthetic-") and n.name.endswith(".npz") for n in f.iterdir()) == 3 for f in folders
    )
    # More training epochs, or another ρ, is another generator.
    synthesize(data, original, FedssynConfig(n_tilde=6, epochs=3), 0, tmp_path, print)
    assert fake_generator.fits == 4


def test_interrupted_generator_training_resumes_from_last_epoch(fake_generator, tmp_path, monkeypatch, tiny_dataset):
    data = tiny_dataset()
    _, _, original = split_clients(data, "iid", 1, np.random.default_rng(0), val_fraction=0.0)
    config = FedssynConfig(n_tilde=4, epochs=3)
    real_fit = fake_generator.fit

    def interrupted(self, x, y, epochs, generator, on_epoch=None, privacy=None):
        def stop_after_first(epoch, fitted):
            on_epoch(epoch, fitted)
            raise KeyboardInterrupt

        return real_fit(self, x, y, epochs, generator, stop_after_first, privacy)

    monkeypatch.setattr(fake_generator, "fit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    monkeypatch.setattr(fake_generator, "fit", real_fit)
    (folder,) = tmp_path.iterdir()
    assert (folder / "generator_epoch1.pt").exists() and not (folder / "generator.json").exists()
    sets, infos = synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    assert fake_generator.epochs_asked == [3, 2]  # the second call trains only the two remaining epochs
    assert len(sets[0][1]) == 4 and len(infos[0]["losses"]) == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rho": 0.0},
        {"rho": 1.5},
        {"n_tilde": -1},
        {"generator": "flow"},
        {"epochs": 0},
        {"sample_steps": -1},
        {"sample_epoch": 6, "epochs": 5},
        {"sample_epoch": -1},
        {"dp": True, "dp_noise_multiplier": 0.0},
        {"dp": True, "dp_delta": 1.0},
        {"dp_accountant": "gdp"},
        {"dp": True, "dp_accountant": "RDP"},
    ],
)
def test_bad_protocol_config_is_input_error(kwargs):
    with pytest.raises(InputError):
        FedssynConfig(**kwargs).check()


def test_unknown_accountant_is_one_line_naming_the_key():
    with pytest.raises(InputError, match=r"^config method\.dp_accountant: must be one of prv, rdp$"):
        FedssynConfig(dp=True, dp_accountant="moments").check()


@pytest.mark.parametrize(
    "override, message",
    [
        ("synthetic.rho=0", "method.rho"),  # an earlier version's [synthetic] keys: errors name the new key
        ("synthetic.rho=1.5", "method.rho"),
        ("synthetic.n_tilde=-5", "method.n_tilde"),
        ("synthetic.generator='flow'", "method.generator"),
        ("synthetic.method='magic'", "method.name"),
        ("synthetic.dp='yes'", "method.dp"),
        ("synthetic.sample_epoch=9", "method.sample_epoch"),
        ("method.rho=0", "method.rho"),
        ("method.name='magic'", "method.name"),
        ("method.no_such_key=1", "method.no_such_key"),
        ("method.dp_accountant='moments'", "method.dp_accountant"),
    ],
)
def test_bad_synthetic_config_is_one_line_exit_2(override, message, tmp_path, capsys):
    from fl.run import main

    assert main(["--set", override, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m fl.run: error:") and err.count("\n") == 1 and message in err


def test_unknown_generator_config_key_is_input_error():
    with pytest.raises(InputError, match="generator_config"):
        fedssyn.build_generator("ddpm", (1, 28, 28), 10, {"no_such_key": 1})


def test_fl_run_with_synthetic_data_end_to_end(fake_generator, tmp_path, monkeypatch, tiny_dataset):
    """python -m fl.run on a tiny CIFAR-shaped dataset with the stand-in generator: summary reports the data
    sent once and the realised p."""
    import fl.experiment as experiment_module
    import fl.run as run_module

    data = tiny_dataset(n_per_class=20, n_classes=10)
    monkeypatch.setattr(experiment_module, "load", lambda name, root=None: data)
    out = tmp_path / "run"
    args = [
        "--set", "data.partition='split-by-class'", "--set", "data.clients=10", "--set", "model.name='mlp'",
        "--set", "train.rounds=2", "--set", "train.device='cpu'", "--set", "synthetic.method='fedssyn'",
        "--set", "synthetic.n_tilde=6", "--set", "synthetic.epochs=1",
        "--set", f"synthetic.cache_dir='{tmp_path / 'cache'}'", "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert run_module.main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["synthetic_numbers_sent_once"] == 10 * 6 * 64
    n_i = 18  # 20 per class, 10% validation
    np.testing.assert_allclose(summary["p_realised"], [6 / (n_i + 6)] * 10)
    assert (out / "synthetic_samples.png").stat().st_size > 0


@pytest.mark.parametrize("method", ["fedssyn", "own", "central-real", "central-synthetic"])
def test_fedssyn_methods_give_the_runs_of_before_the_move(fake_generator, tmp_path, monkeypatch, tiny_dataset, method):
    """An earlier config ([synthetic] method = ...) through the method plug-in gives, bit for bit, the server model
    of the code before the move: the federation assembled by hand exactly as Experiment used to (partition, the
    generators, assemble with mode "shuffle" for fedssyn and "own" otherwise, one client holding the union for the
    centralised baselines) and the round loop without a method."""
    import fl.experiment as experiment_module
    from fl.clients import LocalConfig
    from fl.config import build_algorithm, load_config
    from fl.engine import init_state, run_round
    from fl.federation import assemble, split_clients
    from fl.flat import FlatModel
    from fl.models import build_model

    data = tiny_dataset(n_per_class=20, n_classes=10)
    monkeypatch.setattr(experiment_module, "load", lambda name, root=None: data)
    overrides = [
        "data.partition='shards'", "data.clients=5", "model.name='mlp'", "train.rounds=2",
        "train.device='cpu'", f"synthetic.method='{method}'", "synthetic.n_tilde=6", "synthetic.epochs=1",
        f"synthetic.cache_dir='{tmp_path / 'cache'}'",
    ]  # fmt: skip
    config = load_config(None, overrides)
    exp = experiment_module.Experiment(config)
    state = exp.fresh_state(0.05)
    for _ in range(2):
        state, _ = exp.run_round(state)

    seed = config.train.seed
    rng = np.random.default_rng([seed, 1])
    train, val, original = split_clients(data, "shards", 5, rng, 0.0, 0.1, {"classes_per_client": 2})
    synthetic = None
    if method != "central-real":
        assert data.n_classes == 10
        synthetic, _ = fedssyn.synthesize(
            data, original, exp.method.protocol(), seed, tmp_path / "cache", log=lambda s: None
        )
    if method.startswith("central"):
        everything = np.concatenate(original)
        real = np.zeros(0, np.int64) if method == "central-synthetic" else everything
        train, val, original = [real], [np.concatenate(val)], [everything]
        if synthetic:
            synthetic = [(np.concatenate([s[0] for s in synthetic]), np.concatenate([s[1] for s in synthetic]))]
    mode = "shuffle" if method == "fedssyn" else "own"
    clients = assemble(data, train, val, original, rng, 0.0, synthetic, mode, "cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        flat = FlatModel(build_model("mlp", data.shape, 10))
    algorithm = build_algorithm({"name": "fedavg"})
    old = init_state(flat, algorithm, clients.n_clients, 0.05)
    for _ in range(2):
        old, _ = run_round(old, flat, algorithm, clients, LocalConfig(1, 64), seed)
    assert torch.equal(state.x, old.x)


def test_min_steps_trains_each_client_at_least_that_many_steps_and_samples_its_last_epoch(
    fake_generator, tmp_path, tiny_dataset
):
    """min_steps = 12 with batches of 4: a client with a ρ-subset of s images trains max(2, ⌈12 / ⌈s/4⌉⌉) epochs
    and samples from its own last one; the generators are others than those of the plain 2 epochs."""
    data = tiny_dataset()
    _, _, original = split_clients(
        data, "dirichlet", 2, np.random.default_rng(0), val_fraction=0.0, partition_params={"alpha": 0.3}
    )
    config = FedssynConfig(n_tilde=6, epochs=2, min_steps=12)
    sets, infos = synthesize(data, original, config, 0, tmp_path, log=lambda s: None)
    subsets = [max(1, round(0.75 * len(index))) for index in original]
    expected = [max(2, -(-12 // -(-s // 4))) for s in subsets]
    assert fake_generator.epochs_asked == expected and [info["epochs"] for info in infos] == expected
    assert [len(s[1]) for s in sets] == [6, 6]
    kept = {folder: sorted(f.name for f in folder.glob("generator_epoch*.pt")) for folder in tmp_path.glob("client*")}
    assert sorted(kept.values()) == sorted([f"generator_epoch{e}.pt"] for e in expected)  # the last epoch's alone
    synthesize(data, original, FedssynConfig(n_tilde=6, epochs=2), 0, tmp_path, print)
    assert fake_generator.fits == 4  # min_steps is part of the generator's key
    plain = [sorted(f.name for f in folder.glob("generator_epoch*.pt")) for folder in tmp_path.glob("client*")
             if folder not in kept]  # fmt: skip
    assert plain == [["generator_epoch1.pt", "generator_epoch2.pt"]] * 2  # without min_steps: every epoch's


@pytest.mark.parametrize(
    "kwargs", [{"min_steps": -1}, {"min_steps": 10, "sample_epoch": 1}, {"min_steps": 10, "dp": True}]
)
def test_min_steps_refuses_what_it_cannot_mean(kwargs):
    with pytest.raises(InputError, match="min_steps"):
        FedssynConfig(epochs=2, **kwargs).check()


@pytest.mark.parametrize("min_steps, device", [(0, "cpu"), (12, "cpu")])  # CUDA: tests/fl/test_gpu.py
def test_a_stopped_ddpm_training_resumes_bit_for_bit(tmp_path, monkeypatch, tiny_dataset, min_steps, device):
    """A real (tiny) DDPM stopped after its second epoch's checkpoint and trained again gives the weights, EMA and
    synthetic set of an unstopped one exactly (resume.pt: its AdamW moments and draws); resume.pt is gone once done,
    and with min_steps only the last epoch's checkpoint is left."""
    from fl.synthesis.generators.ddpm import DDPM

    data = tiny_dataset(n_per_class=10)
    _, _, original = split_clients(data, "iid", 1, np.random.default_rng(0), val_fraction=0.0)
    tiny = {"timesteps": 50, "beta_start": 2e-3, "beta_end": 0.4, "base_channels": 8, "channel_mults": [1],
            "lr": 2e-3, "batch_size": 8, "weight_decay": 0.01}  # fmt: skip
    config = FedssynConfig(generator="ddpm", rho=0.5, n_tilde=6, epochs=4, sample_steps=2, generator_config=tiny,
                           min_steps=min_steps)  # fmt: skip
    quiet = {"log": lambda line: None, "device": device}
    whole, _ = synthesize(data, original, config, 0, tmp_path / "whole", **quiet)
    real_fit = DDPM.fit

    def stopped(self, x, y, epochs, generator, on_epoch=None, privacy=None):
        def stop_after_second(epoch, fitted):
            on_epoch(epoch, fitted)
            if epoch == 2:
                raise KeyboardInterrupt

        return real_fit(self, x, y, epochs, generator, stop_after_second, privacy)

    monkeypatch.setattr(DDPM, "fit", stopped)
    with pytest.raises(KeyboardInterrupt):
        synthesize(data, original, config, 0, tmp_path / "cut", **quiet)
    monkeypatch.setattr(DDPM, "fit", real_fit)
    (folder,) = (tmp_path / "cut").iterdir()
    assert (folder / "resume.pt").exists() and json.loads((folder / "progress.json").read_text())["epochs"] == 2
    shutil.copytree(tmp_path / "cut", tmp_path / "torn")
    (tmp_path / "torn" / folder.name / "resume.pt").write_bytes(b"not a torch file")
    with pytest.raises(InputError, match=r"resume\.pt.*delete .*resume\.pt to resume from the last epoch"):
        synthesize(data, original, config, 0, tmp_path / "torn", **quiet)
    lines = []
    resumed, _ = synthesize(data, original, config, 0, tmp_path / "cut",
                            lines.append, device=device)  # fmt: skip
    assert any("resuming after epoch 2 (its optimiser and draws as saved)" in line for line in lines)
    np.testing.assert_array_equal(resumed[0][0], whole[0][0])
    (other,) = (tmp_path / "whole").iterdir()
    last = max(int(p.stem.removeprefix("generator_epoch")) for p in folder.glob("generator_epoch*.pt"))
    mine = torch.load(folder / f"generator_epoch{last}.pt", weights_only=True)
    theirs = torch.load(other / f"generator_epoch{last}.pt", weights_only=True)
    for part in ("model", "ema"):
        for key in theirs[part]:
            assert torch.equal(mine[part][key], theirs[part][key]), (part, key)
    assert mine["steps_done"] == theirs["steps_done"] and not (folder / "resume.pt").exists()
    kept = sorted(p.name for p in folder.glob("generator_epoch*.pt"))
    assert kept == ([f"generator_epoch{last}.pt"] if min_steps else [f"generator_epoch{k}.pt" for k in range(1, 5)])
