"""Alternative correct logistic regression (canon #2): a branch-split sigmoid and a softplus loss.

``sigmoid`` evaluates ``1 / (1 + exp(-z))`` on the non-negative logits and ``exp(z) / (1 + exp(z))``
on the negative ones, so ``exp`` only ever sees non-positive arguments (no overflow), instead of the
reference's ``exp(-logaddexp(0, -z))``. The loss is ``y*softplus(-z) + (1-y)*softplus(z)`` with a
hand-written stable softplus, and the gradient uses ``np.einsum``. Shapes: ``X (n, d)``, ``y (n,)``,
``w (d,)``. Test: it must pass every test of the item.
"""

from __future__ import annotations

import numpy as np


def sigmoid(z):
    z = np.asarray(z, dtype=np.float64)  # (...,)
    out = np.empty_like(z)  # (...,)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    e = np.exp(z[~pos])
    out[~pos] = e / (1.0 + e)
    return out if out.ndim else out[()]


def _softplus(z):
    return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))


def log_sigmoid(z):
    z = np.asarray(z, dtype=np.float64)  # (...,)
    return np.minimum(z, 0.0) - np.log1p(np.exp(-np.abs(z)))


def _data(X, y):
    X = np.asarray(X, dtype=np.float64)  # (...,)
    if X.ndim != 2 or not X.shape[0] or not np.isfinite(X).all():
        raise ValueError("X must be a finite non-empty 2-D array")
    y = np.asarray(y)  # (...,)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},)")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("y must be 0/1")
    return X, y.astype(np.float64)


def logistic_loss_and_grad(w, b, X, y, l2=0.0):
    X, y = _data(X, y)
    if not l2 >= 0:
        raise ValueError("l2 must be >= 0")
    w = np.asarray(w, dtype=np.float64)  # (...,)
    if w.shape != (X.shape[1],):
        raise ValueError("w has the wrong shape")
    n = X.shape[0]
    z = np.einsum("nd,d->n", X, w) + b  # (n,)
    loss = float(np.sum(y * _softplus(-z) + (1 - y) * _softplus(z)) / n) + l2 / 2 * float(np.einsum("d,d->", w, w))  # ()
    r = sigmoid(z) - y  # (n,)
    return loss, np.einsum("nd,n->d", X, r) / n + l2 * w, float(np.sum(r) / n)  # (), (d,), ()


class LogisticRegression:
    def __init__(self, lr=0.1, n_iter=1000, l2=0.0, fit_intercept=True):
        if not lr > 0:
            raise ValueError("lr must be > 0")
        if n_iter < 1:
            raise ValueError("n_iter must be >= 1")
        if not l2 >= 0:
            raise ValueError("l2 must be >= 0")
        self.lr, self.n_iter, self.l2, self.fit_intercept = lr, n_iter, l2, fit_intercept

    def fit(self, X, y):
        X, y = _data(X, y)
        w, b, hist = np.zeros(X.shape[1]), 0.0, []  # (d,), (), list[0]
        for _ in range(self.n_iter):
            loss, gw, gb = logistic_loss_and_grad(w, b, X, y, self.l2)
            hist.append(loss)
            w = w - self.lr * gw
            b = b - self.lr * gb if self.fit_intercept else 0.0
        self.coef_, self.intercept_, self.loss_history_ = w, float(b), hist
        return self

    def decision_function(self, X):
        if not hasattr(self, "coef_"):
            raise RuntimeError("fit first")
        X = np.asarray(X, dtype=np.float64)  # (...,)
        if X.ndim != 2 or X.shape[1] != self.coef_.size:
            raise ValueError("X has the wrong width")
        return np.einsum("nd,d->n", X, self.coef_) + self.intercept_  # (n,)

    def predict_proba(self, X):
        return sigmoid(self.decision_function(X))

    def predict(self, X, threshold=0.5):
        if not (0 < threshold < 1):
            raise ValueError("threshold must be in (0, 1)")
        return (self.predict_proba(X) >= threshold).astype(np.int64)
