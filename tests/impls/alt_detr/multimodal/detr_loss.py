"""Alternative DETR set loss (canon #40): one batched cost matrix, manual weighted NLL, cdist L1.

Differences from the reference: the matching cost of the whole batch is built at once as a
``(B*Q, S)`` matrix (as the official ``HungarianMatcher`` does) and split per image; the class cost
gathers probabilities through ``index_select``; the L1 cost uses ``torch.cdist(p=1)``; the
cross-entropy is written as a weighted mean of ``-log_softmax`` gathered at the targets instead of
calling ``F.cross_entropy(weight=...)``; the box losses use ``F.l1_loss(reduction="sum")``.

Shape letters: ``B`` images, ``Q`` queries, ``C`` classes, ``M`` targets of one image, ``S`` all targets.
What to test: the same checks as the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from canon_refs.detection.boxes import box_cxcywh_to_xyxy, generalized_box_iou
from canon_refs.multimodal.hungarian import linear_sum_assignment


def _labels_ok(labels: object, num_classes: int, name: str) -> None:
    if not isinstance(labels, Tensor) or labels.ndim != 1 or labels.is_floating_point():
        raise ValueError(f"{name} must be a 1-D integer tensor")
    if labels.numel() and not bool(((labels >= 0) & (labels < num_classes)).all()):
        raise ValueError(f"{name} holds a class id outside [0, {num_classes})")


def _boxes_ok(boxes: object, count: int, name: str) -> None:
    if not isinstance(boxes, Tensor) or tuple(boxes.shape) != (count, 4):
        raise ValueError(f"{name} must have shape ({count}, 4)")


def _batched_cost(logits: Tensor, boxes: Tensor, labels: Tensor, tgt: Tensor,
                  w_class: float, w_bbox: float, w_giou: float) -> Tensor:
    """``(N, C+1), (N, 4), (S,), (S, 4) -> (N, S)`` float64 matching cost."""
    prob = F.softmax(logits.double(), dim=-1)                  # (N, C+1)
    cls = prob.index_select(1, labels.long())                  # (N, S)
    l1 = torch.cdist(boxes.double(), tgt.double(), p=1)        # (N, S)
    giou = generalized_box_iou(box_cxcywh_to_xyxy(boxes.double()), box_cxcywh_to_xyxy(tgt.double()))  # (N, S)
    return w_bbox * l1 - w_class * cls - w_giou * giou


@torch.no_grad()
def hungarian_match(pred_logits: Tensor, pred_boxes: Tensor, tgt_labels: Tensor, tgt_boxes: Tensor, *,
                    cost_class: float = 1.0, cost_bbox: float = 5.0,
                    cost_giou: float = 2.0) -> tuple[Tensor, Tensor]:
    """One image: ``(Q, C+1), (Q, 4), (M,), (M, 4) -> pred_idx, tgt_idx`` long ``(min(Q, M),)``."""
    if not isinstance(pred_logits, Tensor) or pred_logits.ndim != 2:
        raise ValueError("pred_logits must be (Q, C + 1)")
    _boxes_ok(pred_boxes, pred_logits.shape[0], "pred_boxes")
    _labels_ok(tgt_labels, pred_logits.shape[1] - 1, "tgt_labels")
    _boxes_ok(tgt_boxes, tgt_labels.shape[0], "tgt_boxes")
    cost = _batched_cost(pred_logits, pred_boxes, tgt_labels, tgt_boxes, cost_class, cost_bbox, cost_giou)  # (Q, M)
    rows, cols = linear_sum_assignment(cost.numpy())           # (K,), (K,)
    return torch.from_numpy(rows).long(), torch.from_numpy(cols).long()


def detr_set_loss(pred_logits: Tensor, pred_boxes: Tensor, targets: list[dict[str, Tensor]], *,
                  num_classes: int, eos_coef: float = 0.1, w_class: float = 1.0, w_bbox: float = 5.0,
                  w_giou: float = 2.0) -> dict[str, Tensor]:
    """``(B, Q, C+1), (B, Q, 4)``, targets -> ``{"loss", "loss_ce", "loss_bbox", "loss_giou"}`` scalars."""
    if not isinstance(pred_logits, Tensor) or pred_logits.ndim != 3 or pred_logits.shape[-1] != num_classes + 1:
        raise ValueError(f"pred_logits must be (B, Q, num_classes + 1) with num_classes = {num_classes}")
    n_img, n_q, _ = pred_logits.shape
    if not isinstance(pred_boxes, Tensor) or tuple(pred_boxes.shape) != (n_img, n_q, 4):
        raise ValueError("pred_boxes must be (B, Q, 4)")
    if len(targets) != n_img:
        raise ValueError("targets must hold one dict per image")
    for b, t in enumerate(targets):
        _labels_ok(t["labels"], num_classes, f"targets[{b}]['labels']")
        _boxes_ok(t["boxes"], t["labels"].shape[0], f"targets[{b}]['boxes']")

    sizes = [int(t["labels"].shape[0]) for t in targets]
    all_labels = torch.cat([t["labels"] for t in targets])     # (S,)
    all_boxes = torch.cat([t["boxes"] for t in targets])       # (S, 4)
    flat_logits = pred_logits.detach().flatten(0, 1)           # (B*Q, C+1)
    flat_boxes = pred_boxes.detach().flatten(0, 1)             # (B*Q, 4)
    with torch.no_grad():
        cost = _batched_cost(flat_logits, flat_boxes, all_labels, all_boxes, w_class, w_bbox, w_giou)  # (B*Q, S)
    cost = cost.reshape(n_img, n_q, -1)                        # (B, Q, S)
    blocks = cost.split(sizes, dim=-1)                         # list[B]
    flat_q, flat_t = [], []
    offset = 0
    for b, block in enumerate(blocks):
        rows, cols = linear_sum_assignment(block[b].numpy())   # (M,), (M,)
        flat_q.append(torch.from_numpy(rows).long() + b * n_q)
        flat_t.append(torch.from_numpy(cols).long() + offset)
        offset += sizes[b]
    q_idx = torch.cat(flat_q)                                  # (S,)
    t_idx = torch.cat(flat_t)                                  # (S,)

    classes = torch.full((n_img * n_q,), num_classes, dtype=torch.long)  # (B*Q,)
    classes[q_idx] = all_labels[t_idx].long()
    log_p = F.log_softmax(pred_logits.flatten(0, 1), dim=-1)   # (B*Q, C+1)
    nll = -log_p.gather(1, classes[:, None]).squeeze(1)        # (B*Q,)
    eos = torch.tensor(eos_coef, dtype=log_p.dtype)            # ()  (a bare 0.1 would be float32)
    weights = torch.where(classes == num_classes, eos, torch.ones_like(eos))  # (B*Q,)
    loss_ce = (weights * nll).sum() / weights.sum()            # ()

    denom = max(1, int(q_idx.numel()))
    src = pred_boxes.flatten(0, 1)[q_idx]                      # (S, 4)
    tgt = all_boxes[t_idx].to(src.dtype)                       # (S, 4)
    loss_bbox = F.l1_loss(src, tgt, reduction="sum") / denom   # ()
    giou = generalized_box_iou(box_cxcywh_to_xyxy(src), box_cxcywh_to_xyxy(tgt)).diagonal()  # (S,)
    loss_giou = (1.0 - giou).sum() / denom                     # ()
    total = w_class * loss_ce + w_bbox * loss_bbox + w_giou * loss_giou
    return {"loss": total, "loss_ce": loss_ce, "loss_bbox": loss_bbox, "loss_giou": loss_giou}
