"""The data layer: dataset files (no torchvision), data roots, partitioners, real and synthetic shuffling.

``python -m fl.data`` lists what is found where, and ``python -m fl.data fetch NAME`` downloads a dataset.
"""

from fl.data.datasets import LAYOUTS, Dataset, candidate_folders, canonical_name, data_roots, load, locate
from fl.data.formats import DataError
from fl.data.partition import PARTITIONERS, dirichlet, dirichlet_hsu, iid, partition, shards, split_by_class
from fl.data.shuffle import deal_synthetic, mix_synthetic, shuffle_partition

__all__ = [
    "LAYOUTS",
    "PARTITIONERS",
    "DataError",
    "Dataset",
    "candidate_folders",
    "canonical_name",
    "data_roots",
    "deal_synthetic",
    "dirichlet",
    "dirichlet_hsu",
    "iid",
    "load",
    "locate",
    "mix_synthetic",
    "partition",
    "shards",
    "shuffle_partition",
    "split_by_class",
]
