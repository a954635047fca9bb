"""Canon #18: box format conversions, box area, IoU and generalized IoU (GIoU), in torch.

Boxes are stored as ``xyxy`` (``x1, y1, x2, y2`` with ``x1 <= x2``, ``y1 <= y2``) unless a function
says otherwise; ``cxcywh`` is the centre-size format DETR predicts and ``xywh`` is the COCO format.
``box_iou`` and ``generalized_box_iou`` compare every box of one set with every box of the other by
broadcasting ``(N, 1, 2)`` against ``(1, M, 2)``, so the whole pairwise matrix is built with no loop.

The subtle point an interviewer probes: the intersection width is ``(min(x2) - max(x1)).clamp(min=0)``,
and forgetting the clamp makes two boxes that are disjoint on both axes report a positive
"intersection" (two negative sides multiply to a positive area). The second one: the union of two
zero-area boxes is 0, so the division uses ``union.clamp_min(torch.finfo(dtype).eps)`` rather than a
bare ``inter / union``, which would return NaN (0 / 0) and poison every loss downstream.

Shape letters: ``N`` boxes of the first set, ``M`` boxes of the second set, ``...`` any leading dims.

Trade-off: float16/bfloat16 boxes are upcast to float32 inside ``box_iou`` and ``generalized_box_iou``
and the ratio is cast back, because areas overflow half precision long before the coordinates do:
a 256 x 256 pixel box has area 65536, above float16's maximum of 65504, so a half-precision
``inter / union`` would read inf / inf = NaN on ordinary image coordinates. GIoU is kept differentiable
(no in-place ops, no ``.item()`` on the path) because the DETR set loss (#40) back-propagates through
it; unlike IoU, whose gradient is exactly zero for disjoint boxes, GIoU's enclosing-box penalty still
pulls a disjoint prediction towards its target.

What to test: IoU([0,0,2,2], [1,1,3,3]) = 1/7, identical boxes give 1, disjoint and edge-touching
boxes give 0, a box contained in another gives the area ratio; GIoU of [0,0,1,1] and [2,2,3,3] is -7/9
and GIoU <= IoU; both matrices are symmetric; conversions round-trip; check that empty inputs give
``(0, M)`` and that zero-area boxes give finite values and finite gradients.
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
        ``(N,)`` tensor, same dtype as ``boxes``.

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
        ``(N, M)`` IoU in ``[0, 1]``, dtype of the promoted inputs (integers give float32;
        float16/bfloat16 are computed in float32 and cast back). A pair whose union has zero area
        gives 0, not NaN.

    Raises:
        ValueError: an argument is not ``(N, 4)``, or holds a box with ``x2 < x1`` or ``y2 < y1``
        (the message names ``boxes1`` or ``boxes2``).

    Source: standard (Jaccard index); matches torchvision ``ops.box_iou``.
    """
    _check_xyxy(boxes1, "boxes1", matrix=True)
    _check_xyxy(boxes2, "boxes2", matrix=True)
    out_dtype, work_dtype = _compute_dtype(boxes1, boxes2)
    inter, union = _pairwise_inter_union(boxes1.to(work_dtype), boxes2.to(work_dtype))  # (N, M), (N, M)
    iou = inter / union.clamp_min(torch.finfo(work_dtype).eps)              # (N, M)
    return iou.to(out_dtype)


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise generalized IoU: ``IoU - (area(C) - union) / area(C)``, C the smallest enclosing box.

    Args:
        boxes1: ``(N, 4)`` xyxy boxes (typically predictions; gradients flow to both arguments).
        boxes2: ``(M, 4)`` xyxy boxes.

    Returns:
        ``(N, M)`` GIoU in ``[-1, 1]``, dtype as :func:`box_iou` (half precision computed in float32);
        always ``<= box_iou``. Degenerate boxes give finite values and gradients: a zero-area
        enclosing box (two coincident points) gives 0.

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
