"""The sentence on a column's synthetic sets (figures.fedssyn_fl.sets_sentence): a classifier that collapsed to
chance on a set is left out of the synthetic-trained mean, and the sentence says how many were."""

from __future__ import annotations

from figures.fedssyn_fl import sets_sentence, trained_on_them


def report(seed: int, trained: float) -> dict:
    return {"seed": seed, "dataset": "fmnist-sub3000x2000", "noise_by_client": [0.0, 0.2], "noise_fraction": 0.1,
            "label_agreement": 0.6, "synthetic_trained_accuracy": trained, "real_trained_accuracy": 0.7}  # fmt: skip


def test_no_collapse_gives_the_plain_mean():
    assert trained_on_them([report(0, 0.4), report(1, 0.6)]) == "50.00 ± 14.14 %"


def test_a_collapse_is_left_out_and_counted():
    text = sets_sentence("its sets", [report(0, 0.4), report(1, 0.1), report(2, 0.6)])
    assert "reaches 50.00 ± 14.14 % (1 of 3 classifiers ended at chance" in text and "left out) on real test" in text


def test_every_classifier_collapsed_gives_no_number():
    assert trained_on_them([report(0, 0.1), report(1, 0.105)]).startswith("no number (2 of 2 classifiers ended")
