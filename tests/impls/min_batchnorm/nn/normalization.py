"""Canon #13 BatchNorm and #14 LayerNorm: forward and backward by hand, in ...

Plan: BatchNorm normalises each channel over (N, H, W), LayerNorm each row over its last axis;
both cache xhat and rstd = 1/sqrt(var + eps) so backward uses the compact closed form instead of a
node-by-node chain, because that is both cheaper and numerically cleaner. Batch variance is biased
for normalising; the running variance gets the unbiased estimate (torch). Tests: finite-difference
gradient checks for dx, dgamma, dbeta; eval mode uses the running stats; shapes (N, C, H, W).
"""

from __future__ import annotations

import numpy as np


def _bn_axes(x: np.ndarray) -> tuple[int, ...]:
    """Every axis but the channel axis 1."""
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(a: np.ndarray, ndim: int) -> np.ndarray:
    """Reshape a ``(C,)`` vector to broadcast against an ``ndim``-D input with channels on axis 1."""
    return a.reshape((1, -1) + (1,) * (ndim - 2))


def batchnorm_forward(
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    *,
    running_mean: np.ndarray | None = None,
    running_var: np.ndarray | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[np.ndarray, dict]:
    """Batch normalisation over every axis except the channel axis 1; returns ``(y, cache)``."""
    x = np.asarray(x, dtype=np.float64)  # (N, C) or (N, C, H, W)
    axes = _bn_axes(x)
    g = _per_channel(np.asarray(gamma, dtype=np.float64), x.ndim)
    b = _per_channel(np.asarray(beta, dtype=np.float64), x.ndim)
    if training:
        m = x.size // x.shape[1]  # values per channel
        mu = x.mean(axis=axes)  # (C,)
        var = x.var(axis=axes)  # (C,) biased, used to normalise
        if running_mean is not None and running_var is not None:
            running_mean *= 1.0 - momentum
            running_mean += momentum * mu
            running_var *= 1.0 - momentum
            running_var += momentum * var * m / (m - 1)
    else:
        mu = np.asarray(running_mean, dtype=np.float64)
        var = np.asarray(running_var, dtype=np.float64)
    rstd = 1.0 / np.sqrt(var + eps)  # (C,)
    xhat = (x - _per_channel(mu, x.ndim)) * _per_channel(rstd, x.ndim)
    y = g * xhat + b
    cache = {"xhat": xhat, "rstd": rstd, "gamma": np.asarray(gamma, dtype=np.float64),
             "training": training, "shape": x.shape}
    return y, cache


def batchnorm_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dgamma, dbeta)`` of :func:`batchnorm_forward`."""
    dy = np.asarray(dy, dtype=np.float64)
    xhat, rstd, gamma = cache["xhat"], cache["rstd"], cache["gamma"]
    axes = _bn_axes(dy)
    dgamma = np.sum(dy * xhat, axis=axes)  # (C,)
    dbeta = np.sum(dy, axis=axes)  # (C,)
    scale = _per_channel(gamma * rstd, dy.ndim)
    if not cache["training"]:
        return dy * scale, dgamma, dbeta
    m = dy.size // dy.shape[1]
    # dx = gamma*rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), means per channel
    dx = scale * (dy - _per_channel(dbeta / m, dy.ndim) - xhat * _per_channel(dgamma / m, dy.ndim))
    return dx, dgamma, dbeta


def layernorm_forward(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> tuple[np.ndarray, dict]:
    """Layer normalisation over the last axis; returns ``(y, cache)``."""
    x = np.asarray(x, dtype=np.float64)  # (..., D)
    gamma = np.asarray(gamma, dtype=np.float64)
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = x.var(axis=-1, keepdims=True)  # (..., 1) biased
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd  # (..., D)
    y = gamma * xhat + beta
    return y, {"xhat": xhat, "rstd": rstd, "gamma": gamma}


def layernorm_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx (..., D), dgamma (D,), dbeta (D,))`` of :func:`layernorm_forward`."""
    dy = np.asarray(dy, dtype=np.float64)
    xhat, rstd, gamma = cache["xhat"], cache["rstd"], cache["gamma"]
    lead = tuple(range(dy.ndim - 1))
    dgamma = np.sum(dy * xhat, axis=lead)  # (D,)
    dbeta = np.sum(dy, axis=lead)  # (D,)
    dxhat = dy * gamma
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, dgamma, dbeta
