"""Multinomial (softmax) logistic regression trained by full-batch gradient descent (canon #3).

The model is ``P(y = k | x) = softmax(x @ W + b)_k`` and the loss the mean negative log-likelihood
plus an L2 penalty on ``W``. Its gradient has the same shape as in the binary case:

    dL/dlogits = (P - Y) / n,    dW = X^T (P - Y) / n + l2 * W,    db = mean(P - Y, axis=0)

with ``Y`` the one-hot labels. The subtle point is numerical: ``softmax`` subtracts the row maximum
before ``exp`` (``exp(1e4)`` overflows to inf, and inf / inf is NaN), and the loss uses
``log_softmax = z - max - log(sum(exp(z - max)))`` instead of ``log(softmax(z))``: for logits
``[0, -1e4]`` the second probability underflows to 0.0 and its log is ``-inf``, whereas
``log_softmax`` returns the finite -1e4.

Shape letters: ``n`` samples, ``d`` features, ``K`` classes. ``X (n, d)``, ``y (n,)`` int64 in
[0, K), ``W (d, K)``, ``b (K,)``, logits and probabilities ``(n, K)``, one-hot ``Y (n, K)``.

Trade-off: the model keeps K weight vectors rather than K - 1 (one class pinned at 0), because the
symmetric form needs no special case and the L2 term (or the zero start of gradient descent) picks
one solution among the equivalent ones. The redundancy is harmless: adding one vector to every
column of ``W`` changes no probability. With K = 2 it reduces to logistic regression exactly,
``P(y = 1) = sigmoid(z_1 - z_0)``, to 1e-12.

What to test: the closed-form softmax of [1, 2, 3] and its cross-entropy, rows summing to 1 and
shift invariance, extreme logits of 1e4, cross-entropy against torch, a finite-difference check of
``softmax_loss_and_grad`` and the closed form of ``dW``, the K = 2 reduction to a sigmoid, accuracy
on three blobs, and a class that never appears in ``y``.
"""

from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis``.

    Args:
        z: real array of any shape, converted to float64. axis: the axis that sums to 1.

    Returns:
        float64 array of the same shape; entries in [0, 1], summing to 1 along ``axis``; finite with
        no overflow warning for every finite ``z`` (logits of +-1e4 included).
    """
    z = np.asarray(z, dtype=np.float64)                                     # (...,)
    shifted = z - z.max(axis=axis, keepdims=True)                           # (...,)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)                              # (...,)


def log_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """``z - logsumexp(z)`` along ``axis``, finite wherever ``z`` is finite.

    Args: z: real array of any shape; axis: the normalised axis. Returns: float64, same shape.
    """
    z = np.asarray(z, dtype=np.float64)                                     # (...,)
    shifted = z - z.max(axis=axis, keepdims=True)                           # (...,)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))  # (...,)


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-likelihood of integer labels under ``softmax(logits)``.

    Args:
        logits: ``(n, K)`` finite real scores. y: ``(n,)`` integer labels in [0, K).

    Returns:
        The mean NLL as a Python float.

    Raises:
        ValueError: ``logits`` not 2-D or non-finite; ``y`` of the wrong length, non-integer or out
            of range.
    """
    logits = _check_logits(logits)                                          # (n, K)
    n, K = logits.shape
    y = _check_labels(y, n, K)                                              # (n,)
    log_probs = log_softmax(logits, axis=1)                                 # (n, K)
    rows = np.arange(n)                                                     # (n,)
    return float(-log_probs[rows, y].mean())


def softmax_loss_and_grad(
    W: np.ndarray, b: np.ndarray, X: np.ndarray, y: np.ndarray, l2: float = 0.0
) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean cross-entropy of ``softmax(X @ W + b)`` plus ``(l2/2)||W||^2``, and its gradient.

    Args:
        W: ``(d, K)`` weights. b: ``(K,)`` biases (not penalised). X: ``(n, d)``.
        y: ``(n,)`` integer labels in [0, K). l2: >= 0.

    Returns:
        ``(L, dW, db)``: float, float64 ``(d, K)``, float64 ``(K,)``.

    Raises:
        ValueError: shape mismatch of ``W``, ``b``, ``X`` or ``y``, bad labels, non-finite inputs,
            ``l2 < 0``.
    """
    X = _check_features(X)                                                  # (n, d)
    W, b = _check_params(W, b, X.shape[1])                                  # (d, K), (K,)
    n, K = X.shape[0], W.shape[1]
    y = _check_labels(y, n, K)                                              # (n,)
    _check_l2(l2)
    logits = X @ W + b                                                      # (n, K)
    log_probs = log_softmax(logits, axis=1)                                 # (n, K)
    one_hot = np.eye(K)[y]                                                  # (n, K)
    loss = float(-(one_hot * log_probs).sum() / n) + 0.5 * l2 * float((W * W).sum())
    residual = np.exp(log_probs) - one_hot                                  # (n, K)  P - Y
    grad_W = X.T @ residual / n + l2 * W                                    # (d, K)
    grad_b = residual.mean(axis=0)                                          # (K,)
    return loss, grad_W, grad_b


class SoftmaxRegression:
    """K-class softmax regression fitted by full-batch gradient descent from ``W = 0, b = 0``.

    ``n_classes=None`` infers ``K = max(y) + 1`` at ``fit``. Attributes after ``fit``: ``coef_``
    float64 ``(d, K)``, ``intercept_`` float64 ``(K,)`` (zeros when ``fit_intercept=False``),
    ``n_classes_``, ``loss_history_`` (objective before each update).

    Raises ValueError in ``__init__`` for ``n_classes < 1``, ``lr <= 0``, ``n_iter < 1``,
    ``l2 < 0``; data errors in ``fit``/``predict``; RuntimeError when predicting before ``fit``.
    """

    def __init__(
        self,
        n_classes: int | None = None,
        lr: float = 0.1,
        n_iter: int = 1000,
        l2: float = 0.0,
        fit_intercept: bool = True,
    ) -> None:
        """Store validated hyperparameters (fail fast, C6)."""
        _check_hyperparameters(n_classes, lr, n_iter)
        _check_l2(l2)
        self.n_classes = None if n_classes is None else int(n_classes)
        self.lr = float(lr)
        self.n_iter = int(n_iter)
        self.l2 = float(l2)
        self.fit_intercept = bool(fit_intercept)

    def fit(self, X: np.ndarray, y: np.ndarray) -> SoftmaxRegression:
        """Run ``n_iter`` GD steps on ``X (n, d)`` and integer labels ``y (n,)``; returns ``self``."""
        X = _check_features(X)                                              # (n, d)
        n, d = X.shape
        y = _check_labels(y, n, self.n_classes or np.iinfo(np.int64).max)   # (n,)
        K = self.n_classes or int(y.max()) + 1
        W = np.zeros((d, K))                                                # (d, K)
        b = np.zeros(K)                                                     # (K,)
        history: list[float] = []
        for _ in range(self.n_iter):
            loss, grad_W, grad_b = softmax_loss_and_grad(W, b, X, y, self.l2)
            history.append(loss)
            W = W - self.lr * grad_W
            if self.fit_intercept:
                b = b - self.lr * grad_b
        self.coef_ = W
        self.intercept_ = b
        self.n_classes_ = K
        self.loss_history_ = history
        return self

    def _logits(self, X: np.ndarray) -> np.ndarray:
        """``X @ coef_ + intercept_`` after the fitted-state and width checks, ``(n, K)``."""
        if not hasattr(self, "coef_"):
            raise RuntimeError("SoftmaxRegression used before fit")
        X = _check_features(X, width=self.coef_.shape[0])                   # (n, d)
        return X @ self.coef_ + self.intercept_                             # (n, K)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities, float64 ``(n, K)``; rows sum to 1."""
        return softmax(self._logits(X), axis=1)                             # (n, K)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Most probable class per row, int64 ``(n,)`` (ties go to the lower class index)."""
        return np.argmax(self._logits(X), axis=1).astype(np.int64)          # (n,)


def _check_labels(y: np.ndarray, n: int, n_classes: int) -> np.ndarray:
    """``y`` as int64 ``(n,)`` with integer values in [0, n_classes) (ValueError naming ``y``)."""
    y = np.asarray(y)                                                       # (...,)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"y must be 1-D with {n} entries, got shape {y.shape}")
    if y.dtype == np.bool_ or not np.issubdtype(y.dtype, np.number):
        raise ValueError(f"y must hold integer class labels, got dtype {y.dtype}")
    if not np.issubdtype(y.dtype, np.integer):
        if not np.isfinite(y).all() or not np.all(y == np.round(y)):
            raise ValueError("y must hold integer class labels, got non-integer values")
    y = y.astype(np.int64)
    if n and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(f"y labels must lie in [0, {n_classes}), got min {y.min()} and max {y.max()}")
    return y


def _check_features(X: np.ndarray, width: int | None = None) -> np.ndarray:
    """``X`` as finite float64 ``(n, d)`` with n >= 1 and ``d == width`` when given."""
    X = np.asarray(X, dtype=np.float64)                                     # (...,)  validated below
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"X must be 2-D (n, d) with n >= 1, got shape {X.shape}")
    if width is not None and X.shape[1] != width:
        raise ValueError(f"X must have {width} columns, got {X.shape[1]}")
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or inf")
    return X


def _check_logits(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)                           # (...,)  validated below
    if logits.ndim != 2 or not np.isfinite(logits).all():
        raise ValueError(f"logits must be a finite 2-D (n, K) array, got shape {logits.shape}")
    return logits                                                           # (n, K)


def _check_params(W: np.ndarray, b: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``W`` finite float64 ``(d, K)`` and ``b`` finite float64 ``(K,)``, or ValueError."""
    W = np.asarray(W, dtype=np.float64)                                     # (...,)  checked below
    if W.ndim != 2 or W.shape[0] != d or not np.isfinite(W).all():
        raise ValueError(f"W must be finite with shape ({d}, K), got shape {W.shape}")
    b = np.asarray(b, dtype=np.float64)                                     # (...,)  checked below
    if b.shape != (W.shape[1],) or not np.isfinite(b).all():
        raise ValueError(f"b must be finite with shape ({W.shape[1]},), got shape {b.shape}")
    return W, b                                                             # (d, K), (K,)


def _check_hyperparameters(n_classes: int | None, lr: float, n_iter: int) -> None:
    if n_classes is not None and (int(n_classes) != n_classes or n_classes < 1):
        raise ValueError(f"n_classes must be None or an integer >= 1, got {n_classes}")
    if not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    if int(n_iter) != n_iter or n_iter < 1:
        raise ValueError(f"n_iter must be an integer >= 1, got {n_iter}")


def _check_l2(l2: float) -> None:
    if not np.isfinite(l2) or l2 < 0:
        raise ValueError(f"l2 must be finite and >= 0, got {l2}")
