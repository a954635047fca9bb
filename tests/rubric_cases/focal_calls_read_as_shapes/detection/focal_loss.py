"""Focal loss in its sigmoid (RetinaNet) and softmax forms, in torch.

Plan: the cross-entropy comes from binary_cross_entropy_with_logits(z, t) and from log_softmax(z), never
from log(sigmoid(z)), and it is scaled by alpha_t and by the modulating factor (1 - p_t) ** gamma. The
factor is formed as t * sigmoid(-z) + (1 - t) * sigmoid(z) rather than 1 - sigmoid(z), because
1 - sigmoid(17) is exactly 0 in float32.

What I would test: the closed form at logit 0 and target 1 (0.25 * 0.25 * ln 2), that gamma = 0 without
alpha is plain cross-entropy, and that logits of +-1e4 give finite losses and gradients.
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
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}") from None
    if not (math.isfinite(g) and g >= 0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
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
    """Binary focal loss on independent logits, alpha_t * (1 - p_t) ** gamma * BCE(z, t).

    Targets lie in [0, 1]; the loss keeps the logits' dtype. Raises ValueError for mismatched inputs,
    targets outside [0, 1], alpha outside [0, 1], gamma < 0 or an unknown reduction.
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
    """Multi-class focal loss, -alpha[y] * (1 - p_y) ** gamma * log p_y with p = softmax(z).

    Targets are integer class ids; the mean is a plain mean over samples. Raises ValueError for bad
    logits, targets or alpha, gamma < 0 or an unknown reduction.
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
