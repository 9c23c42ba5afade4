"""Dataset file formats (fl.data.formats): IDX, CIFAR python batches through the restricted unpickler, npm digits.

Every reader must raise DataError naming the file (never a bare traceback), and no pickle may run code.
"""

import builtins
import gzip
import json
import os
import pickle
import struct

import numpy as np
import pytest

from fl.data.formats import (
    DataError,
    read_bytes,
    read_idx,
    read_npm_digits,
    read_pickle_batch,
    write_idx,
    write_npm_digits,
    write_pickle_batch,
)
from theory.errors import InputError

# --------------------------------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    "array",
    [
        np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28),  # images (n, 28, 28)
        np.array([3, 1, 4, 1, 5, 9], dtype=np.uint8),  # labels (n,)
        np.zeros((0, 28, 28), dtype=np.uint8),  # an empty set of images
        np.array([[-128, 0, 127]], dtype=np.int8),
        np.array([-30000, 0, 1, 30000], dtype="<i2"),  # native little-endian in, big-endian on disk
        np.array([-30000, 0, 1, 30000], dtype=">i2"),
        np.arange(-6, 6, dtype=np.int32).reshape(2, 3, 2),
        np.array([[0.5, -1.25], [np.inf, 3e38]], dtype=np.float32),
        np.array([np.pi, -np.e, 1e-300], dtype=np.float64),
    ],
    ids=["uint8-3d", "uint8-1d", "uint8-empty", "int8", "int16-le", "int16-be", "int32-3d", "float32", "float64"],
)
def test_idx_round_trip(tmp_path, array, compress):
    path = write_idx(tmp_path / "array-idx", array, compress=compress)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == compress
    back = read_idx(path)
    assert back.shape == array.shape
    assert back.dtype == array.dtype.newbyteorder("=")  # native byte order whatever was written
    assert np.array_equal(back, array)


def test_idx_header_is_the_canonical_big_endian_layout(tmp_path):
    """The bytes on disk: 0 0 type ndim, big-endian uint32 sizes, big-endian data (as in the MNIST files)."""
    path = write_idx(tmp_path / "x", np.array([[1, 258]], dtype=np.int16), compress=False)
    assert path.read_bytes() == bytes([0, 0, 0x0B, 2]) + struct.pack(">2I", 1, 2) + struct.pack(">2h", 1, 258)


def test_idx_gzip_follows_the_name_unless_told(tmp_path):
    images = np.full((3, 28, 28), 7, dtype=np.uint8)
    assert write_idx(tmp_path / "a.gz", images).read_bytes()[:2] == b"\x1f\x8b"  # .gz name -> gzip
    assert write_idx(tmp_path / "b", images).read_bytes()[:2] == b"\0\0"  # plain name -> raw
    assert write_idx(tmp_path / "c.gz", images, compress=False).read_bytes()[:2] == b"\0\0"
    assert write_idx(tmp_path / "d", images, compress=True).read_bytes()[:2] == b"\x1f\x8b"
    for name in ("a.gz", "b", "c.gz", "d"):  # the reader sniffs the gzip magic, whatever the name says
        assert np.array_equal(read_idx(tmp_path / name), images)


@pytest.mark.parametrize("dtype", [np.int64, np.uint16, np.bool_, np.complex64])
def test_write_idx_refuses_types_idx_cannot_hold(tmp_path, dtype):
    with pytest.raises(InputError, match="IDX cannot store"):
        write_idx(tmp_path / "x", np.zeros(3, dtype=dtype))


def _idx_bytes(array):
    return bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


GOOD_IDX = _idx_bytes(np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4))


def test_hand_built_idx_bytes_read(tmp_path):
    (tmp_path / "x").write_bytes(GOOD_IDX)
    assert np.array_equal(read_idx(tmp_path / "x"), np.arange(32, dtype=np.uint8).reshape(2, 4, 4))


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not an IDX file"),
        (b"\0\0", "not an IDX file"),
        (b"PK\x03\x04 a zip file", "not an IDX file"),
        (b"\0\0\x0a\x01" + struct.pack(">I", 1) + b"\0", "not an IDX file"),  # 0x0A is no IDX type
        (GOOD_IDX[:9], "truncated IDX header"),  # ndim 3 needs 16 header bytes
        (GOOD_IDX[:-1], "IDX header says shape"),  # one data byte short
        (GOOD_IDX[:20], "IDX header says shape"),
        (GOOD_IDX + b"\0", "IDX header says shape"),  # one byte too many
    ],
    ids=["empty", "two-bytes", "zip", "bad-type", "short-header", "one-short", "body-cut", "one-extra"],
)
def test_corrupt_idx_is_a_data_error_naming_the_file(tmp_path, content, message, compress):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(gzip.compress(content) if compress else content)
    with pytest.raises(DataError, match=message) as error:
        read_idx(path)
    assert str(path) in str(error.value)


def test_missing_file_is_a_data_error_naming_it(tmp_path):
    path = tmp_path / "nowhere" / "t10k-labels-idx1-ubyte"
    with pytest.raises(DataError, match="file not found") as error:
        read_idx(path)
    assert str(path) in str(error.value)
    with pytest.raises(DataError, match="cannot read"):
        read_bytes(tmp_path)  # a folder: IsADirectoryError -> DataError


def test_truncated_gzip_is_a_data_error(tmp_path):
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(GOOD_IDX)[:-12])  # the stream ends early
    with pytest.raises(DataError, match="corrupt gzip") as error:
        read_idx(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "content",
    [
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 40,  # valid gzip header, garbage deflate stream
        gzip.compress(GOOD_IDX)[:10] + bytes(range(200, 256)) + gzip.compress(GOOD_IDX)[-8:],
        b"\x1f\x8b" + b"not gzip at all",
    ],
    ids=["garbage-deflate", "garbage-body", "garbage-header"],
)
def test_gzip_garbage_is_a_data_error(tmp_path, content):
    """A gzip header followed by garbage: zlib raises zlib.error, which is neither OSError nor EOFError."""
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(content)
    with pytest.raises(DataError, match="corrupt gzip") as error:
        read_idx(path)
    assert str(path) in str(error.value)


# ---------------------------------------------------------------------------------------- CIFAR batches


def test_cifar_batch_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(5, 3072), dtype=np.uint8)
    labels = [int(y) for y in rng.integers(0, 10, size=5)]
    path = write_pickle_batch(tmp_path / "data_batch_1", {"data": data, "labels": labels, "batch_label": "b 1"})
    batch = read_pickle_batch(path)
    assert set(batch) == {"data", "labels", "batch_label"}  # bytes keys on disk, str keys back
    assert batch["data"].dtype == np.uint8
    assert np.array_equal(batch["data"], data)
    assert batch["labels"] == labels
    assert batch["batch_label"] == "b 1"


def test_gzipped_cifar_batch_is_read_too(tmp_path):
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    path = tmp_path / "test_batch"
    path.write_bytes(gzip.compress(pickle.dumps({b"data": data, b"labels": [0, 1]}, protocol=2)))
    assert np.array_equal(read_pickle_batch(path)["data"], data)


def _binstring(value: bytes) -> bytes:
    """Python 2's str opcodes: SHORT_BINSTRING (< 256 bytes) or BINSTRING."""
    return b"U" + bytes([len(value)]) + value if len(value) < 256 else b"T" + struct.pack("<i", len(value)) + value


def python2_cifar_pickle(data: np.ndarray, labels: list[int]) -> bytes:
    """{'data': uint8 (n, m) array, 'labels': [...]} as Python 2's cPickle wrote the real CIFAR batches: protocol 2,
    str as BINSTRING (bytes under encoding='bytes'), globals from ``numpy.core.multiarray``."""
    n, m = data.shape
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + _binstring(b"b") + b"\x87R"
        b"(K\x01M" + struct.pack("<H", n) + b"M" + struct.pack("<H", m) + b"\x86"
        b"cnumpy\ndtype\n" + _binstring(b"u1") + b"K\x00K\x01\x87R"
        b"(K\x03" + _binstring(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
        b"\x89" + _binstring(data.tobytes()) + b"tb"
    )
    label_list = b"](" + b"".join(b"K" + bytes([y]) for y in labels) + b"e"
    return b"\x80\x02}(" + _binstring(b"data") + array + _binstring(b"labels") + label_list + b"u."


def test_python2_cifar_pickle_loads(tmp_path):
    """The canonical CIFAR files are Python 2 pickles naming numpy.core.multiarray (numpy 1.x's module)."""
    data = np.random.default_rng(1).integers(0, 256, size=(3, 3072), dtype=np.uint8)
    path = tmp_path / "data_batch_2"
    path.write_bytes(python2_cifar_pickle(data, [7, 0, 9]))
    batch = read_pickle_batch(path)
    assert np.array_equal(batch["data"], data)
    assert batch["labels"] == [7, 0, 9]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_numpy_arrays_load_at_every_pickle_protocol(tmp_path, protocol):
    """Protocol 5 pickles contiguous arrays through numpy's ``_frombuffer`` (a PickleBuffer), not ``_reconstruct``."""
    batch = {
        "data": np.arange(4 * 3072, dtype=np.uint8).reshape(4, 3072),
        "labels": [np.int64(3), 1, 2, 0],  # a numpy scalar goes through multiarray.scalar
        "fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "strided": np.arange(10, dtype=np.int16)[::3],
        "raw": b"\x00\xff bytes",
    }
    path = tmp_path / f"batch-protocol-{protocol}"
    path.write_bytes(pickle.dumps({key.encode(): value for key, value in batch.items()}, protocol=protocol))
    back = read_pickle_batch(path)
    for key in ("data", "fortran", "strided"):
        assert back[key].dtype == batch[key].dtype
        assert np.array_equal(back[key], batch[key])
    assert [int(y) for y in back["labels"]] == [3, 1, 2, 0]
    assert bytes(back["raw"]) == batch["raw"]


class _Shell:
    """Unpickling this would run a shell command that creates a file."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return os.system, (f"echo pwned > {self.target}",)


class _Eval:
    """Unpickling this would evaluate Python code that creates a file."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return builtins.eval, (f"open({str(self.target)!r}, 'w').write('pwned')",)


@pytest.mark.parametrize("protocol", [0, 2, 4])
@pytest.mark.parametrize("payload", [_Shell, _Eval])
@pytest.mark.parametrize("nested", [False, True])
def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path, payload, protocol, nested):
    target = tmp_path / "pwned"
    evil = payload(target)
    obj = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [evil]} if nested else evil
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    with pytest.raises(DataError, match="refused global") as error:
        read_pickle_batch(path)
    assert str(path) in str(error.value)
    assert not target.exists()


def test_refused_globals_include_lookalikes(tmp_path):
    """Only the listed (module, name) pairs pass: numpy functions other than the array rebuilders are refused."""
    path = tmp_path / "batch"
    for module, name in [("numpy", "load"), ("numpy.core.multiarray", "fromfile"), ("builtins", "getattr")]:
        path.write_bytes(b"\x80\x02c" + f"{module}\n{name}\n".encode() + b")R.")
        with pytest.raises(DataError, match=f"refused global {module}.{name}"):
            read_pickle_batch(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (pickle.dumps([1, 2, 3], protocol=2), "expected a pickled dict"),
        (pickle.dumps(np.zeros(3), protocol=2), "expected a pickled dict"),
        (b"garbage, not a pickle", "not a safe CIFAR batch|corrupt pickle"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}, protocol=2)[:-30], "corrupt pickle|not a safe"),
        (b"", "corrupt pickle"),
    ],
    ids=["list", "array", "garbage", "truncated", "empty"],
)
def test_corrupt_or_wrong_pickle_is_a_data_error(tmp_path, content, message):
    path = tmp_path / "test_batch"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as error:
        read_pickle_batch(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "content",
    [
        # A protocol-2 bytes value is rebuilt as _codecs.encode(text, 'latin1'); a flipped byte in the codec name
        # makes codecs raise LookupError.
        pickle.dumps({b"data": b"abc"}, protocol=2).replace(b"latin1", b"lbtin1"),
        # A BINBYTES8 length beyond sys.maxsize: the unpickler raises OverflowError.
        b"\x80\x04\x8e" + struct.pack("<Q", 2**63 + 5) + b".",
    ],
    ids=["bad-codec-name", "huge-length"],
)
def test_corrupted_pickle_bytes_are_a_data_error_not_a_traceback(tmp_path, content):
    """Single corrupted bytes found by flipping bytes of valid batches: each must still be a DataError."""
    path = tmp_path / "data_batch_3"
    path.write_bytes(content)
    with pytest.raises(DataError) as error:
        read_pickle_batch(path)
    assert str(path) in str(error.value)


# ------------------------------------------------------------------------------------------- npm digits


def test_npm_digits_round_trip(tmp_path):
    """The JSON stores pixel/255 to 3 decimals (error <= 0.0005 * 255 < 0.5), so the uint8 comes back within 1."""
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    images[0] = 0
    images[1] = 255
    path = write_npm_digits(tmp_path / "3.json", images)
    values = json.loads(path.read_text())["data"]
    assert len(values) == 7 * 784 and min(values) == 0 and max(values) == 1
    back = read_npm_digits(path)
    assert back.dtype == np.uint8 and back.shape == (7, 28, 28)
    assert np.abs(back.astype(int) - images).max() <= 1


def test_npm_digits_other_side_and_empty(tmp_path):
    images = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4) * 8
    assert (
        np.abs(read_npm_digits(write_npm_digits(tmp_path / "a.json", images), side=4).astype(int) - images).max() <= 1
    )
    (tmp_path / "b.json").write_text('{"data": []}')
    assert read_npm_digits(tmp_path / "b.json").shape == (0, 28, 28)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '{"data": [0.5, ',  # truncated
        "[0.1, 0.2]",  # no dict
        '"a string"',
        '{"pixels": []}',  # no "data"
        '{"data": "0.5"}',
        '{"data": [0.5, "x"]}',
        '{"data": [0.5, null]}',
        '{"data": {"a": 1}}',
        json.dumps({"data": [0.5] * 783}),  # one pixel short of an image
        json.dumps({"data": [0.5] * 785}),
        json.dumps({"data": [[0.5] * 784]}),  # nested: not a flat list
        json.dumps({"data": [0.5] * 783 + [1.001]}),  # outside [0, 1]
        json.dumps({"data": [-0.001] + [0.5] * 783}),
        json.dumps({"data": [255] * 784}),  # pixels stored as bytes, not fractions
        '{"data": [NaN' + ", 0.5" * 783 + "]}",
        '{"data": [Infinity' + ", 0.5" * 783 + "]}",
    ],
    ids=lambda text: text[:20],
)
def test_bad_npm_digits_are_a_data_error(tmp_path, text):
    path = tmp_path / "7.json"
    path.write_text(text)
    with pytest.raises(DataError) as error:
        read_npm_digits(path)
    assert str(path) in str(error.value)


def test_npm_digits_that_are_not_text(tmp_path):
    path = tmp_path / "8.json"
    path.write_bytes(b"\xff\xfe\x00\xd8 broken utf-16")
    with pytest.raises(DataError, match=str(path)):
        read_npm_digits(path)
