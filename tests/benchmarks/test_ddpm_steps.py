"""benchmarks/ddpm_steps.py: one client's DDPM at ``--min-steps`` steps, its set's quality beside another set of the
same client and seed; bad input refused in one line before any work or file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.test_bench_bad_inputs import load_bench
from tests.fl.synthesis.test_pack import TINY_DDPM


def bench():
    return load_bench("ddpm_steps")


def tiny(root: Path) -> list[str]:
    settings = [
        "data.dataset='cifar10'", f"data.data_root='{root}'", "data.partition='dirichlet'", "data.alpha=0.5",
        "data.clients=3", "data.min_size=2", "method.n_tilde=6", "method.sample_steps=2",
        f"method.generator_config={TINY_DDPM}",
    ]  # fmt: skip
    return [arg for setting in settings for arg in ("--set", setting)]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--min-steps", "0"], "--min-steps"),
        (["--client", "x"], "--client"),
        (["--config", "no/such.toml"], "no such file"),
        (["--compare", "no/such/cache"], "no such folder"),
    ],
)
def test_bad_input_is_one_line_before_any_file(argv, says, tmp_path, capsys):
    out = tmp_path / "out" / "steps.json"
    with pytest.raises(SystemExit) as done:
        bench().main([*argv, "--cache", str(tmp_path / "cache"), "--out", str(out)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and says in err, err
    assert not out.parent.exists() and not (tmp_path / "cache").exists()


def test_the_smallest_clients_ddpm_at_min_steps_beside_its_other_set(cifar_root, tmp_path, capsys):
    """Trained at 3 steps, then compared with the same client's set at 1 epoch (another cache): both measured."""
    module = bench()
    out, cache, other = tmp_path / "steps.json", tmp_path / "cache", tmp_path / "other"
    args = [*tiny(cifar_root), "--min-steps", "3", "--threads", "1"]
    assert module.main([*args, "--cache", str(other), "--out", str(tmp_path / "first.json")]) == 0
    first = json.loads((tmp_path / "first.json").read_text())
    assert set(module.OWN_KEYS) <= set(first)  # what tells its own earlier JSON (replaced) from a user's (refused)
    assert (
        module.main([*args, "--min-steps", "5", "--cache", str(cache), "--compare", str(other), "--out", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    sizes = result["client_sizes"]
    assert result["client"] == sizes.index(min(sizes)) == first["client"]
    assert result["trained"]["images"] == 6 and 0 <= result["trained"]["noise_fraction"] <= 1
    assert result["epochs"] >= first["epochs"] and not result["cached"]
    [compared] = result["compared"]
    assert compared["images"] == 6 and compared["set"]["n_tilde"] == 6
    assert compared["noise_fraction"] == first["trained"]["noise_fraction"]
    assert compared["label_agreement"] == first["trained"]["label_agreement"]
    with pytest.raises(SystemExit) as done:  # a client the config does not have: one line
        module.main([*args, "--client", "7", "--cache", str(cache), "--out", str(out)])
    assert done.value.code == 2 and "--client 7: the config has clients 0-2" in capsys.readouterr().err
