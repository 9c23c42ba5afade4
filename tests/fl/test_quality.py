"""fl.quality: the quality report of a synthetic set against real data (total variation by hand, the noise share,
the classifiers' numbers on a tiny problem where the answer is known, the sets found in a generator cache), and the
ledger's check of a stored report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fl import provenance, quality
from fl.synthesis.fedssyn import KEY_FILE
from lab.records.check import quality_entries
from theory.errors import InputError


def test_total_variation_by_hand():
    flat = np.zeros((1, 1, 3, 3))
    stripes = np.array([[[[0, 1, 0], [0, 1, 0], [0, 1, 0]]]], dtype=float)  # horizontal diffs all 1, vertical 0
    assert quality.total_variation(flat) == pytest.approx([0.0])
    assert quality.total_variation(stripes) == pytest.approx([1.0])  # mean |diff| over 3x2 horizontal pairs, 0 vert
    real = np.random.default_rng(0).uniform(0.4, 0.6, (200, 1, 8, 8)) * 0 + np.linspace(0, 1, 8)  # smooth ramps
    noise = np.random.default_rng(1).uniform(0, 1, (10, 1, 8, 8))
    threshold = quality.noise_threshold(real)
    assert quality.noise_fraction(noise, threshold) == 1.0 and quality.noise_fraction(real, threshold) == 0.0


def blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two classes of 16x16 images told apart by which half is bright: any classifier learns them."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.uniform(0, 60, (n, 1, 16, 16))
    for i, label in enumerate(y):
        x[i, 0, :, 8 * label : 8 * label + 8] += 180
    return x.astype(np.uint8), y


def test_the_report_on_a_problem_with_known_answers():
    x, y = blobs(600, 0)
    xt, yt = blobs(200, 1)
    good = [blobs(300, 2), blobs(300, 3)]
    bad_x, bad_y = blobs(600, 4)
    swapped = [(bad_x, 1 - bad_y)]  # every label wrong
    report = quality.report(good, x, y, xt, yt, 2, seed=0, epochs=3)
    assert report["images"] == 600 and report["label_agreement"] > 0.95
    assert report["synthetic_trained_accuracy"] > 0.95 and report["real_trained_accuracy"] > 0.95
    assert report["noise_fraction"] <= 0.01 and len(report["noise_by_client"]) == 2
    assert quality.report(good, x, y, xt, yt, 2, seed=0, epochs=3) == report  # repeatable from its seed
    wrong = quality.report(swapped, x, y, xt, yt, 2, seed=0, epochs=3)
    assert wrong["label_agreement"] < 0.05 and wrong["synthetic_trained_accuracy"] < 0.05
    with pytest.raises(InputError, match="no synthetic images"):
        quality.report([], x, y, xt, yt, 2, seed=0)


def fake_cache(root, seed: int, clients: int = 2):
    for client in range(clients):
        folder = root / f"client{client}-{seed}{client}"
        folder.mkdir(parents=True)
        key = {"generator": {"config": {"generator": "ddpm"}, "seed": seed, "client": client},
               "sets": {"synthetic-a.npz": {"n_tilde": 4}}}  # fmt: skip
        (folder / KEY_FILE).write_text(json.dumps(key))
        x, y = blobs(4, client)
        np.savez_compressed(folder / "synthetic-a.npz", x=x, y=y)
    return root


def test_sets_are_found_by_generator_and_seed_in_client_order(tmp_path):
    cache = fake_cache(tmp_path / "cache", 0)
    fake_cache(tmp_path / "other", 1)
    for path in (tmp_path / "other").iterdir():
        path.rename(cache / path.name)
    found = quality.find_sets(cache, "ddpm", 0)
    assert [c for c, _ in found] == [0, 1] and all(p.parent.name.startswith(f"client{c}-0") for c, p in found)
    sets = [quality.read_set(p) for _, p in found]
    assert provenance.synthetic_hash(sets) == provenance.synthetic_hash([blobs(4, 0), blobs(4, 1)])
    with pytest.raises(InputError, match="no gan sets for seed 0"):
        quality.find_sets(cache, "gan", 0)
    with pytest.raises(InputError, match="no such generator cache"):
        quality.find_sets(tmp_path / "nowhere", "ddpm", 0)


def test_sets_are_chosen_by_the_steps_their_generators_trained(tmp_path):
    """A cache holding a seed's sets at 20 epochs and at min_steps = 2000 (what a lease and a CPU made): without
    --min-steps a client has two sets (an error that says how to choose); with it, the chosen ones, and the report
    names their min_steps."""
    cache = fake_cache(tmp_path / "cache", 0)
    for folder in list(cache.iterdir()):
        twin = cache / folder.name.replace("-0", "-9")
        twin.mkdir()
        key = json.loads((folder / KEY_FILE).read_text())
        key["generator"]["config"]["min_steps"] = 2000
        (twin / KEY_FILE).write_text(json.dumps(key))
        (twin / "synthetic-a.npz").write_bytes((folder / "synthetic-a.npz").read_bytes())
    with pytest.raises(InputError, match="several ddpm sets for seed 0; choose by --min-steps"):
        quality.find_sets(cache, "ddpm", 0)
    stepped = quality.find_sets(cache, "ddpm", 0, 2000)
    assert [p.parent.name[:9] for _, p in stepped] == ["client0-9", "client1-9"] and quality.trained_steps(
        stepped
    ) == 2000
    plain = quality.find_sets(cache, "ddpm", 0, 0)
    assert [p.parent.name[:9] for _, p in plain] == ["client0-0", "client1-0"] and quality.trained_steps(plain) == 0
    with pytest.raises(InputError, match="no ddpm sets for seed 0 at min_steps = 500"):
        quality.find_sets(cache, "ddpm", 0, 500)
    with pytest.raises(InputError, match="different min_steps"):
        quality.trained_steps([plain[0], stepped[1]])
    assert quality.report_name({"generator": "ddpm", "dataset": "fmnist", "seed": 1, "min_steps": 2000}) == (
        "ddpm-fmnist-seed1-steps2000.json"
    )
    assert quality.report_name({"generator": "ddpm", "dataset": "fmnist", "seed": 1}) == "ddpm-fmnist-seed1.json"


def test_bad_input_is_one_line(tmp_path, capsys):
    assert quality.main([str(tmp_path / "nowhere"), "--seed", "0"]) == 2
    with pytest.raises(SystemExit):
        quality.main([str(tmp_path), "--seed", "-1"])
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no such generator cache" in err


def good_report() -> dict:
    return {
        "generator": "ddpm", "seed": 0, "dataset": "fmnist", "synthetic_sha256": "f746b5ec63af", "images": 10,
        "noise_fraction": 0.3, "noise_by_client": [0.1, 0.5], "label_agreement": 0.4,
        "synthetic_trained_accuracy": 0.67, "real_trained_accuracy": 0.8, "code_version": "x",
    }  # fmt: skip


@pytest.mark.parametrize(
    "name, content, said",
    [
        ("ddpm-fmnist-seed0.json", None, None),
        ("ddpm-fmnist-seed1.json", None, "names another report"),
        ("ddpm-fmnist-seed0.json", '{"seed": 0', "not JSON"),
        ("ddpm-fmnist-seed0.json", json.dumps(good_report() | {"noise_fraction": 1.5}), "outside [0, 1]"),
        ("ddpm-fmnist-seed0.json", json.dumps(good_report() | {"label_agreement": "high"}), "label_agreement"),
        ("ddpm-fmnist-seed0-steps2000.json", json.dumps(good_report() | {"min_steps": 2000}), None),
        ("ddpm-fmnist-seed0.json", json.dumps(good_report() | {"min_steps": 2000}), "names another report"),
        ("ddpm-fmnist-seed0-steps2000.json", None, "names another report"),
        ("ddpm-fmnist-seed0.json", json.dumps(good_report() | {"min_steps": "many"}), "min_steps"),
        ("notes.txt", "x", "stray file"),
    ],
)  # fmt: skip
def test_the_ledger_check_catches_a_damaged_quality_report(tmp_path, name, content, said):
    folder = tmp_path / "quality"
    folder.mkdir()
    (folder / name).write_text(json.dumps(good_report()) if content is None else content)
    flagged = []
    quality_entries(folder, lambda path, what: flagged.append(f"{path.name}: {what}"))
    assert (said is None and not flagged) or (len(flagged) == 1 and said in flagged[0])


def test_a_classifier_at_chance_is_named_a_collapse_and_summaries_leave_it_out():
    assert quality.chance("fmnist") == quality.chance("fmnist-sub3000x2000") == 0.1
    assert quality.chance("cifar100-sub500x100") == 0.01 and quality.chance("my-own-set") is None

    def report(accuracy: float, dataset: str = "fmnist-sub3000x2000") -> dict:
        return {"dataset": dataset, "synthetic_trained_accuracy": accuracy}

    assert quality.collapsed(report(0.1)) and quality.collapsed(report(0.109))  # within one point of chance
    assert not quality.collapsed(report(0.111)) and not quality.collapsed(report(0.05, "my-own-set"))
    assert quality.synthetic_trained([report(0.5), report(0.1), report(0.3)]) == ([0.5, 0.3], 1)
    assert quality.synthetic_trained([]) == ([], 0)
