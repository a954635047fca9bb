"""Canon #13 BatchNorm and #14 LayerNorm: forward and backward by hand, in NumPy.

Both layers standardise activations and then apply a learned affine map ``y = gamma * xhat + beta``;
they differ only in the axes the statistics run over. BatchNorm normalises each channel over the
batch (and the spatial positions), so a sample's output depends on the rest of the batch and the
layer needs running statistics for inference. LayerNorm normalises each sample over its features,
so train and eval are the same computation.

The subtle point is the backward pass. Mean and variance are functions of every input in the
group, so ``dx`` is not ``dy * gamma / std``: it has two more terms, one through the variance and
one through the mean. In training mode they make ``dx`` sum to zero over each group (a shift of
the whole group does not change the output). In BatchNorm eval mode the statistics are constants,
so the backward really is the affine map ``dy * gamma / sqrt(running_var + eps)``. Per LayerNorm
row, with ``dxhat = dy * gamma``, the three terms fuse into
``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))``. Two smaller
points: the running variance is updated with the *unbiased* batch variance (``m / (m - 1)`` times
the biased one, as torch does) while the forward normalises with the biased one, and eps sits
inside the square root so a constant group gives ``xhat = 0`` and finite gradients.

Shape letters: BatchNorm takes ``x (N, C)`` or ``(N, C, H_in, W_in)`` with ``N`` samples, ``C``
channels and ``H_in, W_in`` spatial sizes; its statistics are ``(C,)`` and their broadcast views
``(1, C)`` or ``(1, C, 1, 1)``; ``m = N * H_in * W_in`` values per channel. LayerNorm takes
``x (..., D)`` with ``...`` any leading dims and ``D`` the normalised width; its statistics are
``(..., 1)``.

Trade-off: the variance is computed in two passes, ``mean((x - mu)**2)``, instead of the one-pass
``mean(x**2) - mu**2``. The second pass costs one more read of ``x``, but the one-pass form
subtracts two numbers of size ``mu**2``: for activations with mean 1e8 and spread 1 it loses all
16 digits of float64 (1e16 * 2**-52 ~ 2) and can even return a negative variance, which is why the
NaN-free two-pass form is used here. The backward is written in the staged form (``dxhat``, ``dvar``,
``dmu``) rather than the fused one-liner because each stage is one line of the chain rule you can
check against the forward.

What to test: agreement with ``torch.nn.functional.batch_norm`` / ``layer_norm`` and torch autograd
in float64, running statistics after several updates against torch's buffers, finite differences,
the properties (zero mean and variance ``var / (var + eps)`` per channel, ``sum(dx) = 0`` per group,
shift invariance), constant groups (output equals ``beta``), and a large-offset numerics probe that
breaks the one-pass variance.
"""

from __future__ import annotations

import numpy as np

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
    x = np.asarray(x, dtype=np.float64)                                           # (N, C) | (N, C, H_in, W_in)
    _check_batchnorm_args(x, gamma, beta, running_mean, running_var, training, momentum, eps)
    C = x.shape[1]
    axes = (0,) if x.ndim == 2 else (0, 2, 3)
    m = x.size // C
    bshape = (1, C) + (1,) * (x.ndim - 2)
    gamma = np.asarray(gamma, dtype=np.float64)                                   # (C,)
    beta = np.asarray(beta, dtype=np.float64)                                     # (C,)
    if training:
        mu = x.mean(axis=axes)                                                    # (C,)
        xc = x - mu.reshape(bshape)                                               # (N, C) | (N, C, H_in, W_in)
        var = (xc * xc).mean(axis=axes)                                           # (C,)  biased, two-pass
        if running_mean is not None:
            running_mean *= 1.0 - momentum
            running_mean += momentum * mu
            running_var *= 1.0 - momentum
            running_var += momentum * var * (m / (m - 1))
    else:
        mu = np.asarray(running_mean, dtype=np.float64)                           # (C,)
        var = np.asarray(running_var, dtype=np.float64)                           # (C,)
        xc = x - mu.reshape(bshape)                                               # (N, C) | (N, C, H_in, W_in)
    rstd = 1.0 / np.sqrt(var + eps)                                               # (C,)
    rstd_b = rstd.reshape(bshape)                                                 # (1, C) | (1, C, 1, 1)
    xhat = xc * rstd_b                                                            # (N, C) | (N, C, H_in, W_in)
    y = xhat * gamma.reshape(bshape) + beta.reshape(bshape)                       # (N, C) | (N, C, H_in, W_in)
    cache = {"xhat": xhat, "xc": xc, "rstd": rstd, "gamma": gamma, "training": training, "axes": axes}
    return y, cache


def batchnorm_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`batchnorm_forward` given the upstream gradient ``dy``.

    Args:
        dy: float array with the shape of the forward output, ``(N, C)`` or ``(N, C, H_in, W_in)``.
        cache: the dict returned by the forward call.

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` shaped like ``dy``; ``dgamma``, ``dbeta`` ``(C,)``; float64.
        Training mode differentiates through the batch statistics; in eval mode the running
        statistics are constants, so ``dx = dy * gamma / sqrt(running_var + eps)``.

    Raises:
        ValueError: ``dy`` shape differs from the forward input's, or ``cache`` is not a forward cache.

    Source: Ioffe & Szegedy (2015), section 3 (the chain rule through mu_B and sigma_B^2).
    """
    dy = _check_upstream(dy, cache, ("xhat", "xc", "axes"), "batchnorm_forward")  # (N, C) | (N, C, H_in, W_in)
    xhat, xc, rstd, gamma, axes = cache["xhat"], cache["xc"], cache["rstd"], cache["gamma"], cache["axes"]
    C = xhat.shape[1]
    m = xhat.size // C
    bshape = (1, C) + (1,) * (xhat.ndim - 2)
    rstd_b = rstd.reshape(bshape)                                                 # (1, C) | (1, C, 1, 1)

    dbeta = dy.sum(axis=axes)                                                     # (C,)
    dgamma = (dy * xhat).sum(axis=axes)                                           # (C,)
    dxhat = dy * gamma.reshape(bshape)                                            # (N, C) | (N, C, H_in, W_in)
    if not cache["training"]:
        return dxhat * rstd_b, dgamma, dbeta                                      # (N, C) | (N, C, H_in, W_in), (C,), (C,)
    # var = mean(xc**2) and xhat = xc * (var + eps)**-0.5: d xhat / d var = -0.5 * xc * rstd**3.
    dvar = (dxhat * xc).sum(axis=axes) * (-0.5) * rstd**3                         # (C,)
    # d var / d mu = -2 * mean(xc) = 0, so only the direct path reaches the mean.
    dmu = -(dxhat * rstd_b).sum(axis=axes)                                        # (C,)
    dx = dxhat * rstd_b + (2.0 / m) * dvar.reshape(bshape) * xc                   # (N, C) | (N, C, H_in, W_in)
    dx += dmu.reshape(bshape) / m                                                 # (N, C) | (N, C, H_in, W_in)
    return dx, dgamma, dbeta


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
    x = np.asarray(x, dtype=np.float64)                                           # (..., D)
    _check_layernorm_args(x, gamma, beta, eps)
    gamma = np.asarray(gamma, dtype=np.float64)                                   # (D,)
    beta = np.asarray(beta, dtype=np.float64)                                     # (D,)
    mean = x.mean(axis=-1, keepdims=True)                                         # (..., 1)
    xc = x - mean                                                                 # (..., D)
    var = (xc * xc).mean(axis=-1, keepdims=True)                                  # (..., 1)  biased, two-pass
    rstd = 1.0 / np.sqrt(var + eps)                                               # (..., 1)
    xhat = xc * rstd                                                              # (..., D)
    y = xhat * gamma + beta                                                       # (..., D)
    return y, {"xhat": xhat, "rstd": rstd, "gamma": gamma}


def layernorm_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`layernorm_forward` given the upstream gradient ``dy``.

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
    dy = _check_upstream(dy, cache, ("xhat", "rstd"), "layernorm_forward")        # (..., D)
    xhat, rstd, gamma = cache["xhat"], cache["rstd"], cache["gamma"]
    D = xhat.shape[-1]
    dbeta = dy.reshape(-1, D).sum(axis=0)                                         # (D,)
    dgamma = (dy * xhat).reshape(-1, D).sum(axis=0)                               # (D,)
    dxhat = dy * gamma                                                            # (..., D)
    dxhat_mean = dxhat.mean(axis=-1, keepdims=True)                               # (..., 1)  mean path
    proj = (dxhat * xhat).mean(axis=-1, keepdims=True)                            # (..., 1)  variance path
    dx = rstd * (dxhat - dxhat_mean - xhat * proj)                                # (..., D)
    return dx, dgamma, dbeta


# ---------------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------------


def _check_channel_vector(name: str, value: np.ndarray, size: int) -> None:
    if np.shape(value) != (size,):
        raise ValueError(f"{name} must have shape ({size},) to match x, got {np.shape(value)}")


def _check_batchnorm_args(
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    training: bool,
    momentum: float,
    eps: float,
) -> None:
    """Every documented ValueError of ``batchnorm_forward``, before any running statistic is touched."""
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
    _check_eps(eps)
    if not (0.0 <= momentum <= 1.0):
        raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
    if training and x.size // C == 1:
        raise ValueError("x has one value per channel (N*H_in*W_in == 1): training needs at least two")
    if not training and running_mean is None:
        raise ValueError("running_mean and running_var are required when training=False")


def _check_layernorm_args(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> None:
    if x.ndim < 1:
        raise ValueError("x must have at least one axis (..., D), got a 0-d array")
    _check_channel_vector("gamma", gamma, x.shape[-1])
    _check_channel_vector("beta", beta, x.shape[-1])
    _check_eps(eps)


def _check_eps(eps: float) -> None:
    if not (eps > 0):
        raise ValueError(f"eps must be > 0, got {eps!r}")


def _check_upstream(dy: np.ndarray, cache: dict, keys: tuple[str, ...], forward: str) -> np.ndarray:
    """``dy`` as float64 with the cached forward input's shape; ``cache`` a forward cache."""
    if not isinstance(cache, dict) or not all(key in cache for key in keys):
        raise ValueError(f"cache must be the dict returned by {forward}")
    dy = np.asarray(dy, dtype=np.float64)                                         # (...,)  checked below
    if dy.shape != cache["xhat"].shape:
        raise ValueError(f"dy must have the forward input's shape {cache['xhat'].shape}, got {dy.shape}")
    return dy
