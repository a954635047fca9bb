"""Binary logistic regression trained by full-batch gradient descent (canon #2).

The model is ``P(y = 1 | x) = sigmoid(x @ w + b)`` and the loss is the mean negative log-likelihood
written directly in terms of the logit ``z``:

    L = mean(logaddexp(0, z) - y * z) + (l2 / 2) * ||w||^2,    dL/dz = sigmoid(z) - y

The subtle point is numerical: never compute ``log(sigmoid(z))`` or ``log(1 - sigmoid(z))``. In
float64, ``1 - sigmoid(z)`` rounds to exactly 0 once z exceeds about 36.7 (where exp(-z) falls under
half an ulp of 1), so the textbook cross-entropy returns ``inf`` for a confident correct-looking
logit. ``logaddexp(0, z)`` is exact there: with ``z = 1e4`` and label 0 the loss is exactly 1e4.
For the same reason ``sigmoid`` is ``exp(-logaddexp(0, -z))``, which gives exactly 1.0 at
``z = 1000`` and 0.0 at ``z = -1000`` with no overflow warning, where ``1 / (1 + exp(-z))``
overflows ``exp(1000)``.

Shape letters: ``n`` samples, ``d`` features. ``X (n, d)``, ``y (n,)`` labels in {0, 1},
``w (d,)``, logits and probabilities ``(n,)``, residual ``p - y (n,)``.

Trade-off: plain gradient descent rather than Newton-Raphson (IRLS), because one GD step costs
O(n d) and one Newton step O(n d^2 + d^3); Newton needs about 10 steps where GD needs about 1000,
so Newton wins only for small d, and GD is what generalises to the softmax and neural-network items.
Without ``l2`` the loss on separable data has no minimiser (it tends to 0 as ``||w||`` grows), so
the weights keep growing: ``n_iter`` is the regulariser there.

What to test: the closed-form values of ``sigmoid`` and of the loss at ``w = 0`` (``ln 2``), the
extreme-logit loss, a finite-difference check of the gradient, a Newton-Raphson solution with
``l2 = 0.1``, accuracy on separable data, and label-flip symmetry.
"""

from __future__ import annotations

import numpy as np


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    """Logistic function ``1 / (1 + exp(-z))``.

    Args:
        z: real array of any shape (or a scalar), converted to float64.

    Returns:
        float64 array of the same shape as ``z`` with values in [0, 1]; saturates to exactly 0.0
        and 1.0 without overflow warnings.
    """
    z = np.asarray(z, dtype=np.float64)                               # (...,)
    return np.exp(-np.logaddexp(0.0, -z))


def log_sigmoid(z: np.ndarray | float) -> np.ndarray:
    """``log(sigmoid(z))``, finite for every finite ``z`` (``log_sigmoid(-1e4) == -1e4``).

    Args: z: real array of any shape. Returns: float64 array of the same shape, values <= 0.
    """
    z = np.asarray(z, dtype=np.float64)                               # (...,)
    return -np.logaddexp(0.0, -z)


def logistic_loss_and_grad(
    w: np.ndarray, b: float, X: np.ndarray, y: np.ndarray, l2: float = 0.0
) -> tuple[float, np.ndarray, float]:
    """Mean binary cross-entropy from logits, with an L2 penalty on ``w`` only.

    ``L = mean(logaddexp(0, z) - y*z) + (l2/2)||w||^2`` with ``z = X @ w + b``.

    Args:
        w: ``(d,)`` weights. b: intercept (not penalised). X: ``(n, d)``. y: ``(n,)`` in {0, 1}, integer or
            float (``[0., 1.]`` is valid).
        l2: >= 0.

    Returns:
        ``(L, dL/dw, dL/db)``: float, float64 ``(d,)``, float.

    Raises:
        ValueError: shape mismatch of ``w``, ``X`` or ``y``, labels outside {0, 1}, non-finite
            inputs, ``l2 < 0``.
    """
    X = _check_features(X)                                            # (n, d)
    n = X.shape[0]
    y = _check_binary_labels(y, n)                                    # (n,)
    l2 = _check_l2(l2)
    w = _check_weights(w, b, X.shape[1])                              # (d,)
    logits = X @ w + float(b)                                         # (n,)
    nll = float(np.mean(np.logaddexp(0.0, logits) - y * logits))
    loss = nll + 0.5 * l2 * float(w @ w)                              # ()
    residual = sigmoid(logits) - y                                    # (n,)  p - y
    grad_w = X.T @ residual / n + l2 * w                              # (d,)
    grad_b = float(residual.mean())
    return loss, grad_w, grad_b


class LogisticRegression:
    """Binary logistic regression fitted by full-batch gradient descent from ``w = 0, b = 0``.

    Attributes after ``fit``: ``coef_`` float64 ``(d,)``, ``intercept_`` float (0.0 when
    ``fit_intercept=False``), ``loss_history_``: the objective before each of the ``n_iter`` updates.

    Raises ValueError in ``__init__`` for ``lr <= 0``, ``n_iter < 1`` or ``l2 < 0``; data errors in
    ``fit``; RuntimeError when predicting before ``fit``.
    """

    def __init__(
        self, lr: float = 0.1, n_iter: int = 1000, l2: float = 0.0, fit_intercept: bool = True
    ) -> None:
        """Store validated hyperparameters (fail fast, C6)."""
        _check_schedule(lr, n_iter)
        self.lr = float(lr)
        self.n_iter = int(n_iter)
        self.l2 = _check_l2(l2)
        self.fit_intercept = bool(fit_intercept)

    def fit(self, X: np.ndarray, y: np.ndarray) -> LogisticRegression:
        """Run ``n_iter`` full-batch GD steps on ``X (n, d)``, ``y (n,)`` in {0, 1} (integer or float); returns
        ``self``."""
        X = _check_features(X)                                        # (n, d)
        y = _check_binary_labels(y, X.shape[0])                       # (n,)
        w = np.zeros(X.shape[1])                                      # (d,)
        b = 0.0
        history: list[float] = []
        for _ in range(self.n_iter):
            loss, grad_w, grad_b = logistic_loss_and_grad(w, b, X, y, self.l2)
            history.append(loss)
            w = w - self.lr * grad_w
            if self.fit_intercept:
                b -= self.lr * grad_b
        self.coef_ = w
        self.intercept_ = float(b)
        self.loss_history_ = history
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Logits ``X @ coef_ + intercept_``, float64 ``(n,)``.

        Raises RuntimeError before ``fit``; ValueError when ``X`` is not ``(n, d)`` and finite.
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("LogisticRegression used before fit")
        X = _check_features(X, width=self.coef_.shape[0])             # (n, d)
        return X @ self.coef_ + self.intercept_                       # (n,)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """``P(y = 1 | x)`` for each row, float64 ``(n,)`` in [0, 1]."""
        return sigmoid(self.decision_function(X))

    def predict(self, X: np.ndarray, threshold: float = 0.5) -> np.ndarray:
        """Hard labels ``1[p >= threshold]``, int64 ``(n,)``.

        Raises ValueError when ``threshold`` is not strictly inside (0, 1).
        """
        _check_threshold(threshold)
        return (self.predict_proba(X) >= threshold).astype(np.int64)  # (n,)


def _check_features(X: np.ndarray, width: int | None = None) -> np.ndarray:
    """``X`` as float64 ``(n, d)`` with n >= 1, finite entries and ``d == width`` when given."""
    X = np.asarray(X, dtype=np.float64)                               # (...,)  validated below
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
    if width is not None and X.shape[1] != width:
        raise ValueError(f"X must have {width} columns, got {X.shape[1]}")
    if X.shape[0] < 1:
        raise ValueError("X must have at least one row")
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or inf")
    return X


def _check_binary_labels(y: np.ndarray, n: int) -> np.ndarray:
    """``y`` as float64 ``(n,)`` with every entry 0 or 1 (ValueError naming ``y``)."""
    y = np.asarray(y)                                                 # (...,)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"y must be 1-D with {n} entries to match X, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.number) and y.dtype != np.bool_:
        raise ValueError(f"y must hold numeric labels 0/1, got dtype {y.dtype}")
    y = y.astype(np.float64)
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("y must contain only the labels 0 and 1")
    return y


def _check_l2(l2: float) -> float:
    """Ridge strength: finite and >= 0 (ValueError naming ``l2``)."""
    l2 = float(l2)
    if not np.isfinite(l2) or l2 < 0:
        raise ValueError(f"l2 must be finite and >= 0, got {l2}")
    return l2


def _check_weights(w: np.ndarray, b: float, d: int) -> np.ndarray:
    """``w`` as finite float64 ``(d,)`` and ``b`` finite, or ValueError."""
    w = np.asarray(w, dtype=np.float64)                               # (...,)  checked below
    if w.shape != (d,) or not np.isfinite(w).all():
        raise ValueError(f"w must be finite with shape ({d},), got shape {w.shape}")
    if not np.isfinite(b):
        raise ValueError(f"b must be finite, got {b}")
    return w                                                          # (d,)


def _check_schedule(lr: float, n_iter: int) -> None:
    """ValueError unless ``lr > 0`` and ``n_iter`` is an integer ``>= 1``."""
    if not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    if int(n_iter) != n_iter or n_iter < 1:
        raise ValueError(f"n_iter must be an integer >= 1, got {n_iter}")


def _check_threshold(threshold: float) -> None:
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie strictly between 0 and 1, got {threshold}")
