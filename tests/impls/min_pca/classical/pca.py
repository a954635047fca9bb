"""Principal component analysis by the SVD of the centred data (canon #7).

Plan: centre X and take the thin SVD instead of eigen-decomposing the covariance, because forming
X^T X squares the condition number; the rows of V^T are the directions, S^2/(n-1) the variances.
Fix each component's sign so its largest-magnitude entry is positive (SVD signs are arbitrary).
Tests: components orthonormal, full-rank reconstruction is exact, variance ratios sum to <= 1,
constant data gives zero ratios instead of 0/0.
"""

from __future__ import annotations

import numpy as np


class PCA:
    """PCA with ``n_components`` kept directions, fitted by the SVD of the centred data."""

    def __init__(self, n_components: int) -> None:
        """Store ``n_components``."""
        self.n_components = n_components
        self.mean_: np.ndarray | None = None
        self.components_: np.ndarray | None = None

    def fit(self, X: np.ndarray) -> PCA:
        """Fit on ``X (n, d)``; returns ``self``."""
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        k = self.n_components
        self.mean_ = X.mean(axis=0)  # (d,)
        _, S, Vt = np.linalg.svd(X - self.mean_, full_matrices=False)  # S (r,), Vt (r, d)
        comps = Vt[:k]  # (k, d)
        pivot = np.argmax(np.abs(comps), axis=1)
        signs = np.sign(comps[np.arange(k), pivot])
        signs[signs == 0] = 1.0
        self.components_ = comps * signs[:, None]
        var = S**2 / (n - 1)  # (r,)
        total = var.sum()
        self.singular_values_ = S[:k].copy()
        self.explained_variance_ = var[:k].copy()
        self.explained_variance_ratio_ = var[:k] / total if total > 0 else np.zeros(k)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Scores ``(X - mean_) @ components_.T``, ``(n, k)``."""
        return (np.asarray(X, dtype=np.float64) - self.mean_) @ self.components_.T

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        """Reconstruction ``Z @ components_ + mean_``, ``(n, d)``."""
        return np.asarray(Z, dtype=np.float64) @ self.components_ + self.mean_

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        """``fit(X)`` then ``transform(X)``."""
        return self.fit(X).transform(X)
