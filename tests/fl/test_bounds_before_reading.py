"""Resources bounded before a refusal (issue 69, class 6): a checkpoint whose round says 10**9 is refused by the
config's rounds before anything is sized by it; an archive member whose GNU long name or pax header claims a GiB
is refused before it is read; an npz whose header claims more than the file holds is refused before allocation
(a run's own data, fl.quality's sets); a sweep planning a million runs says so at once. Each is one line."""

from __future__ import annotations

import gzip
import io
import resource
import tarfile
import time
import zipfile

import numpy as np
import pytest
import torch

from fl.data.formats import DataError, npz_arrays
from fl.run import main
from fl.sweep import main as sweep_main
from fl.sweep import planned_runs
from lab.records.lease import read_archive
from theory.errors import InputError


def args(data: str, out, *extra: str) -> list[str]:
    settings = [f"data.dataset='npz:{data}'", "data.clients=2", "data.min_size=1", "model.name='mlp'",
                "train.rounds=3", "train.checkpoint_every=1", "train.workers=1", *extra]  # fmt: skip
    return [*(a for s in settings for a in ("--set", s)), "--out", str(out), "--quiet"]


@pytest.fixture()
def npz(tmp_path) -> str:
    rng = np.random.default_rng(0)
    path = tmp_path / "d.npz"
    np.savez(path, x_train=rng.integers(0, 255, (200, 1, 8, 8)).astype(np.uint8), y_train=rng.integers(0, 3, 200))
    return str(path)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("at", [5, 10**9])
def test_a_checkpoint_round_past_the_configs_rounds_is_refused_before_anything_is_sized(npz, tmp_path, capsys, at):
    out = tmp_path / "run"
    assert main(args(npz, out)) == 0
    payload = torch.load(out / "checkpoint.pt", weights_only=True)
    torch.save(payload | {"round": at}, out / "checkpoint.pt")
    capsys.readouterr()
    before, start = peak_mib(), time.perf_counter()
    assert main(["--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"its round is {at}, past the 3 rounds of the run's config" in err
    assert time.perf_counter() - start < 60 and peak_mib() - before < 500  # 10**9 rounds sized nothing


def gnu_long_name_bomb(path, claimed: int, pax: bool = False) -> None:
    """A gzipped tar whose first header (a GNU long name, or a pax header) claims ``claimed`` bytes, followed by 8
    MiB of zeros (a real one would go on to the GiB, a few MB compressed)."""
    info = tarfile.TarInfo("././@PaxHeader" if pax else "././@LongLink")
    info.type = tarfile.XHDTYPE if pax else tarfile.GNUTYPE_LONGNAME
    info.size = claimed
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(info.tobuf(format=tarfile.GNU_FORMAT)[:512])
        handle.write(b"\0" * (8 << 20))


@pytest.mark.parametrize("pax", [False, True])
def test_an_archive_header_claiming_a_gib_is_refused_before_it_is_read(tmp_path, pax):
    bomb = tmp_path / "records-1.tgz"
    gnu_long_name_bomb(bomb, 2**30, pax)
    before = peak_mib()
    with pytest.raises(InputError, match="asks to read 1,073,741,824 bytes, over the cap"):
        read_archive(bomb)
    assert peak_mib() - before < 200


def test_an_archive_of_ordinary_members_still_reads(tmp_path):
    path = tmp_path / "records-1.tgz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, data in (("runs/" + "r" * 200 + "/config.json", b"{}"), ("logs/a.log", b"x" * 5000)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    assert read_archive(path) == {"runs/" + "r" * 200 + "/config.json": b"{}", "logs/a.log": b"x" * 5000}


def lying_npz(path, shape: tuple[int, ...], names=("x_train", "y_train")) -> None:
    """An npz whose first array's npy header claims ``shape`` of float32 over 1,000 bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{names[0]}.npy", header.getvalue() + b"\0" * 1000)
        labels = io.BytesIO()
        np.save(labels, np.zeros(10, np.int64))
        archive.writestr(f"{names[1]}.npy", labels.getvalue())


def test_an_npz_header_claiming_73_gib_is_refused_before_allocation(tmp_path, capsys):
    path = tmp_path / "huge.npz"
    lying_npz(path, (10, 1, 28, 70_000_000))  # 78 GB of float32
    before = peak_mib()
    with pytest.raises(DataError, match="the header of array 'x_train' claims float32"):
        npz_arrays(path)
    assert main(args(str(path), tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the file holds 1,000" in err
    assert peak_mib() - before < 200


def test_a_sweep_of_a_million_planned_runs_says_so_at_once(tmp_path, capsys):
    values = [",".join(f"{base + k / 1000:g}" for k in range(100)) for base in (0.0, 0.01, 0.1)]
    start = time.perf_counter()
    argv = ["--vary", f"data.p={values[0]}", "--vary", f"train.lr={values[1]}", "--vary", f"data.alpha={values[2]}",
            "--product", "--out", str(tmp_path / "s")]  # fmt: skip
    assert sweep_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plans 1,000,001 runs" in err and "over the 10,000 a sweep takes" in err
    assert time.perf_counter() - start < 30 and not (tmp_path / "s").exists()
    assert planned_runs([("a", ["a=1", "a=2"]), ("b", ["b=1"])], product=False, seeds=3) == 12  # one at a time
