"""Alternative correct boxes (canon #18): conversions as one 4 x 4 linear map, IoU through per-axis
overlaps, and GIoU as ``IoU - 1 + union / area(C)`` (algebraically equal to the reference form).

Zero unions are handled with ``torch.where`` instead of an eps clamp; half precision is upcast.
Shapes: ``N``, ``M`` boxes of the two sets.
"""

from __future__ import annotations

import torch
from torch import Tensor

# rows: output coordinate; columns: input coordinate
_CXCYWH_TO_XYXY = [[1.0, 0.0, -0.5, 0.0], [0.0, 1.0, 0.0, -0.5], [1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]]
_XYXY_TO_CXCYWH = [[0.5, 0.0, 0.5, 0.0], [0.0, 0.5, 0.0, 0.5], [-1.0, 0.0, 1.0, 0.0], [0.0, -1.0, 0.0, 1.0]]
_XYWH_TO_XYXY = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]


def _need4(boxes: Tensor, name: str) -> None:
    if not isinstance(boxes, Tensor) or boxes.dim() < 1 or boxes.size(-1) != 4:
        raise ValueError(f"{name}: expected a (..., 4) tensor")


def _valid(boxes: Tensor, name: str, two_d: bool) -> None:
    _need4(boxes, name)
    if two_d and boxes.dim() != 2:
        raise ValueError(f"{name}: expected shape (N, 4)")
    x1, y1, x2, y2 = boxes.unbind(-1)                                    # (...,), (...,), (...,), (...,)
    if torch.logical_or(x2 < x1, y2 < y1).any():
        raise ValueError(f"{name}: found a box with x2 < x1 or y2 < y1")


def _linear(boxes: Tensor, rows: list[list[float]]) -> Tensor:
    dtype = boxes.dtype if boxes.is_floating_point() else torch.float32
    mat = torch.tensor(rows, dtype=dtype, device=boxes.device)           # (4, 4)
    return torch.einsum("...j,ij->...i", boxes.to(dtype), mat)           # (..., 4)


def box_cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """(..., 4) cxcywh -> (..., 4) xyxy."""
    _need4(boxes, "boxes")
    return _linear(boxes, _CXCYWH_TO_XYXY)                               # (..., 4)


def box_xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """(..., 4) xyxy -> (..., 4) cxcywh."""
    _need4(boxes, "boxes")
    return _linear(boxes, _XYXY_TO_CXCYWH)                               # (..., 4)


def box_xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """(..., 4) COCO xywh -> (..., 4) xyxy."""
    _need4(boxes, "boxes")
    return _linear(boxes, _XYWH_TO_XYXY)                                 # (..., 4)


def box_area(boxes: Tensor) -> Tensor:
    """(N, 4) xyxy -> (N,) areas."""
    _valid(boxes, "boxes", two_d=False)
    wh = boxes[..., 2:] - boxes[..., :2]                                 # (..., 2)
    return wh.prod(dim=-1)                                               # (...,)


def _prep(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor, torch.dtype]:
    _valid(boxes1, "boxes1", two_d=True)
    _valid(boxes2, "boxes2", two_d=True)
    out = torch.result_type(boxes1, boxes2)
    if not out.is_floating_point:
        out = torch.float32
    work = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    return boxes1.to(work), boxes2.to(work), out


def _overlap(lo1: Tensor, hi1: Tensor, lo2: Tensor, hi2: Tensor) -> Tensor:
    """Length of the overlap of 1-D intervals, pairwise: (N,), (M,) -> (N, M)."""
    hi = torch.minimum(hi1.unsqueeze(1), hi2.unsqueeze(0))               # (N, M)
    lo = torch.maximum(lo1.unsqueeze(1), lo2.unsqueeze(0))               # (N, M)
    return torch.relu(hi - lo)


def _span(lo1: Tensor, hi1: Tensor, lo2: Tensor, hi2: Tensor) -> Tensor:
    """Length of the hull of 1-D intervals, pairwise: (N,), (M,) -> (N, M)."""
    hi = torch.maximum(hi1.unsqueeze(1), hi2.unsqueeze(0))               # (N, M)
    lo = torch.minimum(lo1.unsqueeze(1), lo2.unsqueeze(0))               # (N, M)
    return hi - lo


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    positive = den > 0
    return torch.where(positive, num / torch.where(positive, den, torch.ones_like(den)), torch.zeros_like(num))


def _iou_parts(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    ax1, ay1, ax2, ay2 = a.unbind(1)                                     # (N,), (N,), (N,), (N,)
    bx1, by1, bx2, by2 = b.unbind(1)                                     # (M,), (M,), (M,), (M,)
    inter = _overlap(ax1, ax2, bx1, bx2) * _overlap(ay1, ay2, by1, by2)
    area_a = (ax2 - ax1) * (ay2 - ay1)
    area_b = (bx2 - bx1) * (by2 - by1)
    union = area_a.unsqueeze(1) + area_b.unsqueeze(0) - inter            # (N, M)
    return inter, union


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """(N, 4), (M, 4) xyxy -> (N, M) IoU."""
    a, b, out = _prep(boxes1, boxes2)
    inter, union = _iou_parts(a, b)                                      # (N, M), (N, M)
    return _safe_div(inter, union).to(out)


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """(N, 4), (M, 4) xyxy -> (N, M) GIoU = IoU - 1 + union / area(C)."""
    a, b, out = _prep(boxes1, boxes2)
    inter, union = _iou_parts(a, b)                                      # (N, M), (N, M)
    hull = _span(a[:, 0], a[:, 2], b[:, 0], b[:, 2]) * _span(a[:, 1], a[:, 3], b[:, 1], b[:, 3])
    iou = _safe_div(inter, union)
    # with an empty hull both boxes are the same point: GIoU = IoU = 0
    giou = torch.where(hull > 0, iou - 1 + _safe_div(union, hull), iou)
    return giou.to(out)
