"""Alternative correct NMS (canon #19): a shrinking queue of candidates, one IoU row per kept box
(no (N, N) matrix), and batched_nms as a loop over classes whose results are merged by score.
Shapes: ``N`` boxes, ``R`` remaining candidates, ``K`` kept.
"""

from __future__ import annotations

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou


def _validate(boxes: Tensor, scores: Tensor, iou_threshold: float) -> None:
    if not torch.is_tensor(boxes) or boxes.dim() != 2 or boxes.size(-1) != 4:
        raise ValueError("boxes: expected an (N, 4) tensor")
    if torch.logical_or(boxes[:, 2] < boxes[:, 0], boxes[:, 3] < boxes[:, 1]).any():
        raise ValueError("boxes: x2 < x1 or y2 < y1")
    if not torch.is_tensor(scores) or scores.shape != (boxes.size(0),):
        raise ValueError("scores: expected shape (N,)")
    if scores.isnan().any():
        raise ValueError("scores: NaN found")
    try:
        ok = 0.0 <= float(iou_threshold) <= 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("iou_threshold: must lie in [0, 1]")


def _nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    queue = torch.argsort(scores, descending=True, stable=True)          # (N,)
    kept: list[Tensor] = []
    while queue.numel() > 0:
        best = queue[0]
        kept.append(best)
        rest = queue[1:]                                                  # (R,)
        row = box_iou(boxes[best].unsqueeze(0), boxes[rest])[0]           # (R,)
        queue = rest[row <= iou_threshold]                                # (R,)
    if not kept:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)      # (0,)
    return torch.stack(kept).long()                                       # (K,)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """(N, 4), (N,) -> (K,) long indices, decreasing score."""
    _validate(boxes, scores, iou_threshold)
    return _nms(boxes, scores, iou_threshold)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """Per-class NMS by looping over the classes present."""
    _validate(boxes, scores, iou_threshold)
    if not torch.is_tensor(idxs) or idxs.shape != (boxes.size(0),) or idxs.is_floating_point():
        raise ValueError("idxs: expected integer class ids of shape (N,)")
    pieces = [torch.zeros(0, dtype=torch.long, device=boxes.device)]
    for cls in torch.unique(idxs):
        members = torch.nonzero(idxs == cls).flatten()                    # (N_c,)
        pieces.append(members[_nms(boxes[members], scores[members], iou_threshold)])
    kept = torch.cat(pieces)                                              # (K,)
    # sort by score; ties by lower index: sort indices first, then stable sort by score
    kept = kept.sort().values                                             # (K,)
    order = torch.sort(scores[kept], descending=True, stable=True).indices  # (K,)
    return kept[order]                                                    # (K,)
