"""Canon #21: focal loss, the sigmoid (per-logit, RetinaNet) and softmax (multi-class) forms, in torch.

Focal loss multiplies cross-entropy by ``alpha_t * (1 - p_t)**gamma``, where ``p_t`` is the
probability the model gives the true label. An easy example (``p_t`` near 1) is down-weighted by
``(1 - p_t)**gamma``: at ``gamma = 2`` an example with ``p_t = 0.9`` counts 100 times less than under
plain CE, which is how RetinaNet trains on ~100k anchors per image that are almost all easy background.
``alpha_t`` is ``alpha`` for positives and ``1 - alpha`` for negatives (sigmoid form) or a per-class
weight ``alpha[target]`` (softmax form).

The subtle point an interviewer probes: the cross-entropy factor is never ``-log(sigmoid(z))`` or
``log(softmax(z))``, both of which return ``log(0) = -inf`` at a logit of -1e4; it comes from
``binary_cross_entropy_with_logits`` (the ``max(z, 0) - z*t + log1p(exp(-|z|))`` form) and from
``log_softmax``. Likewise ``1 - p_t`` is formed without the cancellation ``1 - 1``: in the sigmoid form
as ``t*sigmoid(-z) + (1 - t)*sigmoid(z)``, in the softmax form as ``-expm1(log p_t)``.

Shape letters: ``...`` any shape (sigmoid form, logits and targets alike), ``N`` samples and ``C``
classes (softmax form).

Trade-off: the modulating factor is computed from ``sigmoid(-z)`` rather than ``1 - sigmoid(z)``
because in float32 ``sigmoid(17) = 1 / (1 + 4.1e-8)`` already evaluates to exactly 1.0 (``1 + 4.1e-8``
rounds to 1: the float32 spacing above 1 is 1.2e-7), so ``1 - p`` would be 0 instead of 4.1e-8. The
loss value barely changes, but the factor stays exact for confident examples. ``reduction="mean"`` is
the plain mean over elements (over ``N`` for the softmax form), not an alpha-weighted mean, so the
loss scale does not move when the class weights change.

What to test: logit 0 / target 1 at (0.25, 2) gives 0.25 * 0.25 * ln 2 = 0.04332169878499658; check
that gamma = 0 without alpha equals ``binary_cross_entropy_with_logits`` (softmax: ``cross_entropy``),
that focal / CE equals ``alpha_t * (1 - p_t)**gamma`` elementwise, and that logits of +-1e4 give finite
losses and gradients for both targets.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sigmoid_focal_loss", "softmax_focal_loss"]

_REDUCTIONS = ("none", "mean", "sum")


def sigmoid_focal_loss(
    logits: Tensor,
    targets: Tensor,
    alpha: float | None = 0.25,
    gamma: float = 2.0,
    reduction: Literal["none", "mean", "sum"] = "none",
) -> Tensor:
    """Binary focal loss on independent logits: ``alpha_t * (1 - p_t)**gamma * BCE(logits, targets)``.

    Args:
        logits: ``(...)`` float logits.
        targets: ``(...)`` same shape, values in ``[0, 1]`` (hard 0/1 labels or soft targets; integer
            and bool tensors are converted to the logits' dtype). Soft targets interpolate linearly:
            ``p_t = p*t + (1 - p)*(1 - t)`` and ``alpha_t = alpha*t + (1 - alpha)*(1 - t)`` (torchvision's form).
        alpha: weight of the positive class in ``[0, 1]`` (negatives get ``1 - alpha``); ``None``
            disables the weighting.
        gamma: focusing parameter ``>= 0``; ``gamma = 0`` with ``alpha=None`` is plain BCE.
        reduction: ``"none"`` (shape of ``logits``), ``"mean"`` or ``"sum"`` (shape ``()``).

    Returns:
        The loss in the logits' dtype.

    Raises:
        ValueError: shape mismatch, targets outside ``[0, 1]``, ``alpha`` outside ``[0, 1]``,
        ``gamma < 0``, unknown ``reduction``.

    Source: Lin et al., "Focal Loss for Dense Object Detection" (ICCV 2017), Eq. 5; torchvision
    ``ops.sigmoid_focal_loss``.
    """
    _check_sigmoid_inputs(logits, targets, alpha, gamma, reduction)
    t = targets.to(logits.dtype)                                            # (...,)
    ce = F.binary_cross_entropy_with_logits(logits, t, reduction="none")    # (...,)  stable log-sum-exp form
    one_minus_p_t = t * torch.sigmoid(-logits) + (1 - t) * torch.sigmoid(logits)  # (...,)
    loss = ce * one_minus_p_t.pow(gamma)                                    # (...,)
    if alpha is not None:
        alpha_t = alpha * t + (1 - alpha) * (1 - t)                         # (...,)
        loss = alpha_t * loss                                               # (...,)
    return _reduce(loss, reduction)


def softmax_focal_loss(
    logits: Tensor,
    targets: Tensor,
    gamma: float = 2.0,
    alpha: Tensor | None = None,
    reduction: Literal["none", "mean", "sum"] = "mean",
) -> Tensor:
    """Multi-class focal loss: ``-alpha[y] * (1 - p_y)**gamma * log p_y`` with ``p = softmax(logits)``.

    Args:
        logits: ``(N, C)`` float logits.
        targets: ``(N,)`` integer class ids in ``[0, C)``.
        gamma: focusing parameter ``>= 0``; ``gamma = 0`` with ``alpha=None`` is ``F.cross_entropy``.
        alpha: optional ``(C,)`` per-class weights in ``[0, 1]``.
        reduction: ``"mean"`` (plain mean over ``N``, not alpha-weighted), ``"sum"`` or ``"none"`` (``(N,)``).

    Returns:
        ``()`` or ``(N,)`` loss in the logits' dtype.

    Raises:
        ValueError: ``logits`` not 2-D float, ``targets`` not an integer ``(N,)`` tensor or outside
        ``[0, C)``, ``alpha`` not ``(C,)`` or outside ``[0, 1]``, ``gamma < 0``, unknown ``reduction``.

    Source: Lin et al. (2017), Sec. 3.2, extended to a softmax over classes.
    """
    _check_softmax_inputs(logits, targets, alpha, gamma, reduction)
    log_p = F.log_softmax(logits, dim=-1)                                   # (N, C)
    log_p_t = log_p.gather(1, targets[:, None].long())[:, 0]                # (N,)
    one_minus_p_t = -torch.expm1(log_p_t)                                   # (N,)
    loss = -one_minus_p_t.pow(gamma) * log_p_t                              # (N,)
    if alpha is not None:
        loss = alpha.to(logits.dtype)[targets] * loss                       # (N,)
    return _reduce(loss, reduction)


def _check_sigmoid_inputs(logits: Tensor, targets: Tensor, alpha: float | None, gamma: float, reduction: str) -> None:
    """ValueError for the argument errors :func:`sigmoid_focal_loss` documents."""
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor")
    if not isinstance(targets, Tensor) or targets.shape != logits.shape:
        shape = tuple(targets.shape) if isinstance(targets, Tensor) else type(targets).__name__
        raise ValueError(f"targets must have the shape of logits {tuple(logits.shape)}, got {shape}")
    _check_gamma_reduction(gamma, reduction)
    if alpha is not None and not (0.0 <= float(alpha) <= 1.0):
        raise ValueError(f"alpha must be in [0, 1] or None, got {alpha!r}")
    t = targets.to(logits.dtype)
    if bool(((t < 0) | (t > 1) | torch.isnan(t)).any()):
        raise ValueError("targets must lie in [0, 1]")


def _check_softmax_inputs(logits: Tensor, targets: Tensor, alpha: Tensor | None, gamma: float, reduction: str) -> None:
    """ValueError for the argument errors :func:`softmax_focal_loss` documents."""
    if not isinstance(logits, Tensor) or logits.ndim != 2 or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor of shape (N, C)")
    N, C = logits.shape
    if (
        not isinstance(targets, Tensor)
        or targets.shape != (N,)
        or targets.is_floating_point()
        or targets.is_complex()
        or targets.dtype == torch.bool
    ):
        raise ValueError(f"targets must be an integer tensor of shape ({N},)")
    if bool(((targets < 0) | (targets >= C)).any()):
        raise ValueError(f"targets must be class ids in [0, {C})")
    _check_gamma_reduction(gamma, reduction)
    if alpha is not None:
        if not isinstance(alpha, Tensor) or alpha.shape != (C,):
            raise ValueError(f"alpha must be None or a tensor of shape ({C},)")
        if bool(((alpha < 0) | (alpha > 1) | torch.isnan(alpha)).any()):
            raise ValueError("alpha must lie in [0, 1]")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    """Apply ``reduction`` ("none", "mean" or "sum") to an elementwise loss."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _check_gamma_reduction(gamma: float, reduction: str) -> None:
    """ValueError naming ``gamma`` (negative or non-finite) or ``reduction`` (unknown string)."""
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}") from None
    if not (math.isfinite(g) and g >= 0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
