"""Canon #19: greedy non-maximum suppression (NMS), plain and per class (``batched_nms``), in torch.

Greedy NMS visits the boxes in order of decreasing score; a box is kept unless a box kept before it
overlaps it with IoU strictly greater than ``iou_threshold`` (strict ``>``, as torchvision), and a
suppressed box suppresses nothing. The pairwise IoU matrix comes from ``box_iou`` of canon #18,
imported absolutely so a learner's IoU is the one exercised here.

The subtle point an interviewer probes: a suppressed box must not suppress others. Box A kills B,
B overlaps C but A does not: C survives. An implementation that marks suppression from every row of
the IoU matrix at once (``(iou > t).triu(1).any(0)``) wrongly kills C. The second one is the order of
equal scores: the sort is stable, so among equal scores the lower index wins, and results do not
depend on how the sort kernel breaks ties.

Shape letters: ``N`` input boxes, ``K`` kept boxes.

Trade-off: the full ``(N, N)`` IoU matrix is computed once instead of one IoU row per kept box,
because at the usual pre-NMS top-k of N = 1000 boxes it is 1e6 entries (4 MB in float32) while the
Python loop over kept boxes then costs one vectorised row update each. ``batched_nms`` translates
each class's boxes by ``class_id * span`` (span = coordinate range + 1) so boxes of different classes
can never overlap, and runs one NMS rather than one per class; the offsets are applied in float64
because an offset of 80 classes x 1000 pixels = 8e4 leaves float32 a spacing of 0.0078 pixels.

What to test: boxes [[0,0,10,10],[1,1,11,11],[20,20,30,30]] with scores [0.9,0.8,0.7] keep [0, 2] at
threshold 0.5 (IoU 81/119 = 0.6807) and all three at 0.7; check empty input, a single box, equal
scores keeping the lower index, threshold 1.0 keeping everything, equality with a brute-force greedy
loop on 200 random boxes, and that batched_nms keeps identical boxes of different classes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou

__all__ = ["batched_nms", "nms"]


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression.

    Args:
        boxes: ``(N, 4)`` xyxy boxes (any real dtype; ``x1 <= x2``, ``y1 <= y2``).
        scores: ``(N,)`` scores, no NaN.
        iou_threshold: in ``[0, 1]``; box j is suppressed by a kept, higher-ranked box i when
            ``IoU(i, j) > iou_threshold`` (strict).

    Returns:
        ``(K,)`` ``torch.long`` indices into ``boxes``, sorted by decreasing score; equal scores keep
        the lower index first (stable sort). Empty input gives ``tensor([], dtype=torch.long)``.

    Raises:
        ValueError: ``boxes`` not ``(N, 4)`` or inverted, ``scores`` not ``(N,)`` or with NaN,
        ``iou_threshold`` outside ``[0, 1]``.

    Source: standard greedy NMS (e.g. Girshick et al., R-CNN, 2014); matches ``torchvision.ops.nms``.
    """
    _check_inputs(boxes, scores, iou_threshold)
    n = boxes.shape[0]
    order = torch.sort(scores, descending=True, stable=True).indices        # (N,)
    iou = box_iou(boxes[order], boxes[order])                               # (N, N)  rows/cols in score order
    overlaps = iou > iou_threshold                                          # (N, N)
    keep = torch.ones(n, dtype=torch.bool, device=boxes.device)             # (N,)
    for i in range(n):
        if keep[i]:
            keep[i + 1 :] &= ~overlaps[i, i + 1 :]
    return order[keep]                                                      # (K,)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """Per-class greedy NMS: boxes suppress each other only when they share a class id.

    Args:
        boxes: ``(N, 4)`` xyxy boxes.
        scores: ``(N,)`` scores, no NaN.
        idxs: ``(N,)`` integer class ids (``torch.long``).
        iou_threshold: in ``[0, 1]``, strict ``>`` as in :func:`nms`.

    Returns:
        ``(K,)`` ``torch.long`` indices into ``boxes``, sorted by decreasing score over all classes
        (ties: lower index first).

    Raises:
        ValueError: as :func:`nms`, plus ``idxs`` not an integer ``(N,)`` tensor.

    Source: ``torchvision.ops.batched_nms`` (one NMS over class-separated boxes).
    """
    _check_inputs(boxes, scores, iou_threshold)
    _check_idxs(idxs, boxes.shape[0])
    if boxes.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)        # (0,)
    wide = boxes.to(torch.float64)                                          # (N, 4)
    span = wide.max() - wide.min() + 1.0                                    # ()
    offsets = (idxs.to(torch.float64) * span)[:, None]                      # (N, 1)
    separated = wide + offsets                                              # (N, 4)  per-class offsets
    return nms(separated, scores, iou_threshold)                             # (K,)


def _check_inputs(boxes: Tensor, scores: Tensor, iou_threshold: float) -> None:
    """Validate the arguments shared by ``nms`` and ``batched_nms`` (docs/contract.md #19 errors)."""
    if not isinstance(boxes, Tensor) or boxes.ndim != 2 or boxes.shape[1] != 4:
        shape = tuple(boxes.shape) if isinstance(boxes, Tensor) else type(boxes).__name__
        raise ValueError(f"boxes must be a tensor of shape (N, 4), got {shape}")
    if bool((boxes[:, 2] < boxes[:, 0]).any()) or bool((boxes[:, 3] < boxes[:, 1]).any()):
        raise ValueError("boxes holds a box with x2 < x1 or y2 < y1; boxes must be xyxy")
    if not isinstance(scores, Tensor) or scores.ndim != 1 or scores.shape[0] != boxes.shape[0]:
        shape = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a tensor of shape (N,) = ({boxes.shape[0]},), got {shape}")
    if bool(torch.isnan(scores).any()):
        raise ValueError("scores contains NaN; NMS needs an ordering of the scores")
    try:
        threshold = float(iou_threshold)
    except (TypeError, ValueError):
        raise ValueError(f"iou_threshold must be a float in [0, 1], got {iou_threshold!r}") from None
    if not 0.0 <= threshold <= 1.0:  # also rejects NaN
        raise ValueError(f"iou_threshold must be in [0, 1], got {iou_threshold}")


def _check_idxs(idxs: Tensor, n: int) -> None:
    """ValueError unless ``idxs`` is an integer tensor of shape ``(n,)``."""
    if not isinstance(idxs, Tensor) or idxs.ndim != 1 or idxs.shape[0] != n:
        shape = tuple(idxs.shape) if isinstance(idxs, Tensor) else type(idxs).__name__
        raise ValueError(f"idxs must be a tensor of shape (N,) = ({n},), got {shape}")
    if idxs.is_floating_point() or idxs.is_complex() or idxs.dtype == torch.bool:
        raise ValueError(f"idxs must hold integer class ids, got dtype {idxs.dtype}")
