"""Linear regression by the normal equations and by full-batch gradient descent (canon #1).

Plan: centre X and y so the intercept drops out of the ridge system and is not penalised, solve
``(Xc^T Xc + n*l2*I) w = Xc^T yc`` with lstsq instead of an explicit inverse because the Gram
matrix can be singular when l2 = 0, then recover b. The GD path minimises the same objective.
Tests: GD agrees with the closed form, a finite-difference gradient check, exact recovery on
noise-free data.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def normal_equations(
    X: np.ndarray, y: np.ndarray, l2: float = 0.0, fit_intercept: bool = True
) -> tuple[np.ndarray, float]:
    """Closed-form ridge least squares; the intercept is not penalised.

    Solves ``(Xc^T Xc + n*l2*I) w = Xc^T yc`` and ``b = y_mean - x_mean @ w``.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = X.shape
    if fit_intercept:
        x_mean, y_mean = X.mean(axis=0), y.mean()
        Xc, yc = X - x_mean, y - y_mean
    else:
        Xc, yc = X, y
    A = Xc.T @ Xc + n * l2 * np.eye(d)
    # lstsq handles a singular Gram matrix (l2 = 0, collinear columns) with the min-norm solution
    w = np.linalg.lstsq(A, Xc.T @ yc, rcond=None)[0]
    b = float(y_mean - x_mean @ w) if fit_intercept else 0.0
    return w, b


def mse_loss_and_grad(
    w: np.ndarray, b: float, X: np.ndarray, y: np.ndarray, l2: float = 0.0
) -> tuple[float, np.ndarray, float]:
    """``L = (1/(2n))||Xw + b - y||^2 + (l2/2)||w||^2`` and its gradients w.r.t. ``w`` and ``b``."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    n = X.shape[0]
    r = X @ w + b - y  # (n,)
    loss = 0.5 * float(r @ r) / n + 0.5 * l2 * float(w @ w)
    dw = X.T @ r / n + l2 * w
    db = float(r.sum() / n)
    return loss, dw, db


class LinearRegression:
    """Least-squares linear regressor, fitted in closed form (``"normal"``) or by full-batch GD."""

    def __init__(
        self,
        fit_intercept: bool = True,
        l2: float = 0.0,
        method: Literal["normal", "gd"] = "normal",
        lr: float = 0.1,
        n_iter: int = 1000,
    ) -> None:
        """Store hyperparameters."""
        self.fit_intercept = fit_intercept
        self.l2 = l2
        self.method = method
        self.lr = lr
        self.n_iter = n_iter
        self.coef_: np.ndarray | None = None
        self.intercept_ = 0.0
        self.loss_history_: list[float] = []

    def fit(self, X: np.ndarray, y: np.ndarray) -> LinearRegression:
        """Fit on ``X (n, d)``, ``y (n,)``; returns ``self``."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.loss_history_ = []
        if self.method == "normal":
            self.coef_, self.intercept_ = normal_equations(X, y, self.l2, self.fit_intercept)
            return self
        w = np.zeros(X.shape[1])
        b = 0.0
        for _ in range(self.n_iter):
            loss, dw, db = mse_loss_and_grad(w, b, X, y, self.l2)
            self.loss_history_.append(loss)
            w = w - self.lr * dw
            if self.fit_intercept:
                b -= self.lr * db
        self.coef_, self.intercept_ = w, float(b)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions ``X @ coef_ + intercept_``, float64 ``(n,)``."""
        return np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_
