"""Focal loss: the sigmoid CE written with ``logsigmoid`` of both signs
and the torchvision-style ``1 - p_t``; the softmax form built on ``F.cross_entropy`` with
``p_t = exp(-CE)``. Shapes: ``N`` samples, ``C`` classes, ``...`` any.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _common(gamma, reduction):
    if not gamma >= 0:
        raise ValueError("gamma: must be >= 0")
    if reduction not in {"none", "mean", "sum"}:
        raise ValueError("reduction: expected none, mean or sum")


def _finish(loss, reduction):
    return {"none": lambda x: x, "mean": torch.mean, "sum": torch.sum}[reduction](loss)


def sigmoid_focal_loss(logits: Tensor, targets: Tensor, alpha=0.25, gamma=2.0, reduction="none") -> Tensor:
    """(...) logits and targets -> (...) or () loss."""
    if targets.shape != logits.shape:
        raise ValueError("targets: shape differs from logits")
    _common(gamma, reduction)
    if alpha is not None and not 0 <= alpha <= 1:
        raise ValueError("alpha: must be in [0, 1]")
    t = targets.to(logits.dtype)
    if not ((t >= 0) & (t <= 1)).all():
        raise ValueError("targets: must be in [0, 1]")
    ce = -(t * F.logsigmoid(logits) + (1 - t) * F.logsigmoid(-logits))
    p = torch.sigmoid(logits)
    p_t = p * t + (1 - p) * (1 - t)
    weight = (1 - p_t) ** gamma
    if alpha is not None:
        weight = weight * (alpha * t + (1 - alpha) * (1 - t))
    return _finish(weight * ce, reduction)


def softmax_focal_loss(logits: Tensor, targets: Tensor, gamma=2.0, alpha=None, reduction="mean") -> Tensor:
    """(N, C) logits, (N,) class ids -> (N,) or () loss."""
    if logits.dim() != 2:
        raise ValueError("logits: expected (N, C)")
    n, c = logits.shape
    if targets.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8) or targets.shape != (n,):
        raise ValueError("targets: expected integer class ids of shape (N,)")
    if n and (targets.min() < 0 or targets.max() >= c):
        raise ValueError("targets: class id out of range")
    _common(gamma, reduction)
    if alpha is not None and (alpha.shape != (c,) or not ((alpha >= 0) & (alpha <= 1)).all()):
        raise ValueError("alpha: expected (C,) weights in [0, 1]")
    ce = F.cross_entropy(logits, targets.long(), reduction="none")        # (N,)
    loss = (1 - torch.exp(-ce)) ** gamma * ce
    if alpha is not None:
        loss = loss * alpha.to(logits.dtype).index_select(0, targets.long())
    return _finish(loss, reduction)
