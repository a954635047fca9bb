"""Multinomial (softmax) logistic regression trained by full-batch gradient descent (canon #3).

Plan: subtract the row max before exp (softmax is shift invariant) instead of exponentiating raw
logits, because exp overflows at ~710; the loss uses log_softmax = z - logsumexp(z) so it never
takes log(0). Gradient of the mean CE w.r.t. the logits is (P - onehot(y)) / n. Tests:
finite-difference gradient check, K=2 matches logistic regression, huge logits stay finite.
"""

from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` with the maximum subtracted first."""
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """``z - logsumexp(z)`` along ``axis``."""
    z = np.asarray(z, dtype=np.float64)
    s = z - z.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-likelihood of integer labels under ``softmax(logits)``."""
    lp = log_softmax(logits, axis=1)  # (n, K)
    y = np.asarray(y)
    return float(-lp[np.arange(lp.shape[0]), y].mean())


def softmax_loss_and_grad(
    W: np.ndarray, b: np.ndarray, X: np.ndarray, y: np.ndarray, l2: float = 0.0
) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean CE of ``softmax(X @ W + b)`` plus ``(l2/2)||W||^2`` and its gradients."""
    X = np.asarray(X, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    y = np.asarray(y)
    n = X.shape[0]
    Z = X @ W + b  # (n, K)
    loss = cross_entropy(Z, y) + 0.5 * l2 * float(np.sum(W * W))
    G = softmax(Z, axis=1)  # (n, K)
    G[np.arange(n), y] -= 1.0
    G /= n
    dW = X.T @ G + l2 * W  # (d, K)
    db = G.sum(axis=0)  # (K,)
    return loss, dW, db


class SoftmaxRegression:
    """K-class softmax regression fitted by full-batch gradient descent from ``W = 0, b = 0``."""

    def __init__(
        self,
        n_classes: int | None = None,
        lr: float = 0.1,
        n_iter: int = 1000,
        l2: float = 0.0,
        fit_intercept: bool = True,
    ) -> None:
        """Store hyperparameters."""
        self.n_classes = n_classes
        self.lr = lr
        self.n_iter = n_iter
        self.l2 = l2
        self.fit_intercept = fit_intercept
        self.coef_: np.ndarray | None = None
        self.intercept_: np.ndarray | None = None
        self.n_classes_: int | None = None
        self.loss_history_: list[float] = []

    def fit(self, X: np.ndarray, y: np.ndarray) -> SoftmaxRegression:
        """Run ``n_iter`` GD steps; returns ``self``."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y).astype(np.int64)
        K = self.n_classes if self.n_classes is not None else int(y.max()) + 1
        W = np.zeros((X.shape[1], K))
        b = np.zeros(K)
        self.loss_history_ = []
        for _ in range(self.n_iter):
            loss, dW, db = softmax_loss_and_grad(W, b, X, y, self.l2)
            self.loss_history_.append(loss)
            W = W - self.lr * dW
            if self.fit_intercept:
                b = b - self.lr * db
        self.coef_, self.intercept_, self.n_classes_ = W, b, K
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities, float64 ``(n, K)``."""
        return softmax(np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_, axis=1)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Most probable class per row (argmax takes the lower index on ties), int64 ``(n,)``."""
        return np.argmax(self.predict_proba(X), axis=1).astype(np.int64)
