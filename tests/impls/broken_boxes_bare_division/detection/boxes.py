"""Broken boxes (canon #18), mistake: IoU divides by the bare union (no clamp at finfo.eps), so two
zero-area boxes give 0 / 0 = NaN. Caught by test_zero_area_boxes_give_finite_values and
test_zero_area_boxes_give_finite_gradients.
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


def _check_last_dim(boxes: Tensor, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``boxes`` is a tensor whose last dim is 4."""
    if not isinstance(boxes, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(boxes).__name__}")
    if boxes.ndim == 0 or boxes.shape[-1] != 4:
        raise ValueError(f"{name} must have a last dimension of size 4, got shape {tuple(boxes.shape)}")


def _check_xyxy(boxes: Tensor, name: str, *, matrix: bool) -> None:
    """Validate an ``xyxy`` box tensor: last dim 4 (and 2-D when ``matrix``), ``x1 <= x2``, ``y1 <= y2``."""
    _check_last_dim(boxes, name)
    if matrix and boxes.ndim != 2:
        raise ValueError(f"{name} must have shape (N, 4), got shape {tuple(boxes.shape)}")
    if bool((boxes[..., 2] < boxes[..., 0]).any()) or bool((boxes[..., 3] < boxes[..., 1]).any()):
        raise ValueError(f"{name} holds a box with x2 < x1 or y2 < y1; boxes must be xyxy with x1 <= x2, y1 <= y2")


def _compute_dtype(*tensors: Tensor) -> tuple[torch.dtype, torch.dtype]:
    """The (output dtype, internal dtype) pair: integers become float32, half precision runs in float32."""
    out_dtype = tensors[0].dtype
    for t in tensors[1:]:
        out_dtype = torch.promote_types(out_dtype, t.dtype)
    if not out_dtype.is_floating_point:
        out_dtype = torch.float32
    work_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    return out_dtype, work_dtype


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
    _check_last_dim(boxes, "boxes")
    cx, cy, w, h = boxes.unbind(-1)                                         # (...,), (...,), (...,), (...,)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)  # (..., 4)


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
    _check_last_dim(boxes, "boxes")
    x1, y1, x2, y2 = boxes.unbind(-1)                                       # (...,), (...,), (...,), (...,)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)  # (..., 4)


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
    _check_last_dim(boxes, "boxes")
    x, y, w, h = boxes.unbind(-1)                                           # (...,), (...,), (...,), (...,)
    return torch.stack([x, y, x + w, y + h], dim=-1)                        # (..., 4)


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
    _check_xyxy(boxes, "boxes", matrix=False)
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])  # (...,)


def _pairwise_inter_union(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    """Pairwise intersection and union areas of validated ``(N, 4)`` and ``(M, 4)`` xyxy boxes."""
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])   # (N,)
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])   # (M,)
    lt = torch.maximum(boxes1[:, None, :2], boxes2[None, :, :2])            # (N, M, 2)
    rb = torch.minimum(boxes1[:, None, 2:], boxes2[None, :, 2:])            # (N, M, 2)
    wh = (rb - lt).clamp(min=0)                                             # (N, M, 2)
    inter = wh[..., 0] * wh[..., 1]                                         # (N, M)
    union = area1[:, None] + area2[None, :] - inter                         # (N, M)
    return inter, union


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
    _check_xyxy(boxes1, "boxes1", matrix=True)
    _check_xyxy(boxes2, "boxes2", matrix=True)
    out_dtype, work_dtype = _compute_dtype(boxes1, boxes2)
    inter, union = _pairwise_inter_union(boxes1.to(work_dtype), boxes2.to(work_dtype))  # (N, M), (N, M)
    iou = inter / union                                                     # (N, M)
    return iou.to(out_dtype)


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
    _check_xyxy(boxes1, "boxes1", matrix=True)
    _check_xyxy(boxes2, "boxes2", matrix=True)
    out_dtype, work_dtype = _compute_dtype(boxes1, boxes2)
    b1 = boxes1.to(work_dtype)
    b2 = boxes2.to(work_dtype)
    eps = torch.finfo(work_dtype).eps
    inter, union = _pairwise_inter_union(b1, b2)                            # (N, M), (N, M)
    iou = inter / union.clamp_min(eps)                                      # (N, M)
    lt_c = torch.minimum(b1[:, None, :2], b2[None, :, :2])                  # (N, M, 2)
    rb_c = torch.maximum(b1[:, None, 2:], b2[None, :, 2:])                  # (N, M, 2)
    wh_c = (rb_c - lt_c).clamp(min=0)                                       # (N, M, 2)
    area_c = wh_c[..., 0] * wh_c[..., 1]                                    # (N, M)
    giou = iou - (area_c - union) / area_c.clamp_min(eps)                   # (N, M)
    return giou.to(out_dtype)
