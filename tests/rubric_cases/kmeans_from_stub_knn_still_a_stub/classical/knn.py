"""K-nearest-neighbour classification with vectorised squared distances (canon item #4).

TODO: your plan (not implemented yet).
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

from __future__ import annotations

from typing import Literal

import numpy as np


def pairwise_sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between every row of ``A`` and every row of ``B``.

    Args:
        A: ``(n, d)`` array-like, converted to float64.
        B: ``(m, d)`` array-like, converted to float64.

    Returns:
        ``(n, m)`` float64 array, ``out[i, j] = ||A[i] - B[j]||^2``, clipped at 0 because the
        expansion ``||a||^2 - 2 a.b + ||b||^2`` can round to a tiny negative number.

    Raises:
        ValueError: ``A`` or ``B`` is not 2-D, or their feature widths differ.

    Source: the standard norm expansion (e.g. CS231n, "vectorised L2 distances"); seed canon #4.
    """
    raise NotImplementedError("pairwise_sq_distances: not implemented yet")


class KNNClassifier:
    """K-nearest-neighbour classifier over integer labels ``0 .. C-1``.

    Args:
        k: number of neighbours, ``>= 1`` (and ``<= n_train``, checked in ``fit``).
        weights: ``"uniform"`` (one vote per neighbour) or ``"distance"`` (vote ``1 / max(dist, 1e-12)``).

    Raises:
        ValueError: ``k`` is not an integer ``>= 1``, or ``weights`` is not one of the two options.
    """

    def __init__(self, k: int = 5, weights: Literal["uniform", "distance"] = "uniform") -> None:
        raise NotImplementedError("KNNClassifier.__init__: not implemented yet")

    def fit(self, X: np.ndarray, y: np.ndarray) -> KNNClassifier:
        """Store copies of the training set.

        Args:
            X: ``(n, d)`` array-like of features, converted to float64.
            y: ``(n,)`` integer labels ``>= 0``; ``C = max(y) + 1``.

        Returns:
            ``self``.

        Raises:
            ValueError: ``X`` not 2-D; ``y`` not 1-D, not integer, negative or of another length;
                ``k > n`` (message names ``k``).
        """
        raise NotImplementedError("KNNClassifier.fit: not implemented yet")

    def kneighbors(self, X: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest training points of every query row.

        Args:
            X: ``(m, d)`` queries.
            k: neighbours to return; ``None`` uses ``self.k``.

        Returns:
            ``(dist, idx)``: ``(m, k)`` float64 Euclidean distances in ascending order and ``(m, k)``
            int64 training indices; equal distances keep the lower index (stable sort).

        Raises:
            RuntimeError: called before ``fit``.
            ValueError: ``X`` not 2-D or of another width than the training set; ``k < 1`` or ``k > n``.
        """
        raise NotImplementedError("KNNClassifier.kneighbors: not implemented yet")

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Vote shares of every class among each query's ``k`` neighbours.

        Args:
            X: ``(m, d)`` queries.

        Returns:
            ``(m, C)`` float64, rows sum to 1; column ``c`` is the (weighted) share of label ``c``.

        Raises:
            RuntimeError: called before ``fit``. ValueError: as ``kneighbors``.
        """
        raise NotImplementedError("KNNClassifier.predict_proba: not implemented yet")

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The label with the most (weighted) votes; a tie goes to the smallest label.

        Args:
            X: ``(m, d)`` queries.

        Returns:
            ``(m,)`` int64 labels.

        Raises:
            RuntimeError: called before ``fit``. ValueError: as ``kneighbors``.
        """
        raise NotImplementedError("KNNClassifier.predict: not implemented yet")
