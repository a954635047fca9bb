"""Alternative correct anchors (canon #20): every anchor's (cell, size, ratio) recovered from its flat
index with integer division, matching with ``torch.where`` chains, and the coder written on explicit
centres with ``log(g_w) - log(a_w)``.
Shapes: ``N_a`` anchors, ``M`` gt boxes, ``N`` coder rows.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from canon_refs.detection.boxes import box_iou

_CLAMP = math.log(1000.0 / 16)


def _positive(values, name):
    vals = [float(v) for v in values]
    if len(vals) == 0 or min(vals) <= 0:
        raise ValueError(f"{name}: need a non-empty list of positive values")
    return vals


def generate_anchors(feature_size, stride, sizes=(32.0,), aspect_ratios=(0.5, 1.0, 2.0)) -> Tensor:
    """(H_f*W_f*A, 4) float32 xyxy anchors."""
    if len(feature_size) != 2 or min(feature_size) < 0:
        raise ValueError("feature_size: expected (H_f, W_f) with non-negative entries")
    if not stride > 0:
        raise ValueError("stride: must be positive")
    s_list = _positive(sizes, "sizes")
    r_list = _positive(aspect_ratios, "aspect_ratios")
    H_f, W_f = feature_size
    S, R = len(s_list), len(r_list)
    idx = torch.arange(H_f * W_f * S * R)                                 # (N_a,)
    ratio_i = idx % R
    size_i = (idx // R) % S
    cell = idx // (S * R)
    x = (cell % W_f).double() if W_f else cell.double()
    y = (cell // max(W_f, 1)).double()
    s = torch.tensor(s_list, dtype=torch.float64)[size_i]                 # (N_a,)
    r = torch.tensor(r_list, dtype=torch.float64)[ratio_i]                # (N_a,)
    half_w = 0.5 * s * torch.rsqrt(r)
    half_h = 0.5 * s * torch.sqrt(r)
    cx = (x + 0.5) * stride
    cy = (y + 0.5) * stride
    return torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], dim=-1).float()  # (N_a, 4)


def _boxes(t, name, check_order=True):
    if not torch.is_tensor(t) or t.dim() != 2 or t.size(1) != 4:
        raise ValueError(f"{name}: expected an (N, 4) tensor")
    if check_order and ((t[:, 2] < t[:, 0]) | (t[:, 3] < t[:, 1])).any():
        raise ValueError(f"{name}: inverted box")


def _unit(v, name):
    if not 0 <= v <= 1:
        raise ValueError(f"{name}: must be in [0, 1]")


def match_anchors(anchors, gt_boxes, pos_iou=0.5, neg_iou=0.4, allow_low_quality=True) -> Tensor:
    """(N_a,) long labels: gt index, -1 background, -2 ignore."""
    _boxes(anchors, "anchors")
    _boxes(gt_boxes, "gt_boxes")
    _unit(pos_iou, "pos_iou")
    _unit(neg_iou, "neg_iou")
    if neg_iou > pos_iou:
        raise ValueError("neg_iou: larger than pos_iou")
    if gt_boxes.size(0) == 0 or anchors.size(0) == 0:
        return -torch.ones(anchors.size(0), dtype=torch.long)             # (N_a,)
    iou = box_iou(gt_boxes, anchors).T                                    # (N_a, M)
    best, arg = iou.max(dim=1)                                            # (N_a,), (N_a,)
    labels = torch.where(best >= pos_iou, arg, torch.where(best < neg_iou, -1, -2))
    if allow_low_quality:
        col_best = iou.amax(dim=0, keepdim=True)                          # (1, M)
        hit = ((iou >= col_best) & (col_best > 0)).sum(dim=1) > 0         # (N_a,)
        labels = torch.where(hit, arg, labels)
    return labels.long()


def _weights(weights):
    w = [float(v) for v in weights]
    if len(w) != 4 or min(w) <= 0:
        raise ValueError("weights: need four positive values")
    return w


def _centres(b):
    w = b[:, 2] - b[:, 0]
    h = b[:, 3] - b[:, 1]
    return b[:, 0] + 0.5 * w, b[:, 1] + 0.5 * h, w, h


def encode_boxes(anchors, gt, weights=(1.0, 1.0, 1.0, 1.0)) -> Tensor:
    """(N, 4) deltas."""
    _boxes(anchors, "anchors")
    _boxes(gt, "gt")
    if gt.size(0) != anchors.size(0):
        raise ValueError("gt: row count differs from anchors")
    wx, wy, ww, wh = _weights(weights)
    acx, acy, aw, ah = _centres(anchors)
    gcx, gcy, gw, gh = _centres(gt)
    return torch.stack(
        [wx * (gcx - acx) / aw, wy * (gcy - acy) / ah, ww * (gw.log() - aw.log()), wh * (gh.log() - ah.log())], dim=1
    )  # (N, 4)


def decode_boxes(anchors, deltas, weights=(1.0, 1.0, 1.0, 1.0)) -> Tensor:
    """(N, 4) xyxy boxes."""
    _boxes(anchors, "anchors")
    _boxes(deltas, "deltas", check_order=False)
    if deltas.size(0) != anchors.size(0):
        raise ValueError("deltas: row count differs from anchors")
    wx, wy, ww, wh = _weights(weights)
    acx, acy, aw, ah = _centres(anchors)
    d = deltas / deltas.new_tensor([wx, wy, ww, wh])
    half_w = 0.5 * aw * torch.exp(torch.clamp(d[:, 2], max=_CLAMP))
    half_h = 0.5 * ah * torch.exp(torch.clamp(d[:, 3], max=_CLAMP))
    cx = acx + d[:, 0] * aw
    cy = acy + d[:, 1] * ah
    return torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], dim=1)  # (N, 4)
