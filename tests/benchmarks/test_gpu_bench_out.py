"""gpu-bench.sh --out never replaces a user's own file (fourth sweep, case 39); an earlier bench's JSON it does."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.test_bench_bad_inputs import load_bench


def test_a_users_file_at_out_is_refused_in_one_line_and_kept(tmp_path, capsys):
    bench = load_bench("gpu_bench")
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "numbers"}')
    with pytest.raises(SystemExit) as stop:
        bench.main(["--dry", "--parts", "peak", "--out", str(mine)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "did not write" in err and "Traceback" not in err
    assert mine.read_text() == '{"my": "numbers"}'
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({key: None for key in bench.OWN_KEYS}))
    assert bench.json_out_problem(earlier, "gpu.json", bench.OWN_KEYS, "gpu-bench.sh") is None  # its own: replaced
