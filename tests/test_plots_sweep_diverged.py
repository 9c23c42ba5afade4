"""plots.sweep.plot_sweep draws a sweep whose runs diverged (final_test_accuracy None: no number): the final
accuracy of the seeds that have one, and the tick says how many diverged; an arm with none left is a gap."""

import matplotlib.pyplot as plt

from plots import sweep


def test_a_diverged_seed_is_left_out_and_named(tmp_path, monkeypatch):
    drawn = {}
    real = plt.Axes.set_xticks

    def record(self, positions, labels=None, **kwargs):
        if labels is not None:
            drawn["ticks"] = list(labels)
        return real(self, positions, labels, **kwargs)

    monkeypatch.setattr(plt.Axes, "set_xticks", record)
    curve = [(1, 0.5), (2, 0.6)]
    finals = [{"final_test_accuracy": 0.6}, {"final_test_accuracy": None}, {"final_test_accuracy": 0.7}]
    results = {
        "base": {"curves": [curve, curve, curve], "summaries": finals},
        "train.lr=0.1": {"curves": [[], []], "summaries": [{"final_test_accuracy": None}, {}]},
    }
    sweep.plot_sweep(results, ["train.lr"], False, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert drawn["ticks"][0].endswith("(1 of 3 diverged)")
