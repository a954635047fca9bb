"""Alternative correct softmax regression (canon #3): log-softmax by a pairwise ``logaddexp`` reduction.

Instead of subtracting the row maximum, ``log_softmax`` is ``z - np.logaddexp.reduce(z, axis)`` (each
pairwise ``logaddexp`` is stable on its own) and ``softmax`` is its exponential. The gradient builds
``P - Y`` with ``np.put_along_axis`` instead of a one-hot matrix and contracts with ``np.einsum``.
Shapes: ``X (n, d)``, ``y (n,)``, ``W (d, K)``, ``b (K,)``, logits ``(n, K)``.
Test: it must pass every test of the item.
"""

from __future__ import annotations

import numpy as np


def log_softmax(z, axis=-1):
    z = np.asarray(z, dtype=np.float64)  # (...,)
    return z - np.expand_dims(np.logaddexp.reduce(z, axis=axis), axis)  # (...,)


def softmax(z, axis=-1):
    return np.exp(log_softmax(z, axis))


def _labels(y, n, K):
    y = np.asarray(y)  # (...,)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},)")
    if not np.all(np.mod(y, 1) == 0):
        raise ValueError("y must be integer labels")
    y = y.astype(np.int64)
    if n and (y.min() < 0 or y.max() >= K):
        raise ValueError("y out of range")
    return y


def cross_entropy(logits, y):
    logits = np.asarray(logits, dtype=np.float64)  # (...,)
    if logits.ndim != 2:
        raise ValueError("logits must be 2-D")
    y = _labels(y, *logits.shape)
    return float(-np.take_along_axis(log_softmax(logits, 1), y[:, None], axis=1).mean())  # ()


def softmax_loss_and_grad(W, b, X, y, l2=0.0):
    X = np.asarray(X, dtype=np.float64)  # (...,)
    W = np.asarray(W, dtype=np.float64)  # (...,)
    b = np.asarray(b, dtype=np.float64)  # (...,)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise ValueError("X must be finite 2-D")
    if W.ndim != 2 or W.shape[0] != X.shape[1]:
        raise ValueError("W has the wrong shape")
    if b.shape != (W.shape[1],):
        raise ValueError("b has the wrong shape")
    if not l2 >= 0:
        raise ValueError("l2 must be >= 0")
    n = X.shape[0]
    y = _labels(y, n, W.shape[1])
    lp = log_softmax(np.einsum("nd,dk->nk", X, W) + b, 1)  # (n, K)
    loss = -float(np.take_along_axis(lp, y[:, None], axis=1).sum()) / n + l2 / 2 * float(np.einsum("dk,dk->", W, W))  # ()
    r = np.exp(lp)  # (n, K)
    np.put_along_axis(r, y[:, None], np.take_along_axis(r, y[:, None], axis=1) - 1.0, axis=1)
    return loss, np.einsum("nd,nk->dk", X, r) / n + l2 * W, r.sum(axis=0) / n  # (), (d, K), (K,)


class SoftmaxRegression:
    def __init__(self, n_classes=None, lr=0.1, n_iter=1000, l2=0.0, fit_intercept=True):
        if n_classes is not None and n_classes < 1:
            raise ValueError("n_classes must be >= 1")
        if not lr > 0:
            raise ValueError("lr must be > 0")
        if n_iter < 1:
            raise ValueError("n_iter must be >= 1")
        if not l2 >= 0:
            raise ValueError("l2 must be >= 0")
        self.n_classes, self.lr, self.n_iter, self.l2, self.fit_intercept = n_classes, lr, n_iter, l2, fit_intercept

    def fit(self, X, y):
        X = np.asarray(X, dtype=np.float64)  # (...,)
        if X.ndim != 2 or not np.isfinite(X).all():
            raise ValueError("X must be finite 2-D")
        yy = _labels(y, X.shape[0], np.iinfo(np.int64).max)
        K = self.n_classes if self.n_classes is not None else int(yy.max()) + 1
        y = _labels(y, X.shape[0], K)
        W, b = np.zeros((X.shape[1], K)), np.zeros(K)  # (d, K), (K,)
        for _ in range(self.n_iter):
            _, gW, gb = softmax_loss_and_grad(W, b, X, y, self.l2)
            W = W - self.lr * gW
            if self.fit_intercept:
                b = b - self.lr * gb
        self.coef_, self.intercept_ = W, b
        return self

    def predict_proba(self, X):
        if not hasattr(self, "coef_"):
            raise RuntimeError("fit first")
        X = np.asarray(X, dtype=np.float64)  # (...,)
        if X.ndim != 2 or X.shape[1] != self.coef_.shape[0]:
            raise ValueError("X has the wrong width")
        return softmax(np.einsum("nd,dk->nk", X, self.coef_) + self.intercept_, 1)  # (n, K)

    def predict(self, X):
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)  # (n,)
