"""Table 1, Fig. 3 and Fig. 5 gain a DDPM arm once its synthetic sets are in the store's generator cache (made on a GPU
lease, packed, unpacked here): left out with a note while they are not, run on the CPU without training a generator
once they are, and at cpu scale the very config whose sets ``scripts/gpu-campaign.sh start ddpm-sets`` makes."""

from __future__ import annotations

import json

import pytest

from figures import fedssyn_fl, flruns
from figures.__main__ import main
from fl.config import load_config
from fl.experiment import Experiment, missing_prepared
from fl.synthesis.pack import pack, unpack


def test_the_cpu_ddpm_arm_is_the_config_whose_sets_a_lease_makes(tmp_path):
    """The arm resolves to configs/fedssyn_fmnist_ddpm.toml (with the protocol's own estimator cadence), so its
    generator-cache keys are those of the sets that config's lease group brings back."""
    for seed in fedssyn_fl.FMNIST["cpu"].seeds:
        arm = flruns.config_of(fedssyn_fl.FMNIST["cpu"], fedssyn_fl.ddpm_arms("cpu")[0], seed, tmp_path)
        cache = f"method.cache_dir={json.dumps(str(tmp_path / flruns.SYNTHETIC))}"
        lease = load_config(fedssyn_fl.DDPM_CONFIG, [*fedssyn_fl.FMNIST["cpu"].overrides, f"train.seed={seed}", cache])
        assert arm.to_dict() == lease.to_dict()
    assert fedssyn_fl.ddpm_arms("paper") == []  # the paper scale's Fedssyn arm is DDPM already


@pytest.mark.slow
def test_the_ddpm_arm_joins_once_its_sets_are_unpacked(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SHUFFLEFL_RUNS", raising=False)
    root, lease = tmp_path / "root", tmp_path / "lease"
    assert main(["fig3", "--scale", "quick", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "note: D_i ∪ D̃_si (Fedssyn, DDPM): left out, seed 0: 5 of 5 clients' ddpm sets are not in" in out
    result = json.loads((root / "fig3/quick/result.json").read_text())
    assert fedssyn_fl.DDPM_LABEL not in [row[0] for row in result["rows"]] and len(result["notes"]) == 2
    assert not result["numbers"]["ddpm_arm"]
    assert main(["status", "fig3", "--scale", "quick", "--root", str(root)]) == 0
    assert "fig3 | D_i ∪ D̃_si (Fedssyn, DDPM): left out (seed 0: 5 of 5 clients'" in capsys.readouterr().out

    # the lease: tiny DDPMs trained in its own cache, packed; here: unpacked into the store's cache
    config = flruns.config_of(fedssyn_fl.FMNIST["quick"], fedssyn_fl.ddpm_arms("quick")[0], 0, lease)
    Experiment(config)
    archives, _ = pack(lease / flruns.SYNTHETIC, tmp_path / "out", generator="ddpm")
    unpack(archives, root / flruns.SYNTHETIC)
    here = flruns.config_of(fedssyn_fl.FMNIST["quick"], fedssyn_fl.ddpm_arms("quick")[0], 0, root)
    assert missing_prepared(here) == []

    assert main(["status", "fig3", "--scale", "quick", "--root", str(root)]) == 0
    assert "fig3 | D_i ∪ D̃_si (Fedssyn, DDPM), seed 0: not started" in capsys.readouterr().out
    assert main(["fig3", "table1", "fig5", "--scale", "quick", "--root", str(root), "--force"]) == 0
    assert "note:" not in capsys.readouterr().out
    fig3 = json.loads((root / "fig3/quick/result.json").read_text())
    assert fig3["rows"][-1][0] == fedssyn_fl.DDPM_LABEL and fig3["numbers"]["ddpm_arm"] and not fig3["notes"]
    assert "With the paper's generator (per-client DDPMs)" in fig3["claim"]["text"]
    table1 = json.loads((root / "table1/quick/result.json").read_text())
    assert "speed-up (DDPM)" in table1["headers"] and table1["numbers"]["ddpm_arms"] == ["fedavg", "scaffold"]
    assert all(len(row) == len(table1["headers"]) for row in table1["rows"])
    fig5 = json.loads((root / "fig5/quick/result.json").read_text())
    assert any(row[0] == fedssyn_fl.DDPM_LABEL for row in fig5["rows"])
    # FedAvg's DDPM run is one run for all three artefacts, and no generator was trained here: the DDPM folders are
    # the unpacked ones, sets and training info without weights (a run needing a generator would have failed)
    assert len(set(fig3["runs"]) & set(table1["runs"]) & set(fig5["runs"])) == 3
    folders = [f for f in (root / flruns.SYNTHETIC).glob("client*")
               if json.loads((f / "key.json").read_text())["generator"]["config"]["generator"] == "ddpm"]  # fmt: skip
    assert len(folders) == 5
    assert all((f / "packed.json").exists() and not list(f.glob("generator_epoch*.pt")) for f in folders)


def test_a_ledger_without_the_ddpm_runs_names_them(tmp_path, monkeypatch):
    """On a run ledger (read only) the arm is left out when its runs are not there, without looking for sets."""
    monkeypatch.delenv("SHUFFLEFL_RUNS", raising=False)
    (tmp_path / flruns.LEDGER_MARK).write_text("")
    monkeypatch.setattr(flruns, "missing_prepared", lambda config: pytest.fail("a ledger looked for sets"))
    why = flruns.absent_data(fedssyn_fl.FMNIST["cpu"], fedssyn_fl.ddpm_arms("cpu")[0], tmp_path)
    assert why == "not run (its sets need a GPU): no run in the ledger"
