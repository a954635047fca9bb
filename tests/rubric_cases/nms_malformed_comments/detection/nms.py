"""Greedy non-maximum suppression, plain and per class, on top of my ``box_iou``.

Plan: sort the boxes by score (highest first, equal scores by lower index), compute the whole IoU
matrix of the sorted boxes once, then walk down the sorted list: a box that nobody has suppressed is
kept, and it suppresses every later box whose IoU with it is strictly above the threshold. For the
per-class version I do not shift boxes apart by class offsets; I zero the IoU between boxes of
different classes, so a box can only be suppressed by a kept box of its own class.

Subtle point: only kept boxes suppress. A box that was suppressed must not knock out a third box
(A kills B, B overlaps C, A does not overlap C: C survives), which is why this is a sequential walk
and not a single threshold on the IoU matrix. The comparison is strict (IoU > threshold), as in
torchvision, so threshold 1.0 keeps everything.

Shapes: boxes (N, 4) xyxy, scores (N,), idxs (N,) class ids, the sorted IoU matrix (N, N), the
suppression flags (N,), and the kept indices (K,) into the original order.

Trade-off: the dense (N, N) matrix costs N^2 memory (200 boxes: 40 000 floats) instead of one IoU
row per kept box, but then each step of the walk is one vectorised OR over a row, and the class
mask is a single broadcast comparison rather than a coordinate offset that fails on negative boxes.

What I would test: the three-box example at thresholds 0.5 and 0.7 (IoU 81/119), strictness at an
IoU of exactly 1/2, that a suppressed box does not suppress, index order for equal scores, empty
input, agreement with a brute-force greedy loop on 200 random boxes, and class separation.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou


def _check_inputs(boxes: Tensor, scores: Tensor, iou_threshold: float) -> None:
    """ValueError naming the argument for a wrong boxes/scores shape, NaN scores or a bad threshold."""
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
    """Greedy pass over an (N, N) IoU matrix already in score order; positions kept, (K,) long."""
    n = overlap.shape[0]
    dead = torch.zeros(n, dtype=torch.bool)                           # (N)
    kept: list[int] = []
    for pos in range(n):
        if bool(dead[pos]):
            continue
        kept.append(pos)
        dead |= overlap[pos] > iou_threshold
    return torch.tensor(kept, dtype=torch.long)                       # (K)


def _suppress(boxes: Tensor, scores: Tensor, same_group: Tensor | None, iou_threshold: float) -> Tensor:
    """Shared body of ``nms`` and ``batched_nms``: original indices (K,) of the kept boxes."""
    order = torch.sort(scores, descending=True, stable=True).indices  # (N)
    ranked = boxes[order]
    overlap = box_iou(ranked, ranked)                                 # (N, N)
    if same_group is not None:
        overlap = overlap * same_group[order][:, order]
    return order[_walk(overlap, iou_threshold)]                       # (K)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Indices (K,) long of the boxes (N, 4) xyxy that survive greedy NMS, by decreasing score.

    A kept box suppresses a later one when their IoU is > iou_threshold. Equal scores are ranked by
    lower index. Raises ValueError for boxes not (N, 4), scores not (N,), NaN scores, or a threshold
    outside [0, 1].
    """
    _check_inputs(boxes, scores, iou_threshold)
    return _suppress(boxes, scores, None, iou_threshold)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """Greedy NMS done independently within each class id of ``idxs`` (N,); (K,) long by score.

    Same errors as ``nms``, plus ValueError when idxs is not (N,).
    """
    _check_inputs(boxes, scores, iou_threshold)
    if idxs.dim() != 1 or idxs.shape[0] != boxes.shape[0]:
        raise ValueError(f"idxs must be ({boxes.shape[0]},) class ids, got {tuple(idxs.shape)}")
    same_class = idxs[:, None] == idxs[None, :]                       # (N, N)
    return _suppress(boxes, scores, same_class, iou_threshold)
