"""Canon #18: box format conversions, box area, IoU and generalized IoU (GIoU).

Plan: conversions unbind the last axis and restack. IoU broadcasts the corners of the N boxes
against the M boxes to get the (N, M) intersection rectangle, clamps its sides at zero, and
divides by the union (clamped at eps so empty boxes give 0). GIoU also takes the enclosing box C
and subtracts (area(C) - union) / area(C). Integer inputs are promoted to float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "box_area",
    "box_cxcywh_to_xyxy",
    "box_iou",
    "box_xywh_to_xyxy",
    "box_xyxy_to_cxcywh",
    "generalized_box_iou",
]


def box_cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """Convert centre-size boxes ``(cx, cy, w, h)`` to corners ``(x1, y1, x2, y2)``."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def box_xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """Convert corner boxes ``(x1, y1, x2, y2)`` to centre-size ``(cx, cy, w, h)``."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def box_xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """Convert COCO boxes ``(x, y, w, h)`` (top-left corner and size) to ``(x1, y1, x2, y2)``."""
    x, y, w, h = boxes.unbind(-1)
    return torch.stack([x, y, x + w, y + h], dim=-1)


def box_area(boxes: Tensor) -> Tensor:
    """Area ``(x2 - x1) * (y2 - y1)`` of ``xyxy`` boxes."""
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _promote(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    dtype = torch.promote_types(boxes1.dtype, boxes2.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float32
    return boxes1.to(dtype), boxes2.to(dtype)


def _inter_union(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    # compute in at least float32 so half-precision areas do not overflow
    work = torch.promote_types(boxes1.dtype, torch.float32)
    b1, b2 = boxes1.to(work), boxes2.to(work)
    area1 = box_area(b1)  # (N,)
    area2 = box_area(b2)  # (M,)
    lt = torch.max(b1[:, None, :2], b2[None, :, :2])  # (N, M, 2)
    rb = torch.min(b1[:, None, 2:], b2[None, :, 2:])  # (N, M, 2)
    wh = (rb - lt).clamp(min=0)  # (N, M, 2)
    inter = wh[..., 0] * wh[..., 1]  # (N, M)
    union = area1[:, None] + area2[None, :] - inter  # (N, M)
    return inter, union


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise intersection over union of two sets of ``xyxy`` boxes: ``(N, M)``."""
    boxes1, boxes2 = _promote(boxes1, boxes2)
    dtype = boxes1.dtype
    inter, union = _inter_union(boxes1, boxes2)
    eps = torch.finfo(dtype).eps
    return (inter / union.clamp(min=eps)).to(dtype)


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise generalized IoU: ``IoU - (area(C) - union) / area(C)``, C the smallest enclosing box."""
    boxes1, boxes2 = _promote(boxes1, boxes2)
    dtype = boxes1.dtype
    eps = torch.finfo(dtype).eps
    inter, union = _inter_union(boxes1, boxes2)
    iou = inter / union.clamp(min=eps)
    work = inter.dtype
    b1, b2 = boxes1.to(work), boxes2.to(work)
    lt = torch.min(b1[:, None, :2], b2[None, :, :2])  # (N, M, 2)
    rb = torch.max(b1[:, None, 2:], b2[None, :, 2:])  # (N, M, 2)
    wh = (rb - lt).clamp(min=0)  # (N, M, 2)
    area_c = wh[..., 0] * wh[..., 1]  # (N, M)
    giou = iou - (area_c - union) / area_c.clamp(min=eps)
    return giou.to(dtype)
