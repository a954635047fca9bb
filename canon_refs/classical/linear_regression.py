"""Linear regression by the normal equations and by full-batch gradient descent (canon #1).

Both methods minimise one objective, so on standardised features they agree to 1e-6:

    L(w, b) = (1 / (2n)) * ||X w + b - y||^2 + (l2 / 2) * ||w||^2

The subtle point is that the intercept is not penalised. Solving on centred data,
``Xc = X - x_mean`` and ``yc = y - y_mean``, removes ``b`` from the linear system, and it comes back
afterwards as ``b = y_mean - x_mean @ w``. Appending a column of ones and shrinking it with the other
weights would make the fit depend on where the origin of ``y`` sits, which a ridge fit must not.

Shape letters: ``n`` samples, ``d`` features. ``X (n, d)``, ``y (n,)``, ``w (d,)``, the Gram matrix
``Xc^T Xc`` is ``(d, d)`` and the right-hand side ``Xc^T yc`` is ``(d,)``.

Trade-off: the ``d x d`` system ``(Xc^T Xc + n*l2*I) w = Xc^T yc`` is solved with ``np.linalg.solve``
(one LU factorisation, about d^3/3 flops) rather than by forming the inverse (about d^3 flops and a
less accurate product), and instead of a QR of the ``(n, d)`` data because the Gram matrix is small
when ``n >> d``. The price is that forming the Gram matrix squares the condition number: cond(X) = 1e6
becomes 1e12. Pure column scaling (features 1e-3 and 1e3 apart) is harmless to LU with partial
pivoting, which is why the numerics test still matches lstsq to 1e-6 relative. A Gram matrix whose
condition number reaches 1 / eps = 4.5e15 (a duplicated column) is treated as singular and solved
with ``np.linalg.lstsq``, which returns the minimum-norm solution; its predictions are unique.

What to test: recovery of noise-free weights to 1e-10, agreement with lstsq on ``[X, 1]``, the ridge
closed form, gradient descent against the normal equations with a non-increasing loss history, a
finite-difference check of ``mse_loss_and_grad``, a rank-deficient design, and badly scaled columns.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

_METHODS = ("normal", "gd")


def normal_equations(
    X: np.ndarray, y: np.ndarray, l2: float = 0.0, fit_intercept: bool = True
) -> tuple[np.ndarray, float]:
    """Closed-form (ridge) least squares with an unpenalised intercept.

    Args:
        X: ``(n, d)`` real design matrix.
        y: ``(n,)`` real targets.
        l2: ridge strength >= 0; the objective's penalty is ``(l2 / 2) * ||w||^2``.
        fit_intercept: centre ``X`` and ``y`` and recover ``b``; otherwise ``b = 0.0``.

    Returns:
        ``(w, b)``: ``w`` float64 ``(d,)`` and ``b`` a Python float. A singular system (a duplicated
        column with ``l2 = 0``) raises nothing: any least-squares ``w`` is accepted (predictions are
        unique; the minimum-norm ``w`` is the usual choice).

    Raises:
        ValueError: ``X`` not 2-D, ``y`` not 1-D or of the wrong length, non-finite ``X``/``y``,
            ``l2 < 0``.

    Source: the normal equations ``(Xc^T Xc + n*l2*I) w = Xc^T yc``, ``b = y_mean - x_mean @ w``.
    """
    X, y = _check_design(X, y)
    l2 = _check_l2(l2)
    n, d = X.shape
    if fit_intercept:
        x_mean = X.mean(axis=0)                                            # (d,)
        y_mean = float(y.mean())
        Xc = X - x_mean                                                    # (n, d)
        yc = y - y_mean                                                    # (n,)
    else:
        x_mean = np.zeros(d)                                               # (d,)
        y_mean = 0.0
        Xc, yc = X, y
    gram = Xc.T @ Xc + n * l2 * np.eye(d)                                  # (d, d)
    rhs = Xc.T @ yc                                                        # (d,)
    if np.linalg.cond(gram) < 1.0 / np.finfo(np.float64).eps:
        w = np.linalg.solve(gram, rhs)                                     # (d,)
    else:
        w = np.linalg.lstsq(gram, rhs, rcond=None)[0]                      # (d,)  minimum norm
    b = float(y_mean - x_mean @ w) if fit_intercept else 0.0               # ()
    return w, b


def mse_loss_and_grad(
    w: np.ndarray, b: float, X: np.ndarray, y: np.ndarray, l2: float = 0.0
) -> tuple[float, np.ndarray, float]:
    """Objective and gradient: ``L = (1/(2n))||Xw + b - y||^2 + (l2/2)||w||^2``.

    Args:
        w: ``(d,)`` weights. b: intercept (not penalised). X: ``(n, d)``. y: ``(n,)``. l2: >= 0.

    Returns:
        ``(L, dL/dw, dL/db)``: float, float64 ``(d,)``, float.

    Raises:
        ValueError: shape mismatches of ``w``, ``X`` or ``y``, non-finite inputs, ``l2 < 0``.
    """
    X, y = _check_design(X, y)
    l2 = _check_l2(l2)
    w = _check_weights(w, X.shape[1])                                      # (d,)
    n = X.shape[0]
    residual = X @ w + float(b) - y                                        # (n,)
    loss = 0.5 * float(residual @ residual) / n + 0.5 * l2 * float(w @ w)  # ()
    grad_w = X.T @ residual / n + l2 * w                                   # (d,)
    grad_b = float(residual.mean())
    return loss, grad_w, grad_b


class LinearRegression:
    """Least-squares linear regressor, fitted in closed form (``"normal"``) or by full-batch GD.

    Attributes after ``fit``: ``coef_`` float64 ``(d,)``, ``intercept_`` float (0.0 when
    ``fit_intercept=False``), ``loss_history_`` list of one objective value per GD iteration
    (measured before that iteration's update, so the first is the objective at the start: GD starts from
    ``w = 0`` and ``b = 0``, or ``b = mean(y)`` when it runs on centred data; empty for ``"normal"``).

    Raises ValueError in ``__init__`` for ``l2 < 0``, ``lr <= 0``, ``n_iter < 1`` or an unknown
    ``method``; ``fit``/``predict`` raise ValueError on bad data, ``predict`` before ``fit`` raises
    RuntimeError.
    """

    def __init__(
        self,
        fit_intercept: bool = True,
        l2: float = 0.0,
        method: Literal["normal", "gd"] = "normal",
        lr: float = 0.1,
        n_iter: int = 1000,
    ) -> None:
        """Store validated hyperparameters (fail fast, C6)."""
        _check_schedule(method, lr, n_iter)
        self.fit_intercept = bool(fit_intercept)
        self.l2 = _check_l2(l2)
        self.method = method
        self.lr = float(lr)
        self.n_iter = int(n_iter)

    def fit(self, X: np.ndarray, y: np.ndarray) -> LinearRegression:
        """Fit on ``X (n, d)``, ``y (n,)``; returns ``self``. Raises ValueError on bad data."""
        X, y = _check_design(X, y)
        history: list[float] = []
        if self.method == "normal":
            w, b = normal_equations(X, y, self.l2, self.fit_intercept)
        else:
            w = np.zeros(X.shape[1])                                       # (d,)
            b = 0.0
            for _ in range(self.n_iter):
                loss, grad_w, grad_b = mse_loss_and_grad(w, b, X, y, self.l2)
                history.append(loss)
                w = w - self.lr * grad_w
                if self.fit_intercept:
                    b -= self.lr * grad_b
        self.coef_ = w
        self.intercept_ = float(b)
        self.loss_history_ = history
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions ``X @ coef_ + intercept_``, float64 ``(n,)``.

        Raises RuntimeError before ``fit``; ValueError when ``X`` is not 2-D with ``d`` columns.
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("LinearRegression.predict called before fit")
        X = _check_queries(X, self.coef_.shape[0])                         # (n, d)
        return X @ self.coef_ + self.intercept_                            # (n,)


def _check_design(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Convert ``X (n, d)`` and ``y (n,)`` to float64 and validate rank, length and finiteness.

    Raises ValueError naming ``X`` or ``y``.
    """
    X = np.asarray(X, dtype=np.float64)                                    # (...,)  validated below
    y = np.asarray(y, dtype=np.float64)                                    # (...,)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D (n,), got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y has {y.shape[0]} entries but X has {X.shape[0]} rows")
    if X.shape[0] < 1:
        raise ValueError("X must have at least one row")
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or inf")
    if not np.isfinite(y).all():
        raise ValueError("y contains NaN or inf")
    return X, y


def _check_l2(l2: float) -> float:
    """Validate the ridge strength: finite and >= 0 (ValueError naming ``l2``)."""
    l2 = float(l2)
    if not np.isfinite(l2) or l2 < 0:
        raise ValueError(f"l2 must be finite and >= 0, got {l2}")
    return l2


def _check_weights(w: np.ndarray, d: int) -> np.ndarray:
    """``w`` as float64 ``(d,)``, or ValueError naming ``w``."""
    w = np.asarray(w, dtype=np.float64)                                    # (...,)  checked below
    if w.shape != (d,):
        raise ValueError(f"w must have shape ({d},) to match X, got {w.shape}")
    return w                                                               # (d,)


def _check_schedule(method: str, lr: float, n_iter: int) -> None:
    """ValueError for an unknown ``method``, ``lr <= 0`` or ``n_iter < 1``."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    if int(n_iter) != n_iter or n_iter < 1:
        raise ValueError(f"n_iter must be an integer >= 1, got {n_iter}")


def _check_queries(X: np.ndarray, d: int) -> np.ndarray:
    """``X`` as float64 ``(n, d)``, or ValueError naming ``X``."""
    X = np.asarray(X, dtype=np.float64)                                    # (...,)  checked below
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"X must have shape (n, {d}), got {X.shape}")
    return X                                                               # (n, d)
