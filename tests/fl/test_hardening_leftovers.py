"""What issue 69 (Hardening V) left, each refused at its root in one line naming the input: a ``--rates`` file that
is no regular file under 1 MiB (a FIFO, a folder, a huge file) is refused before it is read, and a rate that is no
plausible number of FLOP/s (a bool, a string, Infinity, 1e308, a negative) names its key before a plan is priced;
a provenance whose "data" is null or malformed stops a resume (the data check is never skipped), one without any
(an older run) says so; a pack of DDPM sets whose GNU long name or pax header claims a GiB is refused before it is
read, by the one capped tar reader the lease's archives use too."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

import fl.synthesis.pack as synthesis_pack
import lab.campaign.predict as predict
import lab.records.lease as lease
from fl import provenance
from lab.campaign.__main__ import main as campaign_main
from lab.cost import PLANNED
from tests.fl.test_bounds_before_reading import gnu_long_name_bomb
from theory.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rates_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rates.json"
    path.write_text(text)
    return path


def refused(path: Path, *said: str) -> str:
    with pytest.raises(InputError) as error:
        predict.rates_with_sources(path, benches=path.parent / "no-benches")
    text = str(error.value)
    assert "\n" not in text and str(path) in text and all(s in text for s in said), text
    return text


# 1. --rates: the file, then each rate


def test_a_fifo_a_folder_and_a_huge_rates_file_are_refused_before_they_are_read(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # nobody writes it: a read would block for ever
    start = time.perf_counter()
    refused(fifo, "not a regular file")
    assert time.perf_counter() - start < 5
    folder = tmp_path / "folder.json"
    folder.mkdir()
    refused(folder, "not a regular file")
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(2**31)  # 2 GiB that a whole read would hold in memory (sparse: no disk)
    before = peak_mib()
    refused(huge, "2,147,483,648 bytes, over the 1,048,576 a rates file may hold")
    assert peak_mib() - before < 100
    refused(tmp_path / "missing.json", "no readable rates file")


@pytest.mark.parametrize(
    "value, shown",
    [("1e308", "1e+308"), ("Infinity", "inf"), ("NaN", "nan"), ("true", "True"), ('"1e12"', "'1e12'"),
     ("-5", "-5"), ("1e19", "1e+19"), ("1" + "0" * 30, "1" + "0" * 30), ("null", "None"), ("[1]", "[1]")],
)  # fmt: skip
def test_a_rate_that_is_no_plausible_number_names_its_key(tmp_path, value, shown):
    path = rates_file(tmp_path, f'{{"rates": {{"fl": 2e12, "ddpm": {value}}}}}')
    refused(path, "its rate 'ddpm' is " + shown, "not a number of FLOP/s")


def test_a_model_rate_is_checked_as_the_others_and_unknown_kinds_are_ignored(tmp_path):
    refused(rates_file(tmp_path, '{"rates": {"fl:convnet3": "fast"}}'), "its rate 'fl:convnet3' is 'fast'")
    path = rates_file(tmp_path, '{"rates": {"fl": 2e12, "fl:convnet3": 15, "ddpm": 0, "colour": "blue"}}')
    rates, sources = predict.rates_with_sources(path, benches=tmp_path / "no-benches")
    assert rates["fl"] == 2e12 and rates["fl:convnet3"] == 15.0 and "colour" not in rates
    assert rates["ddpm"] == PLANNED["ddpm"].flop_s  # 0: not measured by this bench, the plan's rate stays
    assert sources["fl"] == f"from {path}" and sources["ddpm"] == PLANNED["ddpm"].source


def test_the_ledgers_bench_records_still_price_the_plan():
    rates, sources = predict.rates_with_sources(None)
    assert all(0 < rate <= predict.MAX_RATE for rate in rates.values())
    assert any(source.startswith("from results/ledger/bench/") for source in sources.values())


@pytest.mark.parametrize("text, said", [("[1, 2]", "not a rates file"), ('{"rates": {"fl": 1e308}}', "'fl'")])
def test_plan_refuses_a_bad_rates_file_in_one_line(tmp_path, capsys, text, said):
    path = rates_file(tmp_path, text)
    assert campaign_main(["plan", "hfmds", "--rates", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and said in err and "Traceback" not in err


# 2. provenance's data record


DATA = {"dataset": "cifar10", "folder": "/d/cifar-10-batches-py", "train": 200, "test": 30,
        "files": [{"name": "data_batch_1", "bytes": 10, "sha256": "a" * 64}], "sha256": "b" * 64}  # fmt: skip


def run_folder(tmp_path: Path, **entry) -> Path:
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    (out / "provenance.json").write_text(json.dumps({"code_version": "x", "changes": [], **entry}))
    return out


@pytest.mark.parametrize(
    "data, said",
    [
        (None, "its 'data' is null"),
        ("garbage", "its 'data' is a str"),
        ([DATA], "its 'data' is a list"),
        ({}, "its 'data' has no 'dataset'"),
        ({**DATA, "train": "200"}, "its 'data' has a malformed 'train'"),
        ({**DATA, "test": True}, "its 'data' has a malformed 'test'"),
        ({**DATA, "sha256": 5}, "its 'data' has a malformed 'sha256'"),
        ({**DATA, "files": "x"}, "its 'data' has a malformed 'files'"),
        ({**DATA, "files": [{"name": ["x"]}]}, "its 'data' has a malformed 'files'"),
    ],
)
def test_a_null_or_malformed_data_record_stops_the_resume(tmp_path, data, said):
    out = run_folder(tmp_path, data=data)
    with pytest.raises(InputError) as error:
        provenance.check_data(out, DATA)
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{out / 'provenance.json'}: {said}") and "cannot be checked" in text


def test_a_whole_record_is_compared_and_one_without_data_says_so(tmp_path):
    assert provenance.check_data(run_folder(tmp_path, data=DATA), DATA) is None
    with pytest.raises(InputError, match="the data found now are not those the run started on"):
        provenance.check_data(run_folder(tmp_path, data=DATA), {**DATA, "train": 100, "sha256": "c" * 64})
    old = {k: v for k, v in DATA.items() if k not in ("files", "sha256")}  # a record from before the digests
    assert provenance.check_data(run_folder(tmp_path, data=old), DATA) is None
    note = provenance.check_data(run_folder(tmp_path), DATA)  # an older run: no "data" at all
    assert "\n" not in note and "records no data" in note and "cannot be compared" in note
    assert provenance.check_data(tmp_path / "nothing", DATA) is None  # no provenance: check_resume's to refuse


def test_a_provenance_recorded_afresh_on_a_resume_records_the_data_from_there(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    provenance.check_resume(out, None, 5, accept_code_change=True, where={"device": "cpu", "data": DATA})
    entry = json.loads((out / "provenance.json").read_text())
    assert entry["data"] == DATA and entry["recorded_from_round"] == 5
    assert provenance.check_data(out, DATA) is None  # the next resume compares them


def test_fl_run_refuses_to_resume_on_a_null_data_record(tmp_path, capsys):
    import numpy as np

    from fl.run import main

    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(data, x_train=rng.integers(0, 255, (60, 1, 8, 8)).astype(np.uint8), y_train=rng.integers(0, 3, 60))
    out = tmp_path / "run"
    settings = [f"data.dataset='npz:{data}'", "data.clients=2", "data.min_size=1", "model.name='mlp'",
                "train.rounds=2", "train.workers=1"]  # fmt: skip
    assert main([*(a for s in settings for a in ("--set", s)), "--out", str(out), "--quiet"]) == 0
    entry = json.loads((out / "provenance.json").read_text())
    (out / "provenance.json").write_text(json.dumps(entry | {"data": None}))
    capsys.readouterr()
    assert main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its 'data' is null" in err and str(out / "provenance.json") in err


# 3. a pack of DDPM sets read by the one capped tar reader


@pytest.mark.parametrize("pax", [False, True])
def test_a_ddpm_pack_whose_header_claims_a_gib_is_refused_before_it_is_read(tmp_path, pax):
    bomb = tmp_path / "ddpm_sets.tar"
    gnu_long_name_bomb(bomb, 2**30, pax)
    before = peak_mib()
    with pytest.raises(InputError) as error:
        synthesis_pack.unpack([bomb], tmp_path / "cache")
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{bomb}: a header or member asks to read 1,073,741,824 bytes")
    assert "not a pack of synthetic sets" in text
    assert peak_mib() - before < 200 and not (tmp_path / "cache").exists()


def test_the_lease_and_the_sets_read_archives_through_one_capped_reader():
    """One implementation: theory.output's capped tar; neither reader opens a tar for reading on its own, and the
    campaign's unpack keeps no check or placing of its own (lab.records.lease's)."""
    import lab.campaign.pack as campaign_pack

    for module in (lease, synthesis_pack):
        source = Path(module.__file__).read_text()
        assert "capped_tar(" in source and "class CappedReads" not in source
        opened = [line for line in source.splitlines() if "tarfile.open(" in line]
        assert all('"w' in line for line in opened), opened  # only writing
    for gone in ("whole_members", "place_state", "run_identity", "other_run"):
        assert not hasattr(campaign_pack, gone)
