"""Box formats, areas, IoU and generalised IoU in torch, differentiable end to end.

Plan: every box is four numbers on the last axis. The conversions split that axis into two pairs
(a corner or centre, and a size) and glue the result back with one ``torch.cat``. For pairwise
overlap I broadcast the first set against the second, (N, 1, 2) against (1, M, 2): the intersection
is the product of the clamped overlaps along x and y, the union is area1 + area2 - inter, and GIoU
subtracts the share of the smallest enclosing box that the union leaves empty.

Subtle point: two degenerate boxes (points, lines) have a union of 0, and 0 / 0 is NaN in the
forward pass and in the gradient. I divide by ``union.clamp_min(eps)`` with eps the machine epsilon
of the compute dtype, so IoU is 0 there and GIoU of two coincident points is 0 - 0 / eps = 0.
Half-precision inputs are computed in float32 and cast back, because the area of a 300-pixel box
(9e4) already overflows float16's largest value 65504.

Shapes: boxes (..., 4) for the conversions; boxes1 (N, 4) and boxes2 (M, 4) in xyxy for the
pairwise functions, whose overlaps are (N, M, 2) and whose results are (N, M).

Trade-off: the IoU matrix is built densely, N * M entries at once, rather than looping over pairs,
because detection sets are a few hundred boxes and one broadcast beats 10^4 Python iterations;
for 10^5 boxes one would tile it.

What I would test: IoU([0,0,2,2], [1,1,3,3]) = 1/7, touching and disjoint boxes giving 0 (and not a
positive product of two negative sides), GIoU of two unit squares two apart = -7/9, symmetry, the
round trip of every conversion, a non-zero GIoU gradient for a disjoint prediction, and finite
values and gradients for zero-area boxes and float16 inputs.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_last_dim(boxes: Tensor, name: str) -> None:
    """ValueError naming ``name`` unless the last axis holds four coordinates."""
    if boxes.dim() < 1 or boxes.shape[-1] != 4:
        raise ValueError(f"{name} must have 4 coordinates on its last axis, got shape {tuple(boxes.shape)}")


def _check_xyxy(boxes: Tensor, name: str) -> None:
    """ValueError naming ``name`` unless it is an (N, 4) stack of boxes with x2 >= x1 and y2 >= y1."""
    _check_last_dim(boxes, name)
    if boxes.dim() != 2:
        raise ValueError(f"{name} must be (N, 4), got shape {tuple(boxes.shape)}")
    inverted = (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])
    if bool(inverted.any()):
        raise ValueError(f"{name} holds {int(inverted.sum())} box(es) with x2 < x1 or y2 < y1")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16, the dtype itself otherwise."""
    return torch.promote_types(dtype, torch.float32)


def box_cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """(cx, cy, w, h) -> (x1, y1, x2, y2) on the last axis; (..., 4) -> (..., 4), dtype kept.

    Raises ValueError (naming boxes) when the last axis is not 4.
    """
    _check_last_dim(boxes, "boxes")
    centre, size = boxes[..., :2], boxes[..., 2:]
    return torch.cat([centre - size / 2, centre + size / 2], dim=-1)              # (..., 4)


def box_xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """(x1, y1, x2, y2) -> (cx, cy, w, h) on the last axis; (..., 4) -> (..., 4), dtype kept."""
    _check_last_dim(boxes, "boxes")
    low, high = boxes[..., :2], boxes[..., 2:]
    return torch.cat([(low + high) / 2, high - low], dim=-1)                      # (..., 4)


def box_xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """COCO (x, y, w, h) with (x, y) the top-left corner -> (x1, y1, x2, y2); (..., 4) -> (..., 4)."""
    _check_last_dim(boxes, "boxes")
    corner, size = boxes[..., :2], boxes[..., 2:]
    return torch.cat([corner, corner + size], dim=-1)                             # (..., 4)


def box_area(boxes: Tensor) -> Tensor:
    """Areas (N,) of xyxy boxes (N, 4), in the input dtype.

    Raises ValueError (naming boxes) for a wrong shape or an inverted box.
    """
    _check_xyxy(boxes, "boxes")
    size = boxes[:, 2:] - boxes[:, :2]
    return size.prod(dim=-1)                                                      # (N,)


def _overlap(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Pairwise intersection, union and enclosing-box area, each (N, M), in the compute dtype."""
    work = _compute_dtype(boxes1.dtype)
    a = boxes1.to(work)
    b = boxes2.to(work)
    lo_a, hi_a = a[:, None, :2], a[:, None, 2:]                                   # (N, 1, 2), (N, 1, 2)
    lo_b, hi_b = b[None, :, :2], b[None, :, 2:]                                   # (1, M, 2), (1, M, 2)
    sides = (torch.minimum(hi_a, hi_b) - torch.maximum(lo_a, lo_b)).clamp(min=0)  # (N, M, 2)
    inter = sides[..., 0] * sides[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter                             # (N, M)
    hull = torch.maximum(hi_a, hi_b) - torch.minimum(lo_a, lo_b)                  # (N, M, 2)
    return inter, union, hull[..., 0] * hull[..., 1]


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """IoU matrix (N, M) between xyxy boxes (N, 4) and (M, 4), in the input dtype.

    Where the union has zero area the result is 0. Raises ValueError naming boxes1 or boxes2 for a
    wrong shape or an inverted box.
    """
    _check_xyxy(boxes1, "boxes1")
    _check_xyxy(boxes2, "boxes2")
    inter, union, _ = _overlap(boxes1, boxes2)                                    # (N, M), (N, M), (N, M)
    tiny = torch.finfo(inter.dtype).eps
    return (inter / union.clamp_min(tiny)).to(boxes1.dtype)


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """GIoU matrix (N, M) in [-1, 1]: IoU - (hull - union) / hull (Rezatofighi et al., 2019).

    Its gradient is non-zero even for disjoint boxes, which is why DETR trains on it. Same errors
    as ``box_iou``.
    """
    _check_xyxy(boxes1, "boxes1")
    _check_xyxy(boxes2, "boxes2")
    inter, union, hull = _overlap(boxes1, boxes2)                                 # (N, M), (N, M), (N, M)
    tiny = torch.finfo(inter.dtype).eps
    iou = inter / union.clamp_min(tiny)
    empty_share = (hull - union) / hull.clamp_min(tiny)
    return (iou - empty_share).to(boxes1.dtype)
