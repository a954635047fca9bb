"""Broken focal loss (canon #21), mistake: alpha weights the negatives and 1 - alpha the positives
(alpha_t swapped), so logit 0 / target 1 gives 0.75 * 0.25 * ln 2 instead of 0.25 * 0.25 * ln 2.
Caught by test_logit_zero_target_one_closed_form, test_two_logits_closed_form_and_default_arguments and
test_ratio_to_bce_is_alpha_t_times_modulating_factor.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sigmoid_focal_loss", "softmax_focal_loss"]

_REDUCTIONS = ("none", "mean", "sum")


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


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    """Apply ``reduction`` ("none", "mean" or "sum") to an elementwise loss."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


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
            and bool tensors are converted to the logits' dtype).
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

    ce = F.binary_cross_entropy_with_logits(logits, t, reduction="none")    # (...,)  stable log-sum-exp form
    one_minus_p_t = t * torch.sigmoid(-logits) + (1 - t) * torch.sigmoid(logits)  # (...,)
    loss = ce * one_minus_p_t.pow(gamma)                                    # (...,)
    if alpha is not None:
        alpha_t = (1 - alpha) * t + alpha * (1 - t)                         # (...,)
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

    log_p = F.log_softmax(logits, dim=-1)                                   # (N, C)
    log_p_t = log_p.gather(1, targets[:, None].long())[:, 0]                # (N,)
    one_minus_p_t = -torch.expm1(log_p_t)                                   # (N,)
    loss = -one_minus_p_t.pow(gamma) * log_p_t                              # (N,)
    if alpha is not None:
        loss = alpha.to(logits.dtype)[targets] * loss                       # (N,)
    return _reduce(loss, reduction)
