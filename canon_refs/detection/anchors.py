"""Canon #20: anchor generation, anchor-to-ground-truth matching and the box delta coder, in torch.

``generate_anchors`` tiles ``A = len(sizes) * len(aspect_ratios)`` base boxes over every cell of an
``H_f x W_f`` feature map: base boxes centred at the origin ``(A, 4)`` plus one shift per cell
``(H_f*W_f, 1, 4)`` broadcast to ``(H_f*W_f, A, 4)``, flattened cell-major (row ``y``, then column
``x``), then sizes (outer) x ratios (inner). A ratio ``r = h / w`` at size ``s`` gives
``w = s / sqrt(r)``, ``h = s * sqrt(r)``, so every anchor of size ``s`` has area ``s**2``.
``match_anchors`` labels each anchor with the index of its gt box, ``-1`` background or ``-2`` ignore,
from the ``(N_a, M)`` IoU matrix of ``box_iou`` (canon #18, imported absolutely).
``encode_boxes``/``decode_boxes`` are the Faster R-CNN parameterisation: centre offsets in units of
the anchor size and log size ratios.

The subtle point an interviewer probes: the low-quality rule. A gt box whose best anchor IoU is below
``pos_iou`` (a small or thin object) would otherwise get no positive anchor at all and never be
learned, so every anchor that achieves a gt's maximum IoU becomes positive, ties included. That
anchor is then assigned to its OWN best gt (argmax over gts), not to the gt that promoted it: an
anchor promoted by gt A that overlaps gt B more regresses towards B, as torchvision's ``Matcher``
does. A gt whose best IoU is 0 promotes nothing.

Shape letters: ``H_f, W_f`` feature-map size, ``A`` anchors per cell, ``S`` sizes, ``R`` aspect
ratios, ``N_a`` anchors, ``M`` gt boxes, ``N`` box pairs for the coder.

Trade-off: ``decode_boxes`` clamps ``dw, dh`` at ``log(1000 / 16) = 4.135`` before ``exp`` because an
untrained head can emit a delta of 1e4, and ``exp(1e4)`` is inf in any dtype (float32 overflows above
88.7); the clamp caps a decoded box at 62.5 anchor widths instead of producing inf - inf = NaN corners.
Anchors are built by broadcasting base boxes against the shift grid rather than by a loop over cells,
because a 100 x 152 stride-8 map with A = 9 already holds 136 800 anchors.

What to test: the count ``H_f*W_f*A``, the first centre ``(stride/2, stride/2)``, areas ``s**2`` and
``h/w = r``; check that ``decode_boxes(a, encode_boxes(a, g)) == g``, that ``dw = 1e4`` decodes to a
finite box, the exact -1 / -2 / index labels at IoU equal to each threshold, ``M = 0`` giving all -1,
and the low-quality rule for a gt whose best IoU is 0.3 (ties included).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_cxcywh_to_xyxy, box_iou, box_xyxy_to_cxcywh

__all__ = ["decode_boxes", "encode_boxes", "generate_anchors", "match_anchors"]

BACKGROUND = -1
IGNORE = -2
DELTA_SIZE_CLAMP = math.log(1000.0 / 16)  # largest log size ratio decode_boxes will exponentiate


def generate_anchors(
    feature_size: tuple[int, int],
    stride: int,
    sizes: Sequence[float] = (32.0,),
    aspect_ratios: Sequence[float] = (0.5, 1.0, 2.0),
) -> Tensor:
    """All anchors of one feature map, in image coordinates.

    Args:
        feature_size: ``(H_f, W_f)`` cells, non-negative integers.
        stride: image pixels per cell (> 0); cell ``(y, x)`` is centred at ``((x+0.5)*stride, (y+0.5)*stride)``.
        sizes: anchor side lengths ``s`` (area ``s**2``), positive.
        aspect_ratios: ``r = h / w``, positive.

    Returns:
        ``(H_f*W_f*A, 4)`` float32 xyxy anchors, ``A = len(sizes) * len(aspect_ratios)``, ordered by
        cell (row-major: y, then x), then size (outer), then ratio (inner).

    Raises:
        ValueError: ``feature_size`` not two non-negative ints, ``stride <= 0``, empty or non-positive
        ``sizes``/``aspect_ratios``.

    Source: Ren et al., "Faster R-CNN" (2015), Sec. 3.1.1; centre convention of docs/contract.md #20.
    """
    _check_grid(feature_size, stride)
    size_list = _positive_floats(sizes, "sizes")
    ratio_list = _positive_floats(aspect_ratios, "aspect_ratios")
    H_f, W_f = feature_size

    s = torch.tensor(size_list, dtype=torch.float32)                        # (S,)
    sqrt_r = torch.tensor(ratio_list, dtype=torch.float32).sqrt()           # (R,)
    w = (s[:, None] / sqrt_r[None, :]).reshape(-1)                          # (S*R,)  sizes outer, ratios inner
    h = (s[:, None] * sqrt_r[None, :]).reshape(-1)                          # (S*R,)
    base = torch.stack([-w / 2, -h / 2, w / 2, h / 2], dim=1)               # (A, 4)

    ys = (torch.arange(H_f, dtype=torch.float32) + 0.5) * stride            # (H_f,)
    xs = (torch.arange(W_f, dtype=torch.float32) + 0.5) * stride            # (W_f,)
    cy, cx = torch.meshgrid(ys, xs, indexing="ij")                          # (H_f, W_f), (H_f, W_f)
    grid = torch.stack([cx, cy], dim=-1)                                    # (H_f, W_f, 2)
    shifts = grid.reshape(-1, 1, 2).repeat(1, 1, 2)                         # (H_f*W_f, 1, 4)
    anchors = shifts + base[None, :, :]                                     # (H_f*W_f, A, 4)
    return anchors.reshape(-1, 4)                                           # (H_f*W_f*A, 4)


def match_anchors(
    anchors: Tensor,
    gt_boxes: Tensor,
    pos_iou: float = 0.5,
    neg_iou: float = 0.4,
    allow_low_quality: bool = True,
) -> Tensor:
    """Assign each anchor a gt index, background (-1) or ignore (-2) from its best IoU.

    Rules on ``max_iou`` = the anchor's best IoU over gts: ``max_iou >= pos_iou`` -> its argmax gt;
    ``max_iou < neg_iou`` -> -1; otherwise (``neg_iou <= max_iou < pos_iou``) -> -2. With
    ``allow_low_quality``, every anchor achieving some gt's maximum IoU (when that maximum is > 0,
    ties included) becomes positive and is assigned to its own argmax gt.

    Args:
        anchors: ``(N_a, 4)`` xyxy.
        gt_boxes: ``(M, 4)`` xyxy; ``M = 0`` labels every anchor -1.
        pos_iou, neg_iou: thresholds in ``[0, 1]`` with ``neg_iou <= pos_iou``.
        allow_low_quality: apply the low-quality rule.

    Returns:
        ``(N_a,)`` ``torch.long`` labels: gt index ``>= 0``, ``-1`` background, ``-2`` ignore.

    Raises:
        ValueError: a box tensor not ``(N, 4)`` (or inverted, via ``box_iou``), a threshold outside
        ``[0, 1]``, ``neg_iou > pos_iou``.

    Source: Ren et al., "Faster R-CNN" (2015), Sec. 3.1.2; torchvision ``Matcher`` semantics.
    """
    _check_boxes(anchors, "anchors")
    _check_boxes(gt_boxes, "gt_boxes")
    pos, neg = _check_thresholds(pos_iou, neg_iou)
    n_anchors = anchors.shape[0]
    if gt_boxes.shape[0] == 0 or n_anchors == 0:
        return torch.full((n_anchors,), BACKGROUND, dtype=torch.long, device=anchors.device)  # (N_a,)

    iou = box_iou(anchors, gt_boxes)                                        # (N_a, M)
    max_iou, best_gt = iou.max(dim=1)                                       # (N_a,), (N_a,)
    labels = best_gt.clone()                                                # (N_a,)
    labels[max_iou < neg] = BACKGROUND
    labels[(max_iou >= neg) & (max_iou < pos)] = IGNORE
    if allow_low_quality:
        best_per_gt = iou.max(dim=0).values                                 # (M,)
        is_best = (iou == best_per_gt[None, :]) & (best_per_gt[None, :] > 0)  # (N_a, M)
        promoted = is_best.any(dim=1)                                       # (N_a,)
        labels[promoted] = best_gt[promoted]
    return labels


def encode_boxes(
    anchors: Tensor, gt: Tensor, weights: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
) -> Tensor:
    """Regression targets that move each anchor onto its gt box.

    ``dx = wx*(g_cx - a_cx)/a_w``, ``dy = wy*(g_cy - a_cy)/a_h``, ``dw = ww*log(g_w/a_w)``,
    ``dh = wh*log(g_h/a_h)``.

    Args:
        anchors: ``(N, 4)`` xyxy with positive width and height.
        gt: ``(N, 4)`` xyxy, row ``i`` matched to anchor ``i``.
        weights: ``(wx, wy, ww, wh)``, positive; Faster R-CNN's second stage uses (10, 10, 5, 5).

    Returns:
        ``(N, 4)`` deltas ``(dx, dy, dw, dh)`` in the promoted floating dtype.

    Raises:
        ValueError: a box tensor not ``(N, 4)``, row counts differ, weights not four positive numbers.

    Source: Girshick et al., R-CNN (2014), Appendix C; Ren et al., Faster R-CNN (2015), Eq. 2.
    """
    _check_pair(anchors, gt, "gt", other_is_box=True)
    wx, wy, ww, wh = _check_weights(weights)
    a = box_xyxy_to_cxcywh(anchors)                                         # (N, 4)
    g = box_xyxy_to_cxcywh(gt)                                              # (N, 4)
    dx = wx * (g[:, 0] - a[:, 0]) / a[:, 2]                                 # (N,)
    dy = wy * (g[:, 1] - a[:, 1]) / a[:, 3]                                 # (N,)
    dw = ww * torch.log(g[:, 2] / a[:, 2])                                  # (N,)
    dh = wh * torch.log(g[:, 3] / a[:, 3])                                  # (N,)
    return torch.stack([dx, dy, dw, dh], dim=1)                             # (N, 4)


def decode_boxes(
    anchors: Tensor, deltas: Tensor, weights: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
) -> Tensor:
    """Apply deltas to anchors: the inverse of :func:`encode_boxes`, with the size deltas clamped.

    ``dw`` and ``dh`` (after dividing by their weights) are clamped at ``log(1000/16)`` before
    ``exp``, so any delta decodes to a finite box.

    Args:
        anchors: ``(N, 4)`` xyxy.
        deltas: ``(N, 4)`` ``(dx, dy, dw, dh)``.
        weights: the ``(wx, wy, ww, wh)`` used to encode, positive.

    Returns:
        ``(N, 4)`` xyxy boxes in the promoted floating dtype.

    Raises:
        ValueError: a tensor not ``(N, 4)``, row counts differ, weights not four positive numbers.

    Source: Ren et al., Faster R-CNN (2015), Eq. 2 inverted; clamp value from torchvision ``BoxCoder``.
    """
    _check_pair(anchors, deltas, "deltas", other_is_box=False)
    wx, wy, ww, wh = _check_weights(weights)
    a = box_xyxy_to_cxcywh(anchors)                                         # (N, 4)
    cx = deltas[:, 0] / wx * a[:, 2] + a[:, 0]                              # (N,)
    cy = deltas[:, 1] / wy * a[:, 3] + a[:, 1]                              # (N,)
    w = torch.exp((deltas[:, 2] / ww).clamp(max=DELTA_SIZE_CLAMP)) * a[:, 2]  # (N,)
    h = torch.exp((deltas[:, 3] / wh).clamp(max=DELTA_SIZE_CLAMP)) * a[:, 3]  # (N,)
    return box_cxcywh_to_xyxy(torch.stack([cx, cy, w, h], dim=1))           # (N, 4)


def _check_grid(feature_size: tuple[int, int], stride: int) -> None:
    """ValueError unless ``feature_size`` is two non-negative ints and ``stride > 0``."""
    if (
        not isinstance(feature_size, (tuple, list))
        or len(feature_size) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in feature_size)
    ):
        raise ValueError(f"feature_size must be a pair of non-negative ints (H_f, W_f), got {feature_size!r}")
    if isinstance(stride, bool) or not isinstance(stride, (int, float)) or not stride > 0:
        raise ValueError(f"stride must be > 0, got {stride!r}")


def _check_thresholds(pos_iou: float, neg_iou: float) -> tuple[float, float]:
    """``(pos_iou, neg_iou)`` as floats in [0, 1] with ``neg_iou <= pos_iou``, else ValueError."""
    pos = _check_threshold(pos_iou, "pos_iou")
    neg = _check_threshold(neg_iou, "neg_iou")
    if neg > pos:
        raise ValueError(f"neg_iou must be <= pos_iou, got neg_iou={neg_iou} > pos_iou={pos_iou}")
    return pos, neg


def _positive_floats(values: Sequence[float], name: str) -> list[float]:
    """A non-empty list of finite positive floats, or ValueError naming ``name``."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of positive numbers, got {values!r}") from None
    if not out or not all(math.isfinite(v) and v > 0 for v in out):
        raise ValueError(f"{name} must be a non-empty sequence of finite positive numbers, got {values!r}")
    return out


def _check_threshold(value: float, name: str) -> float:
    """``float(value)`` when it lies in [0, 1], else ValueError naming ``name``."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}") from None
    if not 0.0 <= out <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return out


def _check_boxes(boxes: Tensor, name: str, *, xyxy: bool = True) -> None:
    """ValueError naming ``name`` unless ``boxes`` is ``(N, 4)`` (and, for boxes, x1 <= x2, y1 <= y2)."""
    if not isinstance(boxes, Tensor) or boxes.ndim != 2 or boxes.shape[1] != 4:
        shape = tuple(boxes.shape) if isinstance(boxes, Tensor) else type(boxes).__name__
        raise ValueError(f"{name} must be a tensor of shape (N, 4), got {shape}")
    if xyxy and (bool((boxes[:, 2] < boxes[:, 0]).any()) or bool((boxes[:, 3] < boxes[:, 1]).any())):
        raise ValueError(f"{name} holds a box with x2 < x1 or y2 < y1; boxes must be xyxy")


def _check_pair(anchors: Tensor, other: Tensor, other_name: str, *, other_is_box: bool) -> None:
    """Both ``(N, 4)`` with the same ``N``; ``other`` is checked as xyxy boxes when ``other_is_box``."""
    _check_boxes(anchors, "anchors")
    _check_boxes(other, other_name, xyxy=other_is_box)
    if other.shape[0] != anchors.shape[0]:
        raise ValueError(
            f"{other_name} must have the same number of rows as anchors, got {other.shape[0]} and {anchors.shape[0]}"
        )


def _check_weights(weights: Sequence[float]) -> tuple[float, float, float, float]:
    """The four coder weights as positive floats, else ValueError naming ``weights``."""
    try:
        wx, wy, ww, wh = (float(v) for v in weights)
    except (TypeError, ValueError):
        raise ValueError(f"weights must be four positive numbers (wx, wy, ww, wh), got {weights!r}") from None
    if not all(math.isfinite(v) and v > 0 for v in (wx, wy, ww, wh)):
        raise ValueError(f"weights must be four finite positive numbers, got {weights!r}")
    return wx, wy, ww, wh
