from __future__ import annotations

import math

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou


def _check_inputs(boxes: Tensor, scores: Tensor, iou_threshold: float) -> None:
    if boxes.dim() != 2 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must be (N, 4), got shape {tuple(boxes.shape)}")
    if scores.dim() != 1 or scores.shape[0] != boxes.shape[0]:
        raise ValueError(f"scores must be ({boxes.shape[0]},) to match boxes, got {tuple(scores.shape)}")
    if bool(torch.isnan(scores).any()):
        raise ValueError("scores contain NaN, which has no place in a ranking")
    if not (isinstance(iou_threshold, (int, float)) and not math.isnan(iou_threshold)
            and 0.0 <= iou_threshold <= 1.0):
        raise ValueError(f"iou_threshold must be in [0, 1], got {iou_threshold}")


def _walk(overlap: Tensor, iou_threshold: float) -> Tensor:
    n = overlap.shape[0]
    dead = torch.zeros(n, dtype=torch.bool)                           # (N,)
    kept: list[int] = []
    for pos in range(n):
        if bool(dead[pos]):
            continue
        kept.append(pos)
        dead |= overlap[pos] > iou_threshold
    return torch.tensor(kept, dtype=torch.long)                       # (K,)


def _suppress(boxes: Tensor, scores: Tensor, same_group: Tensor | None, iou_threshold: float) -> Tensor:
    order = torch.sort(scores, descending=True, stable=True).indices  # (N,)
    ranked = boxes[order]
    overlap = box_iou(ranked, ranked)                                 # (N, N)
    if same_group is not None:
        overlap = overlap * same_group[order][:, order]
    return order[_walk(overlap, iou_threshold)]                       # (K,)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    _check_inputs(boxes, scores, iou_threshold)
    return _suppress(boxes, scores, None, iou_threshold)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    _check_inputs(boxes, scores, iou_threshold)
    if idxs.dim() != 1 or idxs.shape[0] != boxes.shape[0]:
        raise ValueError(f"idxs must be ({boxes.shape[0]},) class ids, got {tuple(idxs.shape)}")
    same_class = idxs[:, None] == idxs[None, :]                       # (N, N)
    return _suppress(boxes, scores, same_class, iou_threshold)
