"""Canon #20: anchor generation, anchor-to-ground-truth matching and the box delta coder.

Plan: anchors are per-cell base boxes (w = s / sqrt(r), h = s * sqrt(r), area s^2) shifted to the
cell centres, laid out cell-major then size then ratio. Matching takes the IoU matrix, labels each
anchor by its best IoU with the two thresholds, and (low-quality rule) forces every anchor that
attains some gt's best IoU to be positive. The coder is the R-CNN centre/log-size parametrisation;
decoding clamps the log-size deltas so exp never overflows.
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
    """All anchors of one feature map, in image coordinates: ``(H_f*W_f*A, 4)`` xyxy float32."""
    hf, wf = feature_size
    ws, hs = [], []
    for s in sizes:  # size outer, ratio inner
        for r in aspect_ratios:
            ws.append(s / math.sqrt(r))
            hs.append(s * math.sqrt(r))
    w = torch.tensor(ws, dtype=torch.float32)  # (A,)
    h = torch.tensor(hs, dtype=torch.float32)  # (A,)
    base = torch.stack([-w / 2, -h / 2, w / 2, h / 2], dim=1)  # (A, 4)
    cy = (torch.arange(hf, dtype=torch.float32) + 0.5) * stride  # (H_f,)
    cx = (torch.arange(wf, dtype=torch.float32) + 0.5) * stride  # (W_f,)
    yy, xx = torch.meshgrid(cy, cx, indexing="ij")  # (H_f, W_f)
    centres = torch.stack([xx, yy, xx, yy], dim=-1).reshape(-1, 1, 4)  # (H_f*W_f, 1, 4)
    return (centres + base[None]).reshape(-1, 4)  # (H_f*W_f*A, 4)


def match_anchors(
    anchors: Tensor,
    gt_boxes: Tensor,
    pos_iou: float = 0.5,
    neg_iou: float = 0.4,
    allow_low_quality: bool = True,
) -> Tensor:
    """Assign each anchor a gt index, background (-1) or ignore (-2) from its best IoU."""
    n = anchors.shape[0]
    if n == 0 or gt_boxes.shape[0] == 0:
        return torch.full((n,), BACKGROUND, dtype=torch.long, device=anchors.device)
    iou = box_iou(anchors, gt_boxes)  # (N_a, M)
    max_iou, argmax = iou.max(dim=1)  # (N_a,)
    labels = argmax.clone()
    labels[max_iou < pos_iou] = IGNORE
    labels[max_iou < neg_iou] = BACKGROUND
    if allow_low_quality:
        gt_best = iou.max(dim=0).values  # (M,)
        hit = (iou == gt_best[None, :]) & (gt_best[None, :] > 0)  # (N_a, M)
        low_quality = hit.any(dim=1)  # (N_a,)
        labels[low_quality] = argmax[low_quality]
    return labels


def encode_boxes(
    anchors: Tensor, gt: Tensor, weights: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
) -> Tensor:
    """Regression targets ``(dx, dy, dw, dh)`` that move each anchor onto its gt box."""
    dtype = torch.promote_types(anchors.dtype, gt.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float32
    wx, wy, ww, wh = weights
    a = box_xyxy_to_cxcywh(anchors.to(dtype))  # (N, 4)
    g = box_xyxy_to_cxcywh(gt.to(dtype))  # (N, 4)
    dx = wx * (g[:, 0] - a[:, 0]) / a[:, 2]
    dy = wy * (g[:, 1] - a[:, 1]) / a[:, 3]
    dw = ww * torch.log(g[:, 2] / a[:, 2])
    dh = wh * torch.log(g[:, 3] / a[:, 3])
    return torch.stack([dx, dy, dw, dh], dim=1)  # (N, 4)


def decode_boxes(
    anchors: Tensor, deltas: Tensor, weights: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
) -> Tensor:
    """Apply deltas to anchors: the inverse of :func:`encode_boxes`, with the size deltas clamped."""
    dtype = torch.promote_types(anchors.dtype, deltas.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float32
    wx, wy, ww, wh = weights
    a = box_xyxy_to_cxcywh(anchors.to(dtype))  # (N, 4)
    d = deltas.to(dtype)
    dw = (d[:, 2] / ww).clamp(max=DELTA_SIZE_CLAMP)
    dh = (d[:, 3] / wh).clamp(max=DELTA_SIZE_CLAMP)
    cx = a[:, 0] + d[:, 0] / wx * a[:, 2]
    cy = a[:, 1] + d[:, 1] / wy * a[:, 3]
    w = a[:, 2] * torch.exp(dw)
    h = a[:, 3] * torch.exp(dh)
    return box_cxcywh_to_xyxy(torch.stack([cx, cy, w, h], dim=1))  # (N, 4)
