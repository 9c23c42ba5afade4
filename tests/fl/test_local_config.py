"""LocalConfig.of (issue #67, config by responsibility): the local-training settings come from [train] by name, every
field from its own key (no positional copy that a new field could shift)."""

import dataclasses

from fl.clients import TRAIN_KEYS, LocalConfig
from fl.config import TrainConfig, load_config


def test_every_field_has_its_train_key():
    assert set(TRAIN_KEYS) == {f.name for f in dataclasses.fields(LocalConfig)}
    assert set(TRAIN_KEYS.values()) <= {f.name for f in dataclasses.fields(TrainConfig)}


def test_each_field_carries_its_own_keys_value():
    overrides = ["train.local_epochs=3", "train.batch_size=17", "train.participation=0.5", "train.weighting=uniform",
                 "train.local_steps=9", "train.momentum=0.9", "train.weight_decay=0.001", "train.client_chunk=4",
                 "train.local_budget=real-steps", "train.augment=crop-flip", "train.optimizer_state=keep"]  # fmt: skip
    local = LocalConfig.of(load_config(None, overrides, notes=[]).train)
    assert (local.epochs, local.batch_size, local.participation, local.weighting, local.steps) == (
        3, 17, 0.5, "uniform", 9)  # fmt: skip
    assert (local.momentum, local.weight_decay, local.chunk, local.budget, local.augment, local.optimizer_state) == (
        0.9, 0.001, 4, "real-steps", "crop-flip", "keep")  # fmt: skip
