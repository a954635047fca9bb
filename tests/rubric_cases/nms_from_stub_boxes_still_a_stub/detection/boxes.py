"""Canon #18: box format conversions, box area, IoU and generalized IoU (GIoU), ...

TODO: your plan (not implemented yet).
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

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
    """Convert centre-size boxes ``(cx, cy, w, h)`` to corners ``(x1, y1, x2, y2)``.

    Args:
        boxes: ``(..., 4)`` float tensor in ``cxcywh``.

    Returns:
        ``(..., 4)`` tensor in ``xyxy``, same dtype: ``x1 = cx - w/2``, ``x2 = cx + w/2`` (likewise y).

    Raises:
        ValueError: ``boxes`` is not a tensor with a last dimension of 4.

    Source: DETR (Carion et al., 2020), ``box_ops.box_cxcywh_to_xyxy``.
    """
    raise NotImplementedError("box_cxcywh_to_xyxy: not implemented yet")


def box_xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """Convert corner boxes ``(x1, y1, x2, y2)`` to centre-size ``(cx, cy, w, h)``.

    Args:
        boxes: ``(..., 4)`` float tensor in ``xyxy``.

    Returns:
        ``(..., 4)`` tensor in ``cxcywh``, same dtype: ``cx = (x1 + x2)/2``, ``w = x2 - x1`` (likewise y).

    Raises:
        ValueError: ``boxes`` is not a tensor with a last dimension of 4.

    Source: DETR (Carion et al., 2020), ``box_ops.box_xyxy_to_cxcywh``.
    """
    raise NotImplementedError("box_xyxy_to_cxcywh: not implemented yet")


def box_xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """Convert COCO boxes ``(x, y, w, h)`` (top-left corner and size) to ``(x1, y1, x2, y2)``.

    Args:
        boxes: ``(..., 4)`` tensor in COCO ``xywh``.

    Returns:
        ``(..., 4)`` tensor in ``xyxy``, same dtype: ``x2 = x + w``, ``y2 = y + h``.

    Raises:
        ValueError: ``boxes`` is not a tensor with a last dimension of 4.

    Source: the COCO annotation format (Lin et al., 2014).
    """
    raise NotImplementedError("box_xywh_to_xyxy: not implemented yet")


def box_area(boxes: Tensor) -> Tensor:
    """Area ``(x2 - x1) * (y2 - y1)`` of ``xyxy`` boxes.

    Args:
        boxes: ``(N, 4)`` (or any ``(..., 4)``) tensor in ``xyxy`` with ``x1 <= x2`` and ``y1 <= y2``.

    Returns:
        ``(N,)`` tensor, same dtype as ``boxes`` (a half-precision area above 65504 reads inf; the IoU
        functions upcast internally for that reason).

    Raises:
        ValueError: last dimension is not 4, or a box has ``x2 < x1`` or ``y2 < y1``.

    Source: standard; torchvision ``ops.box_area``.
    """
    raise NotImplementedError("box_area: not implemented yet")


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise intersection over union of two sets of ``xyxy`` boxes.

    Args:
        boxes1: ``(N, 4)`` xyxy boxes.
        boxes2: ``(M, 4)`` xyxy boxes.

    Returns:
        ``(N, M)`` IoU in ``[0, 1]``, dtype of the promoted inputs (integers give float32). Zero-area
        pairs give 0, not NaN: the union is clamped at ``finfo(dtype).eps``.

    Raises:
        ValueError: an argument is not ``(N, 4)``, or holds a box with ``x2 < x1`` or ``y2 < y1``
        (the message names ``boxes1`` or ``boxes2``).

    Source: standard (Jaccard index); matches torchvision ``ops.box_iou``.
    """
    raise NotImplementedError("box_iou: not implemented yet")


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise generalized IoU: ``IoU - (area(C) - union) / area(C)``, C the smallest enclosing box.

    Args:
        boxes1: ``(N, 4)`` xyxy boxes (typically predictions; gradients flow to both arguments).
        boxes2: ``(M, 4)`` xyxy boxes.

    Returns:
        ``(N, M)`` GIoU in ``[-1, 1]``, dtype of the promoted inputs (integers give float32); always
        ``<= box_iou``. Both denominators are clamped at ``finfo(dtype).eps``, so degenerate boxes give
        finite values.

    Raises:
        ValueError: an argument is not ``(N, 4)``, or holds a box with ``x2 < x1`` or ``y2 < y1``.

    Source: Rezatofighi et al., "Generalized Intersection over Union" (CVPR 2019), Algorithm 1.
    """
    raise NotImplementedError("generalized_box_iou: not implemented yet")
