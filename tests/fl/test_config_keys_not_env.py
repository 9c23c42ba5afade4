"""Issue #67: the environment selects nothing a run computes; its config does. DynaFed's matching path is the method
key ``method.matching`` and the batched steps' graph replay the speed-only key ``train.graphs``; the environment
variables that chose them before are refused in one line. Adding the keys changes no earlier run's identity: the
checkpoint's config key (fl.checkpoints.config_key), the store's run key (lab.records.keys.run_key) and DynaFed's
progress key are those the code computed before the keys existed (hard-coded below). Config notes go where the
caller says."""

from __future__ import annotations

import glob
import hashlib
import json

import pytest
import torch

from fl.config import load_config
from fl.graphs import GRAPHS_ENV, graph_kind
from fl.methods.dynafed import MATCHING_ENV, DynaFed, Progress
from lab.records.keys import run_key
from theory.errors import InputError

DYNAFED = "configs/paper/dynafed_fmnist_a001_dynafed.toml"
OVERRIDES = ["method.precision=bf16", "method.iterations=7", "train.workers=3"]

# (config key, run key) of every config in configs/ as the code before issue #67 computed them
BEFORE = {
    "configs/check_fmnist_dir01_p0.toml": ("574aedddca34", "8c6a28143ee7"),
    "configs/check_fmnist_dir01_p01.toml": ("29beecd20673", "dceecce5ac02"),
    "configs/fedssyn_fmnist_ddpm.toml": ("b8c1d1fcfa8f", "df1943f13da9"),
    "configs/fedssyn_fmnist_quick.toml": ("36f9d06aa3f5", "a15b2b6b74ee"),
    "configs/fedssyn_fmnist_vae.toml": ("d817b5f1f1fc", "be82276a0acd"),
    "configs/fedssyn_fmnist_vae_dp.toml": ("f06c8f83abb1", "8f6ff1945c39"),
    "configs/fedssyn_fmnist_vae_own.toml": ("410432f380a0", "108c3ff249c9"),
    "configs/fedssyn_mnist_vae.toml": ("036e815f6eab", "dc649a35b397"),
    "configs/fedssyn_mnist_vae_dp.toml": ("c93a59cac18e", "2fe87d870709"),
    "configs/fmnist_quick.toml": ("bf6087f63607", "7fd24c1cef3e"),
    "configs/gpu/fedssyn_fmnist_ddpm.toml": ("5fe9ee4799b5", "f285e09a86d4"),
    "configs/hfmds_fmnist_dir001.toml": ("33d43f30a4c3", "1f399d777b56"),
    "configs/hfmds_fmnist_dir001_fmds.toml": ("e41f31720d7a", "f7e23bf800f5"),
    "configs/hfmds_fmnist_dir001_hfmds.toml": ("644d97434606", "0fbf3e9fc564"),
    "configs/paper/dynafed_fmnist_a001.toml": ("57daa236cab7", "f0603859d82a"),
    "configs/paper/dynafed_fmnist_a001_code.toml": ("73a80a7948a4", "75891e4acf39"),
    "configs/paper/dynafed_fmnist_a001_dynafed.toml": ("b5e9064d9ffc", "4a4605b258ba"),
    "configs/paper/fedcog_fmnist_niid1.toml": ("d3d8cbc5d547", "ce8f32a5eded"),
    "configs/paper/fedcog_fmnist_niid1_code.toml": ("c9153137fb10", "c0eeb1c5bbf9"),
    "configs/paper/fedcog_fmnist_niid1_code_fedcog.toml": ("002ffe0017f6", "763a92dfd465"),
    "configs/paper/fedcog_fmnist_niid1_fedcog.toml": ("4228d58e42e2", "389e86f1ab4c"),
    "configs/paper/fedcog_fmnist_niid2.toml": ("1c6e022f5ca6", "8e054cb40e66"),
    "configs/paper/fedcog_fmnist_niid2_code.toml": ("81feced87a71", "4578bd01f4b8"),
    "configs/paper/fedcog_fmnist_niid2_code_fedcog.toml": ("a3c5e1bf2810", "1e3eb653e300"),
    "configs/paper/fedcog_fmnist_niid2_fedcog.toml": ("8f3ca4839a94", "3a3805daebb0"),
    "configs/paper/fedssyn_cifar10_n10_a001.toml": ("8f54264a2649", "c3e9cd8a9794"),
    "configs/paper/fedssyn_table1_fmnist.toml": ("c0feb305a23a", "c185ddc43d52"),
    "configs/paper/hfmds_cifar10_dir001.toml": ("1f8636d11934", "d7d05ed389bb"),
    "configs/paper/hfmds_cifar10_dir001_fmds.toml": ("c8bb8d18b71f", "54ededdd12eb"),
    "configs/paper/hfmds_cifar10_dir001_hfmds.toml": ("8b4e51c5d3f7", "2fb8ded566e0"),
}
DYNAFED_OVERRIDDEN = ("aff12166e7a8", "47bbe9a5f69e")  # DYNAFED with OVERRIDES


def config_key(config) -> str:
    """fl.checkpoints.config_key, written out (the checkpoint's key: the identity without the device and plug-ins)."""
    tree = config.identity()
    tree["train"].pop("device", None)
    tree.pop("plugins", None)
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:12]


def keys(path, overrides=()) -> tuple[str, str]:
    config = load_config(path, list(overrides), notes=[])
    return config_key(config), run_key(config)


@pytest.mark.parametrize("path", sorted(BEFORE))
def test_every_configs_keys_are_those_before_the_new_keys(path):
    assert keys(path) == BEFORE[path]


def test_the_new_keys_at_their_defaults_or_speed_only_change_no_key():
    assert sorted(BEFORE) == sorted(glob.glob("configs/*.toml") + glob.glob("configs/**/*.toml"))  # none missed
    assert keys(DYNAFED, OVERRIDES) == DYNAFED_OVERRIDDEN
    assert keys(DYNAFED, [*OVERRIDES, "method.matching='auto'"]) == DYNAFED_OVERRIDDEN
    for graphs in ("auto", "on", "off"):  # speed-only: a run may resume with another value
        assert keys(DYNAFED, [*OVERRIDES, f"train.graphs='{graphs}'"]) == DYNAFED_OVERRIDDEN
    # another matching path computes other roundings: another run
    assert keys(DYNAFED, [*OVERRIDES, "method.matching='batched'"]) != DYNAFED_OVERRIDDEN
    config = load_config(DYNAFED, ["method.matching='fast+graphs'", "train.graphs='off'"])
    assert config.method["matching"] == "fast+graphs" and config.train.graphs == "off"
    assert "graphs" not in config.identity()["train"] and config.identity()["method"]["matching"] == "fast+graphs"


def test_the_checkpoints_config_key_is_fl_runs():
    from fl.checkpoints import config_key as checkpoints_config_key

    config = load_config(DYNAFED, OVERRIDES, notes=[])
    assert checkpoints_config_key(config) == config_key(config) == DYNAFED_OVERRIDDEN[0]


def test_dynafeds_progress_key_is_the_one_before_the_new_key():
    """The key a saved synthesis (dynafed_synthesis.pt, kept in the ledger) is matched by: built from the method's
    fields, bit for bit the sha256 the earlier code took of the edited repr of the method."""
    trajectory = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 7
    before = {
        DynaFed(): "112fdf4eec2ab51fa7dd52f9ea376dd7ee7fe4ddfd8594a66aa30f56ee5318aa",
        DynaFed(precision="bf16"): "f43a0a1b3b337fb47760d8a5bb08d047eca732132ee8719ec7dc9da99b6cbe0e",
        DynaFed(iterations=5, save_every=2, augment="none"): (
            "30230436b8489cead3f461872df28cd2781a6aa1a131bf4b65dfa71e237cc640"
        ),
    }
    for method, key in before.items():
        assert Progress(None, method, trajectory, 3).key == key
    assert Progress(None, DynaFed(matching="auto", save_every=9), trajectory, 3).key == before[DynaFed()]
    assert Progress(None, DynaFed(matching="batched"), trajectory, 3).key != before[DynaFed()]


def test_the_old_environment_variables_are_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(MATCHING_ENV, "batched")
    with pytest.raises(InputError, match=r"^config method\.matching: the environment variable SHUFFLEFL_MATCHING"):
        load_config(DYNAFED)
    load_config("configs/fmnist_quick.toml")  # no DynaFed: nothing reads it
    monkeypatch.delenv(MATCHING_ENV)
    monkeypatch.setenv(GRAPHS_ENV, "on")
    with pytest.raises(InputError, match=r"^SHUFFLEFL_GRAPHS='on': .* set train\.graphs in the config") as error:
        load_config("configs/fmnist_quick.toml")
    assert "\n" not in str(error.value)


def test_bad_values_of_the_new_keys_name_them():
    with pytest.raises(InputError, match=r"^config train\.graphs: 'yes': expected one of auto, on, off$"):
        load_config(None, ["train.graphs='yes'"])
    with pytest.raises(InputError, match=r"^config method\.matching: 'turbo' must be auto, reference, batched"):
        load_config(DYNAFED, ["method.matching='turbo'"])


def test_the_graph_setting_is_handed_down():
    assert graph_kind("cpu", 1) is None and graph_kind("cpu", 1, "auto") is None
    assert graph_kind("cpu", 3, "on") == "trace" and graph_kind("cpu", 1, "off") is None


def test_config_notes_go_where_the_caller_says(capsys):
    overrides = ["method.name='none'", "method.rho=0.5"]  # rho: Fedssyn's key, ignored by "none"
    notes: list[str] = []
    load_config(None, overrides, notes=notes)
    assert notes == ["note: method none has no key rho (another method's); ignored"]
    assert capsys.readouterr().err == ""
    load_config(None, overrides)  # no list: the note is printed, one line
    assert capsys.readouterr().err == f"{notes[0]}\n"
