"""The built-in workload's data, as NumPy arrays (no TensorFlow here).

Every process builds the same split from the same seed, so replicas agree on the test
set without talking to each other; the input pipeline then shards the training split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

NUM_FEATURES = 64
NUM_CLASSES = 10
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Split:
    train_x: NDArray[np.float32]
    train_y: NDArray[np.int32]
    test_x: NDArray[np.float32]
    test_y: NDArray[np.int32]

    @property
    def num_train(self) -> int:
        return len(self.train_y)


def load(name: str, *, seed: int, synthetic_examples: int) -> Split:
    if name == "digits":
        features, labels = _digits()
    elif name == "synthetic":
        features, labels = _synthetic(synthetic_examples, seed)
    else:
        raise ValueError(f"unknown dataset {name!r}")
    return _split(features, labels, seed)


def _digits() -> tuple[NDArray[np.float32], NDArray[np.int32]]:
    """scikit-learn's 1797 8x8 handwritten digits; pixel values 0..16 scaled to 0..1."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int32)


def _synthetic(examples: int, seed: int) -> tuple[NDArray[np.float32], NDArray[np.int32]]:
    """Gaussian features labelled by a fixed random linear teacher: learnable, any size."""
    generator = np.random.default_rng(seed + 1)
    teacher = generator.normal(size=(NUM_FEATURES, NUM_CLASSES)).astype(np.float32)
    features = generator.normal(size=(examples, NUM_FEATURES)).astype(np.float32)
    labels = np.argmax(features @ teacher, axis=1).astype(np.int32)
    return features, labels


def _split(features: NDArray[np.float32], labels: NDArray[np.int32], seed: int) -> Split:
    order = np.random.default_rng(seed).permutation(len(labels))
    test_size = max(1, round(len(labels) * TEST_FRACTION))
    test, train = order[:test_size], order[test_size:]
    return Split(
        train_x=features[train],
        train_y=labels[train],
        test_x=features[test],
        test_y=labels[test],
    )
