"""Canon #19: greedy non-maximum suppression (NMS), plain and per class (``batched_nms``).

Plan: sort the boxes by score (stable, descending, so equal scores keep the lower index first),
compute the (N, N) IoU matrix once, then walk the sorted order and keep a box unless a kept,
higher-ranked box overlaps it by more than the threshold (strict >). Per-class NMS shifts every class
into a disjoint region (offset = class * (span + 1)) so one plain call never lets classes interact.

Trade-off: the IoU matrix costs O(N^2) memory, because one vectorised matmul-like op is far faster
than N^2 Python IoU calls for the few thousand boxes a detector keeps.

What I would test: two overlapping boxes keep the higher score; IoU exactly at the threshold is
kept (strict >); equal scores keep the lower index; empty input gives an empty long tensor; batched
NMS never suppresses across classes, negative coordinates included; results match torchvision.
"""

from __future__ import annotations

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou

__all__ = ["batched_nms", "nms"]


def _check(boxes: Tensor, scores: Tensor, iou_threshold: float) -> None:
    if boxes.ndim != 2 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must be (N, 4), got {tuple(boxes.shape)}")
    if scores.shape != (boxes.shape[0],) or torch.isnan(scores).any():
        raise ValueError("scores must be (N,) without NaN")
    if not 0.0 <= iou_threshold <= 1.0:
        raise ValueError(f"iou_threshold must be in [0, 1], got {iou_threshold}")
    if ((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])).any():
        raise ValueError("boxes must be xyxy with x1 <= x2 and y1 <= y2")


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy NMS: ``(N, 4)`` xyxy boxes and ``(N,)`` scores -> ``(K,)`` long indices by decreasing score.

    Raises ValueError on a bad shape, NaN scores or a threshold outside [0, 1].
    """
    _check(boxes, scores, iou_threshold)
    if boxes.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = torch.sort(scores, descending=True, stable=True).indices  # (N,)
    ranked = boxes[order]  # (N, 4)
    iou = box_iou(ranked, ranked)  # (N, N)
    suppressed = torch.zeros(order.shape[0], dtype=torch.bool, device=boxes.device)  # (N,)
    keep = []
    for i in range(order.shape[0]):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    kept = torch.tensor(keep, dtype=torch.long, device=boxes.device)  # (K,)
    return order[kept]  # (K,)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """Per-class NMS: ``(N, 4)`` boxes, ``(N,)`` scores, ``(N,)`` long class ids -> ``(K,)`` long indices.

    Boxes of different classes never suppress each other. Raises ValueError as :func:`nms`, and for
    ``idxs`` that are not an integer ``(N,)`` tensor.
    """
    _check(boxes, scores, iou_threshold)
    if idxs.shape != scores.shape or idxs.dtype.is_floating_point or idxs.dtype == torch.bool:
        raise ValueError("idxs must be an integer (N,) tensor")
    if boxes.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    span = boxes.max() - boxes.min()
    offsets = idxs.to(boxes.dtype) * (span + 1)  # (N,)
    shifted = boxes - boxes.min() + offsets[:, None]  # (N, 4)
    return nms(shifted, scores, iou_threshold)  # (K,)
