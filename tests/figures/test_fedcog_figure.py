"""figures.fedcog on run folders the test writes: the table has a row per method, the gain sentence the sign."""

from __future__ import annotations

import json

from figures.fedcog import main


def write_run(folder, accuracies, generation=0.0):
    folder.mkdir(parents=True)
    rows = [
        {"round": t, "test_accuracy": a, "seconds_local": 1.0, "seconds_method": generation if t > 50 else 0.0}
        | ({"estimates": {"zeta2_hat": 0.1 * t, "sigma2_hat": 2.0}} if t % 10 == 0 else {})
        for t, a in enumerate(accuracies, start=1)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_table_and_gain(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs / "fedcog_fmnist_niid1_seed0", [0.5] * 60 + [0.70] * 10)
    write_run(runs / "fedcog_fmnist_niid1_seed0_fedcog", [0.5] * 60 + [0.75] * 10, generation=4.0)
    assert main(["--runs", str(runs), "--out", str(tmp_path / "out"), "--seeds", "0"]) == 0
    text = (tmp_path / "out" / "table.md").read_text()
    assert "| NIID-1 (Dir 0.1) | fedavg | 1 | 70 | 70.00 (73.07)" in text
    assert "| NIID-1 (Dir 0.1) | fedcog | 1 | 70 | 75.00 (77.34)" in text and "| 4.0 |" in text
    assert "+5.00 points final" in text and "NIID-2" not in text
    assert (tmp_path / "out" / "fedcog_table1.png").stat().st_size > 0
    assert "fedavg" in capsys.readouterr().out
