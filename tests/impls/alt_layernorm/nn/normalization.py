"""Alternative correct LayerNorm (canon #14): leading axes flattened to ``(n, D)`` rows, moments as
einsums, and the fused backward ``inv_std / D * (D dxhat - sum dxhat - xhat sum(dxhat xhat))``
instead of the mean/projection form. BatchNorm is the reference's. Test: all nn/layernorm tests
must pass.
"""

from __future__ import annotations

import numpy as np


def _check_channel_vector(name: str, value: np.ndarray, size: int) -> None:
    if np.shape(value) != (size,):
        raise ValueError(f"{name} must have shape ({size},) to match x, got {np.shape(value)}")


# ---------------------------------------------------------------------------------------------------
# #13 BatchNorm
# ---------------------------------------------------------------------------------------------------


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
    """Batch normalisation over every axis except the channel axis 1.

    Args:
        x: ``(N, C)`` or ``(N, C, H_in, W_in)`` array, converted to float64.
        gamma, beta: ``(C,)`` scale and shift.
        running_mean, running_var: optional ``(C,)`` float arrays. In training they are updated in
            place, ``r <- (1 - momentum) * r + momentum * batch_stat``, with the unbiased batch
            variance; in eval they are the statistics used (both required).
        training: batch statistics (True) or running statistics (False).
        momentum: weight of the new batch statistic, in [0, 1] (torch's convention).
        eps: added to the variance inside the square root; must be > 0.

    Returns:
        ``(y, cache)``: ``y`` float64 with the shape of ``x``; ``cache`` holds what
        :func:`batchnorm_backward` needs.

    Raises:
        ValueError: ``x`` not 2-D or 4-D; ``gamma``/``beta``/running shapes not ``(C,)``; only one of
        the running statistics given; training with one value per channel (``N*H_in*W_in == 1``);
        eval without running statistics; ``eps <= 0``; ``momentum`` outside [0, 1]. All checks run
        before the running statistics are touched.

    Source: Ioffe & Szegedy (2015), Algorithm 1 (forward) and Algorithm 2 (inference).
    """
    x = np.asarray(x, dtype=np.float64)                              # (N, C) | (N, C, H_in, W_in)
    if x.ndim not in (2, 4):
        raise ValueError(f"x must be 2-D (N, C) or 4-D (N, C, H_in, W_in), got shape {x.shape}")
    C = x.shape[1]
    _check_channel_vector("gamma", gamma, C)
    _check_channel_vector("beta", beta, C)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must be given together (or both None)")
    for name, stat in (("running_mean", running_mean), ("running_var", running_var)):
        if stat is not None:
            _check_channel_vector(name, stat, C)
            if training and not (isinstance(stat, np.ndarray) and np.issubdtype(stat.dtype, np.floating)):
                raise ValueError(f"{name} must be a float np.ndarray, because it is updated in place")
    if not (eps > 0):
        raise ValueError(f"eps must be > 0, got {eps!r}")
    if not (0.0 <= momentum <= 1.0):
        raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
    axes = (0,) if x.ndim == 2 else (0, 2, 3)
    m = x.size // C
    if training and m == 1:
        raise ValueError("x has one value per channel (N*H_in*W_in == 1): training needs at least two")
    if not training and running_mean is None:
        raise ValueError("running_mean and running_var are required when training=False")

    bshape = (1, C) + (1,) * (x.ndim - 2)
    gamma = np.asarray(gamma, dtype=np.float64)                      # (C,)
    beta = np.asarray(beta, dtype=np.float64)                        # (C,)
    if training:
        mu = x.mean(axis=axes)                                       # (C,)
        xc = x - mu.reshape(bshape)                                  # (N, C) | (N, C, H_in, W_in)
        var = (xc * xc).mean(axis=axes)                              # (C,)  biased, two-pass
        if running_mean is not None:
            running_mean *= 1.0 - momentum
            running_mean += momentum * mu
            running_var *= 1.0 - momentum
            running_var += momentum * var * (m / (m - 1))
    else:
        mu = np.asarray(running_mean, dtype=np.float64)              # (C,)
        var = np.asarray(running_var, dtype=np.float64)              # (C,)
        xc = x - mu.reshape(bshape)                                  # (N, C) | (N, C, H_in, W_in)
    rstd = 1.0 / np.sqrt(var + eps)                                  # (C,)
    rstd_b = rstd.reshape(bshape)                                    # (1, C) | (1, C, 1, 1)
    xhat = xc * rstd_b                                               # (N, C) | (N, C, H_in, W_in)
    y = xhat * gamma.reshape(bshape) + beta.reshape(bshape)          # (N, C) | (N, C, H_in, W_in)
    cache = {"xhat": xhat, "xc": xc, "rstd": rstd, "gamma": gamma, "training": training, "axes": axes}
    return y, cache


def batchnorm_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`batchnorm_forward` given the upstream gradient ``dy``.

    Args:
        dy: float array with the shape of the forward output, ``(N, C)`` or ``(N, C, H_in, W_in)``.
        cache: the dict returned by the forward call.

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` shaped like ``dy``; ``dgamma``, ``dbeta`` ``(C,)``; float64.
        Training mode back-propagates through the batch mean and variance (``dvar``, ``dmu``);
        eval mode is the affine map ``dx = dy * gamma / sqrt(running_var + eps)``.

    Raises:
        ValueError: ``dy`` shape differs from the forward input's, or ``cache`` is not a forward cache.

    Source: Ioffe & Szegedy (2015), section 3 (the chain rule through mu_B and sigma_B^2).
    """
    if not isinstance(cache, dict) or "xhat" not in cache:
        raise ValueError("cache must be the dict returned by batchnorm_forward")
    dy = np.asarray(dy, dtype=np.float64)                            # (N, C) | (N, C, H_in, W_in)
    xhat, xc, rstd, gamma, axes = cache["xhat"], cache["xc"], cache["rstd"], cache["gamma"], cache["axes"]
    if dy.shape != xhat.shape:
        raise ValueError(f"dy must have the forward input's shape {xhat.shape}, got {dy.shape}")
    C = xhat.shape[1]
    m = xhat.size // C
    bshape = (1, C) + (1,) * (xhat.ndim - 2)
    rstd_b = rstd.reshape(bshape)                                    # (1, C) | (1, C, 1, 1)

    dbeta = dy.sum(axis=axes)                                        # (C,)
    dgamma = (dy * xhat).sum(axis=axes)                              # (C,)
    dxhat = dy * gamma.reshape(bshape)                               # (N, C) | (N, C, H_in, W_in)
    if not cache["training"]:
        return dxhat * rstd_b, dgamma, dbeta                         # (N, C) | (N, C, H_in, W_in), (C,), (C,)
    # var = mean(xc**2) and xhat = xc * (var + eps)**-0.5: d xhat / d var = -0.5 * xc * rstd**3.
    dvar = (dxhat * xc).sum(axis=axes) * (-0.5) * rstd**3            # (C,)
    # d var / d mu = -2 * mean(xc) = 0, so only the direct path reaches the mean.
    dmu = -(dxhat * rstd_b).sum(axis=axes)                           # (C,)
    dx = dxhat * rstd_b + (2.0 / m) * dvar.reshape(bshape) * xc     # (N, C) | (N, C, H_in, W_in)
    dx += dmu.reshape(bshape) / m                                    # (N, C) | (N, C, H_in, W_in)
    return dx, dgamma, dbeta


# ---------------------------------------------------------------------------------------------------
# #14 LayerNorm (alternative: rows flattened to (n, D), einsum moments, fused backward)
# ---------------------------------------------------------------------------------------------------


def layernorm_forward(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis of ``x (..., D)``; returns ``(y, cache)``."""
    x = np.asarray(x, dtype=np.float64)                              # (..., D)
    if x.ndim == 0:
        raise ValueError("x: need at least one axis")
    D = x.shape[-1]
    for name, v in (("gamma", gamma), ("beta", beta)):
        if np.shape(v) != (D,):
            raise ValueError(f"{name}: expected shape ({D},), got {np.shape(v)}")
    if eps <= 0:
        raise ValueError(f"eps: must be positive, got {eps}")
    gamma = np.asarray(gamma, dtype=np.float64)                      # (D,)
    rows = x.reshape(-1, D)                                          # (n, D)
    mu = np.einsum("nd->n", rows)[:, None] / D                       # (n, 1)
    centred = rows - mu                                              # (n, D)
    var = np.einsum("nd,nd->n", centred, centred)[:, None] / D       # (n, 1)
    inv_std = 1.0 / np.sqrt(var + eps)                               # (n, 1)
    xhat = centred * inv_std                                         # (n, D)
    y = (xhat * gamma + beta).reshape(x.shape)                       # (..., D)
    return y, {"xhat": xhat, "inv_std": inv_std, "gamma": gamma, "shape": x.shape}


def layernorm_backward(dy, cache):
    """Fused LayerNorm backward: ``dx = inv_std / D * (D dxhat - sum dxhat - xhat sum(dxhat xhat))``."""
    dy = np.asarray(dy, dtype=np.float64)                            # (..., D)
    if dy.shape != cache["shape"]:
        raise ValueError(f"dy: expected shape {cache['shape']}, got {dy.shape}")
    xhat, inv_std = cache["xhat"], cache["inv_std"]
    D = xhat.shape[1]
    g = dy.reshape(-1, D)                                            # (n, D)
    dbeta = np.einsum("nd->d", g)                                    # (D,)
    dgamma = np.einsum("nd,nd->d", g, xhat)                          # (D,)
    dxhat = g * cache["gamma"]                                       # (n, D)
    s1 = np.einsum("nd->n", dxhat)[:, None]                          # (n, 1)
    s2 = np.einsum("nd,nd->n", dxhat, xhat)[:, None]                 # (n, 1)
    dx = (inv_std / D * (D * dxhat - s1 - xhat * s2)).reshape(dy.shape)  # (..., D)
    return dx, dgamma, dbeta
