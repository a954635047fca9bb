"""Alternative correct linear regression (canon #1): ridge as an augmented least-squares problem.

Instead of forming the Gram matrix, the ridge problem on centred data is written as ordinary least
squares on the stacked system ``[Xc; sqrt(n*l2) I] w ~ [yc; 0]`` and handed to ``np.linalg.lstsq``
(an SVD), which never squares the condition number and returns the minimum-norm solution when the
design is rank-deficient. Gradients use ``np.einsum`` rather than ``@``. Shapes: ``X (n, d)``,
``y (n,)``, ``w (d,)``, stacked design ``(n + d, d)``. Test: it must pass every test of the item.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def _design(X, y):
    X = np.asarray(X, dtype=np.float64)  # (...,)
    y = np.asarray(y, dtype=np.float64)  # (...,)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got {X.shape}")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must be 1-D with {X.shape[0]} entries, got {y.shape}")
    if not (np.isfinite(X).all() and X.shape[0] > 0):
        raise ValueError("X must be finite and non-empty")
    if not np.isfinite(y).all():
        raise ValueError("y must be finite")
    return X, y


def _l2(l2):
    if not (np.isfinite(l2) and l2 >= 0):
        raise ValueError(f"l2 must be >= 0, got {l2}")
    return float(l2)


def normal_equations(X, y, l2=0.0, fit_intercept=True):
    """Ridge least squares via lstsq on the augmented system; returns ``(w (d,), b)``."""
    X, y = _design(X, y)
    l2 = _l2(l2)
    n, d = X.shape
    x_mean = X.mean(axis=0) if fit_intercept else np.zeros(d)  # (d,)
    y_mean = float(y.mean()) if fit_intercept else 0.0
    A = np.vstack([X - x_mean, np.sqrt(n * l2) * np.eye(d)])  # (n + d, d)
    rhs = np.concatenate([y - y_mean, np.zeros(d)])  # (n + d,)
    w = np.linalg.lstsq(A, rhs, rcond=None)[0]  # (d,)
    b = float(y_mean - np.einsum("d,d->", x_mean, w)) if fit_intercept else 0.0  # ()
    return w, b


def mse_loss_and_grad(w, b, X, y, l2=0.0):
    """Objective ``(1/(2n))||Xw + b - y||^2 + (l2/2)||w||^2`` and its gradient."""
    X, y = _design(X, y)
    l2 = _l2(l2)
    w = np.asarray(w, dtype=np.float64)  # (...,)
    if w.shape != (X.shape[1],):
        raise ValueError(f"w must have shape ({X.shape[1]},), got {w.shape}")
    n = X.shape[0]
    r = np.einsum("nd,d->n", X, w) + b - y  # (n,)
    loss = float(np.einsum("n,n->", r, r)) / (2 * n) + 0.5 * l2 * float(np.einsum("d,d->", w, w))  # ()
    gw = np.einsum("nd,n->d", X, r) / n + l2 * w  # (d,)
    return loss, gw, float(r.sum() / n)


class LinearRegression:
    def __init__(self, fit_intercept=True, l2=0.0, method: Literal["normal", "gd"] = "normal", lr=0.1, n_iter=1000):
        if method not in ("normal", "gd"):
            raise ValueError(f"unknown method {method!r}")
        if not lr > 0:
            raise ValueError("lr must be > 0")
        if n_iter < 1:
            raise ValueError("n_iter must be >= 1")
        self.fit_intercept, self.l2, self.method, self.lr, self.n_iter = fit_intercept, _l2(l2), method, lr, n_iter

    def fit(self, X, y):
        X, y = _design(X, y)
        hist = []
        if self.method == "normal":
            w, b = normal_equations(X, y, self.l2, self.fit_intercept)
        else:
            w, b = np.zeros(X.shape[1]), 0.0  # (d,), ()
            for _ in range(self.n_iter):
                loss, gw, gb = mse_loss_and_grad(w, b, X, y, self.l2)
                hist.append(loss)
                w = w - self.lr * gw
                b = b - self.lr * gb if self.fit_intercept else 0.0
        self.coef_, self.intercept_, self.loss_history_ = w, float(b), hist
        return self

    def predict(self, X):
        if not hasattr(self, "coef_"):
            raise RuntimeError("not fitted")
        X = np.asarray(X, dtype=np.float64)  # (...,)
        if X.ndim != 2 or X.shape[1] != self.coef_.size:
            raise ValueError(f"X must have {self.coef_.size} columns")
        return np.einsum("nd,d->n", X, self.coef_) + self.intercept_  # (n,)
