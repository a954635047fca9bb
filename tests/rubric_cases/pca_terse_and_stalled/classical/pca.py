"""PCA: a QR factorisation first, then the SVD of the small R factor.

``Xc = Q R`` with ``R (r, d)``; since ``Q`` has orthonormal columns, ``Xc`` and ``R`` share singular
values and right singular vectors, so the SVD runs on an ``(r, d)`` matrix instead of ``(n, d)``.
Signs are fixed with ``np.take_along_axis`` and a ``copysign``. Scores use ``np.einsum``.
Shapes: ``X (n, d)``, ``R (r, d)``, ``components_ (k, d)``, scores ``(n, k)``.
Test: orthonormal components and exact reconstruction with k = d.
"""

from __future__ import annotations

import numpy as np


class PCA:
    def __init__(self, n_components):
        if n_components < 1:
            raise ValueError("n_components must be >= 1")
        self.n_components = n_components

    @staticmethod
    def _data(X, name):
        X = np.asarray(X, dtype=np.float64)  # (...,)
        if X.ndim != 2 or not np.all(np.isfinite(X)):
            raise ValueError(f"{name} must be a finite 2-D array")
        return X

    def fit(self, X):
        X = self._data(X, "X")
        n, d = X.shape
        if n < 2:
            raise ValueError("X needs at least two samples")
        if self.n_components > min(n, d):
            raise ValueError("n_components is larger than min(n, d)")
        mu = np.einsum("nd->d", X) / n  # (d,)
        R = np.linalg.qr(X - mu, mode="r")  # (r, d)
        _, S, Vt = np.linalg.svd(R, full_matrices=False)  # (r, r), (r,), (r, d)
        big = np.take_along_axis(Vt, np.abs(Vt).argmax(axis=1)[:, None], axis=1)  # (r, 1)
        Vt = Vt * np.copysign(1.0, big)  # (r, d)
        var = S * S / (n - 1)  # (r,)
        k = self.n_components
        self.mean_ = mu
        self.components_ = Vt[:k]  # (k, d)
        self.explained_variance_ = var[:k]  # (k,)
        self.explained_variance_ratio_ = var[:k] / var.sum() if var.sum() > 0 else np.zeros(k)  # (k,)
        self.singular_values_ = S[:k]  # (k,)
        return self

    def transform(self, X):
        if not hasattr(self, "mean_"):
            raise RuntimeError("fit first")
        X = self._data(X, "X")
        if X.shape[1] != self.mean_.size:
            raise ValueError("X has the wrong number of columns")
        return np.einsum("nd,kd->nk", X - self.mean_, self.components_)  # (n, k)

    def inverse_transform(self, Z):
        if not hasattr(self, "mean_"):
            raise RuntimeError("fit first")
        Z = self._data(Z, "Z")
        if Z.shape[1] != self.components_.shape[0]:
            raise ValueError("Z has the wrong number of columns")
        return np.einsum("nk,kd->nd", Z, self.components_) + self.mean_  # (n, d)

    def fit_transform(self, X):
        return self.fit(X).transform(X)  # (n, k)
