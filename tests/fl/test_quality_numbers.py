"""fl.quality's numbers about nothing (issue 69, classes 5 and 6): synthetic sets with NaN pixels, float labels, only
blank images (what a generator with NaN weights samples) and an npy header claiming more than its file are refused
in one line naming the file, never reported as 0% noise or truncated into labels; a set with some blank images says
how many."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from fl import quality
from fl.synthesis.fedssyn import KEY_FILE
from tests.fl.test_quality import blobs


def cache_with(root, write) -> str:
    folder = root / "cache" / "client0-00"
    folder.mkdir(parents=True)
    key = {"generator": {"config": {"generator": "ddpm"}, "seed": 0, "client": 0}, "sets": {"synthetic-a.npz": {}}}
    (folder / KEY_FILE).write_text(json.dumps(key))
    write(folder / "synthetic-a.npz")
    return str(root / "cache")


@pytest.fixture()
def real(tmp_path) -> str:
    x, y = blobs(300, 0)
    np.savez(tmp_path / "real.npz", x_train=x, y_train=y)
    return f"npz:{tmp_path / 'real.npz'}"


def huge_header(path) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (40, 1, 16, 30_000_000)})  # fmt: skip
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + b"\0" * 1000)
        labels = io.BytesIO()
        np.save(labels, np.zeros(40, np.int64))
        archive.writestr("y.npy", labels.getvalue())


def with_nan(path) -> None:
    x, y = blobs(40, 2)
    pixels = x.astype(np.float32) / 255
    pixels[:, :, 0, 0] = np.nan
    np.savez_compressed(path, x=pixels, y=y)


@pytest.mark.parametrize(
    "write, said",
    [
        (with_nan, "images holding 40 non-finite pixel value(s)"),
        (lambda p: np.savez_compressed(p, x=blobs(40, 2)[0], y=blobs(40, 2)[1] + 0.7), "labels of float64 (40,)"),
        (lambda p: np.savez_compressed(p, x=np.zeros((40, 1, 16, 16), np.uint8), y=blobs(40, 2)[1]),
         "every one of the 40 synthetic images is blank"),
        (huge_header, "the header of array 'x' claims float32 (40, 1, 16, 30000000)"),
    ],
)  # fmt: skip
def test_a_set_that_holds_no_numbers_to_measure_is_one_line(tmp_path, capsys, real, write, said):
    cache = cache_with(tmp_path, write)
    assert quality.main([cache, "--seed", "0", "--dataset", real, "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err


def test_blank_images_are_counted_beside_the_noise():
    x, y = blobs(600, 0)
    xt, yt = blobs(200, 1)
    good_x, good_y = blobs(40, 2)
    good_x[:10] = 0
    report = quality.report([(good_x, good_y)], x, y, xt, yt, 2, seed=0, epochs=1)
    assert report["blank_fraction"] == 0.25 and report["noise_fraction"] == 0.0
