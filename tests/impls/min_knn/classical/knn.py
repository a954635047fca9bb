"""K-nearest-neighbour classification with vectorised squared distances (canon item #4).

Plan: all query-train squared distances at once via ||a||^2 - 2 a.b + ||b||^2 (one matmul instead
of an (m, n, d) broadcast, because that blows up memory), clipped at 0 against round-off; a stable
argsort keeps the lower training index on equal distances; votes are a bincount per row, argmax
takes the smallest label on ties. Tests: compare with a brute-force loop, k = 1 reproduces the
training labels, distance weighting with an exact duplicate point.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def pairwise_sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances ``(n, m)`` between the rows of ``A`` and ``B``, clipped at 0."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    a2 = np.sum(A * A, axis=1)[:, None]  # (n, 1)
    b2 = np.sum(B * B, axis=1)[None, :]  # (1, m)
    D = a2 - 2.0 * (A @ B.T) + b2  # (n, m)
    return np.maximum(D, 0.0)


class KNNClassifier:
    """K-nearest-neighbour classifier over integer labels ``0 .. C-1``."""

    def __init__(self, k: int = 5, weights: Literal["uniform", "distance"] = "uniform") -> None:
        self.k = k
        self.weights = weights
        self.X_: np.ndarray | None = None
        self.y_: np.ndarray | None = None
        self.n_classes_ = 0

    def fit(self, X: np.ndarray, y: np.ndarray) -> KNNClassifier:
        """Store copies of the training set; ``C = max(y) + 1``."""
        self.X_ = np.array(X, dtype=np.float64)
        self.y_ = np.array(y, dtype=np.int64)
        self.n_classes_ = int(self.y_.max()) + 1
        return self

    def kneighbors(self, X: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(dist, idx)``, both ``(m, k)``: ascending Euclidean distances, ties keep the lower index."""
        k = self.k if k is None else k
        D = pairwise_sq_distances(X, self.X_)  # (m, n)
        idx = np.argsort(D, axis=1, kind="stable")[:, :k]  # (m, k)
        dist = np.sqrt(np.take_along_axis(D, idx, axis=1))  # (m, k)
        return dist, idx.astype(np.int64)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(Weighted) vote share of each class among the ``k`` neighbours, ``(m, C)``."""
        dist, idx = self.kneighbors(X)
        if self.weights == "distance":
            w = 1.0 / np.maximum(dist, 1e-12)  # (m, k)
        else:
            w = np.ones_like(dist)
        labels = self.y_[idx]  # (m, k)
        m = labels.shape[0]
        votes = np.zeros((m, self.n_classes_))
        np.add.at(votes, (np.repeat(np.arange(m), labels.shape[1]), labels.ravel()), w.ravel())
        return votes / votes.sum(axis=1, keepdims=True)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Label with the most (weighted) votes; argmax gives ties to the smallest label."""
        return np.argmax(self.predict_proba(X), axis=1).astype(np.int64)
