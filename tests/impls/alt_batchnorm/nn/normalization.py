"""Alternative correct BatchNorm (canon #13): channels moved last and flattened to ``(m, C)`` rows,
sums as einsums, and the fused one-line backward instead of the staged dvar/dmu form. LayerNorm is
the reference's. Shapes: m = N*H_in*W_in values per channel, C channels. Test: all nn/batchnorm
tests must pass.
"""

from __future__ import annotations

import numpy as np


def _check_channel_vector(name: str, value: np.ndarray, size: int) -> None:
    if np.shape(value) != (size,):
        raise ValueError(f"{name} must have shape ({size},) to match x, got {np.shape(value)}")




# ---------------------------------------------------------------------------------------------------
# #13 BatchNorm (alternative: channels-last (m, C) layout, einsum sums, fused backward)
# ---------------------------------------------------------------------------------------------------


def _to_rows(a: np.ndarray) -> np.ndarray:
    """``(N, C[, H, W]) -> (m, C)`` with the channel axis last."""
    return np.moveaxis(a, 1, -1).reshape(-1, a.shape[1])            # (m, C)


def _from_rows(rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of :func:`_to_rows` for an input of ``shape``."""
    moved = (shape[0],) + tuple(shape[2:]) + (shape[1],)
    return np.moveaxis(rows.reshape(moved), -1, 1)                  # (N, C) | (N, C, H_in, W_in)


def batchnorm_forward(x, gamma, beta, *, running_mean=None, running_var=None, training=True,
                      momentum=0.1, eps=1e-5):
    """BatchNorm forward over axis 1 of ``x (N, C)`` / ``(N, C, H_in, W_in)``; returns ``(y, cache)``."""
    x = np.asarray(x, dtype=np.float64)                              # (N, C) | (N, C, H_in, W_in)
    if x.ndim != 2 and x.ndim != 4:
        raise ValueError(f"x: expected rank 2 or 4, got rank {x.ndim}")
    C = x.shape[1]
    for name, v in (("gamma", gamma), ("beta", beta), ("running_mean", running_mean), ("running_var", running_var)):
        if v is not None and np.shape(v) != (C,):
            raise ValueError(f"{name}: expected shape ({C},), got {np.shape(v)}")
    if (running_mean is None) ^ (running_var is None):
        raise ValueError("running_mean / running_var: pass both or neither")
    if eps <= 0:
        raise ValueError(f"eps: must be positive, got {eps}")
    if momentum < 0 or momentum > 1:
        raise ValueError(f"momentum: must lie in [0, 1], got {momentum}")
    rows = _to_rows(x)                                               # (m, C)
    m = rows.shape[0]
    if training and m < 2:
        raise ValueError("x: training needs at least two values per channel")
    if not training and running_mean is None:
        raise ValueError("running_mean / running_var: required in eval mode")
    gamma = np.asarray(gamma, dtype=np.float64)                      # (C,)
    beta = np.asarray(beta, dtype=np.float64)                        # (C,)
    if training:
        mu = np.einsum("mc->c", rows) / m                            # (C,)
        centred = rows - mu                                          # (m, C)
        var = np.einsum("mc,mc->c", centred, centred) / m            # (C,)
        if running_mean is not None:
            running_mean[...] = (1 - momentum) * running_mean + momentum * mu
            running_var[...] = (1 - momentum) * running_var + momentum * var * m / (m - 1)
    else:
        mu = np.asarray(running_mean, dtype=np.float64)              # (C,)
        var = np.asarray(running_var, dtype=np.float64)              # (C,)
        centred = rows - mu                                          # (m, C)
    inv_std = 1.0 / np.sqrt(var + eps)                               # (C,)
    xhat = centred * inv_std                                         # (m, C)
    y = _from_rows(xhat * gamma + beta, x.shape)                     # (N, C) | (N, C, H_in, W_in)
    return y, {"xhat": xhat, "inv_std": inv_std, "gamma": gamma, "training": training, "shape": x.shape}


def batchnorm_backward(dy, cache):
    """Fused BatchNorm backward: ``dx = inv_std / m * (m dxhat - sum dxhat - xhat sum(dxhat xhat))``."""
    dy = np.asarray(dy, dtype=np.float64)                            # (N, C) | (N, C, H_in, W_in)
    if dy.shape != cache["shape"]:
        raise ValueError(f"dy: expected shape {cache['shape']}, got {dy.shape}")
    g = _to_rows(dy)                                                 # (m, C)
    xhat, inv_std = cache["xhat"], cache["inv_std"]
    m = g.shape[0]
    dbeta = np.einsum("mc->c", g)                                    # (C,)
    dgamma = np.einsum("mc,mc->c", g, xhat)                          # (C,)
    dxhat = g * cache["gamma"]                                       # (m, C)
    if cache["training"]:
        s1 = np.einsum("mc->c", dxhat)                               # (C,)
        s2 = np.einsum("mc,mc->c", dxhat, xhat)                      # (C,)
        drows = inv_std / m * (m * dxhat - s1 - xhat * s2)           # (m, C)
    else:
        drows = dxhat * inv_std                                      # (m, C)
    return _from_rows(drows, cache["shape"]), dgamma, dbeta         # (N, C) | (N, C, H_in, W_in), (C,), (C,)


# ---------------------------------------------------------------------------------------------------
# #14 LayerNorm
# ---------------------------------------------------------------------------------------------------


def layernorm_forward(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> tuple[np.ndarray, dict]:
    """Layer normalisation over the last axis.

    Args:
        x: ``(..., D)`` array with at least one axis, converted to float64.
        gamma, beta: ``(D,)`` scale and shift.
        eps: added to the variance inside the square root; must be > 0.

    Returns:
        ``(y, cache)``: ``y`` float64 ``(..., D)``; ``cache`` for :func:`layernorm_backward`.

    Raises:
        ValueError: ``x`` is 0-D, ``gamma``/``beta`` shape is not ``(D,)``, or ``eps <= 0``.

    Source: Ba, Kiros & Hinton (2016), "Layer Normalization", eq. 4.
    """
    x = np.asarray(x, dtype=np.float64)                              # (..., D)
    if x.ndim < 1:
        raise ValueError("x must have at least one axis (..., D), got a 0-d array")
    D = x.shape[-1]
    _check_channel_vector("gamma", gamma, D)
    _check_channel_vector("beta", beta, D)
    if not (eps > 0):
        raise ValueError(f"eps must be > 0, got {eps!r}")
    gamma = np.asarray(gamma, dtype=np.float64)                      # (D,)
    beta = np.asarray(beta, dtype=np.float64)                        # (D,)
    mean = x.mean(axis=-1, keepdims=True)                            # (..., 1)
    xc = x - mean                                                    # (..., D)
    var = (xc * xc).mean(axis=-1, keepdims=True)                     # (..., 1)  biased, two-pass
    rstd = 1.0 / np.sqrt(var + eps)                                  # (..., 1)
    xhat = xc * rstd                                                 # (..., D)
    y = xhat * gamma + beta                                          # (..., D)
    return y, {"xhat": xhat, "rstd": rstd, "gamma": gamma}


def layernorm_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`layernorm_forward` given the upstream gradient ``dy``.

    Per row, with ``dxhat = dy * gamma``:
    ``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))``, the last two terms being the
    paths through the row mean and the row variance.

    Args:
        dy: float array with the forward input's shape ``(..., D)``.
        cache: the dict returned by the forward call.

    Returns:
        ``(dx (..., D), dgamma (D,), dbeta (D,))`` in float64; ``dgamma`` and ``dbeta`` are summed
        over every leading axis.

    Raises:
        ValueError: ``dy`` shape differs from the forward input's, or ``cache`` is not a forward cache.

    Source: Ba, Kiros & Hinton (2016); the same chain rule as BatchNorm with the axes swapped.
    """
    if not isinstance(cache, dict) or "rstd" not in cache or "xhat" not in cache:
        raise ValueError("cache must be the dict returned by layernorm_forward")
    xhat, rstd, gamma = cache["xhat"], cache["rstd"], cache["gamma"]
    dy = np.asarray(dy, dtype=np.float64)                            # (..., D)
    if dy.shape != xhat.shape:
        raise ValueError(f"dy must have the forward input's shape {xhat.shape}, got {dy.shape}")
    D = xhat.shape[-1]
    dbeta = dy.reshape(-1, D).sum(axis=0)                            # (D,)
    dgamma = (dy * xhat).reshape(-1, D).sum(axis=0)                  # (D,)
    dxhat = dy * gamma                                               # (..., D)
    dxhat_mean = dxhat.mean(axis=-1, keepdims=True)                  # (..., 1)  mean path
    proj = (dxhat * xhat).mean(axis=-1, keepdims=True)               # (..., 1)  variance path
    dx = rstd * (dxhat - dxhat_mean - xhat * proj)                   # (..., D)
    return dx, dgamma, dbeta
