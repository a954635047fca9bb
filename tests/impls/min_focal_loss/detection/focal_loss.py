"""Canon #21: focal loss, the sigmoid (per-logit, RetinaNet) and softmax (multi-class) forms.

Plan: compute the cross-entropy term from logits with the stable built-ins
(``binary_cross_entropy_with_logits`` / ``log_softmax``) instead of taking log of a probability,
then multiply by the modulating factor ``(1 - p_t)**gamma`` and the optional alpha weight, and
reduce. ``gamma = 0`` with no alpha reduces to plain BCE / cross-entropy.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sigmoid_focal_loss", "softmax_focal_loss"]


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
    """Binary focal loss on independent logits: ``alpha_t * (1 - p_t)**gamma * BCE(logits, targets)``."""
    targets = targets.to(logits.dtype)
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    if alpha is not None:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    return _reduce(loss, reduction)


def softmax_focal_loss(
    logits: Tensor,
    targets: Tensor,
    gamma: float = 2.0,
    alpha: Tensor | None = None,
    reduction: Literal["none", "mean", "sum"] = "mean",
) -> Tensor:
    """Multi-class focal loss: ``-alpha[y] * (1 - p_y)**gamma * log p_y`` with ``p = softmax(logits)``."""
    log_p = F.log_softmax(logits, dim=-1)  # (N, C)
    log_p_y = log_p.gather(1, targets.long()[:, None]).squeeze(1)  # (N,)
    p_y = log_p_y.exp()
    loss = -((1 - p_y) ** gamma) * log_p_y  # (N,)
    if alpha is not None:
        loss = alpha.to(logits.dtype)[targets.long()] * loss
    return _reduce(loss, reduction)
