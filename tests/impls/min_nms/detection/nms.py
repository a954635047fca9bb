"""Canon #19: greedy non-maximum suppression (NMS), plain and per class (``batched_nms``).

Plan: sort by score (stable, descending), compute the full IoU matrix once, then walk the sorted
list keeping a box unless an already kept box overlaps it by more than the threshold. Per-class NMS
shifts every class into its own disjoint coordinate region (offset = class * (span + 1)) so one
plain NMS call never lets boxes of different classes overlap.
"""

from __future__ import annotations

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou

__all__ = ["batched_nms", "nms"]


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression; returns kept indices sorted by decreasing score."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = torch.sort(scores, descending=True, stable=True).indices  # (N,)
    iou = box_iou(boxes[order], boxes[order])  # (N, N), in sorted order
    n = order.numel()
    suppressed = torch.zeros(n, dtype=torch.bool, device=boxes.device)
    keep = []
    for i in range(n):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long, device=boxes.device)]


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """Per-class greedy NMS: boxes suppress each other only when they share a class id."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    work = boxes.to(torch.promote_types(boxes.dtype, torch.float32))
    span = work.max() - work.min() + 1
    offsets = idxs.to(work.dtype) * span  # (N,)
    return nms(work + offsets[:, None], scores, iou_threshold)
