"""The DETR set-prediction loss: Hungarian matching of queries to objects, then CE ...

Plan: per image, build the (Q, M) matching cost -w_cls p(class) + w_L1 |b - b'|_1 - w_giou GIoU in
float64 without gradients (using -p rather than -log p, as DETR does, keeps it commensurate with the
box terms), solve it with the Hungarian algorithm, then compute the losses on the matched pairs:
weighted cross-entropy over all queries (unmatched -> "no object", down-weighted by eos_coef) and
L1 + (1 - GIoU) over matched boxes normalised by the number of targets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from canon_refs.detection.boxes import box_cxcywh_to_xyxy, generalized_box_iou
from canon_refs.multimodal.hungarian import linear_sum_assignment

__all__ = ["detr_set_loss", "hungarian_match"]


@torch.no_grad()
def hungarian_match(
    pred_logits: Tensor,
    pred_boxes: Tensor,
    tgt_labels: Tensor,
    tgt_boxes: Tensor,
    *,
    cost_class: float = 1.0,
    cost_bbox: float = 5.0,
    cost_giou: float = 2.0,
) -> tuple[Tensor, Tensor]:
    """Match the ``Q`` predictions of one image to its ``M`` targets at minimum total cost."""
    device = pred_logits.device
    Q, M = pred_logits.shape[0], tgt_labels.shape[0]
    if Q == 0 or M == 0:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty.clone()
    prob = pred_logits.double().softmax(dim=-1)  # (Q, C + 1)
    pb = pred_boxes.double()
    tb = tgt_boxes.double()
    c_class = -prob[:, tgt_labels.long()]  # (Q, M)
    c_bbox = torch.cdist(pb, tb, p=1)  # (Q, M)
    c_giou = -generalized_box_iou(box_cxcywh_to_xyxy(pb), box_cxcywh_to_xyxy(tb))  # (Q, M)
    cost = cost_class * c_class + cost_bbox * c_bbox + cost_giou * c_giou
    rows, cols = linear_sum_assignment(cost.cpu().numpy())
    return (torch.as_tensor(rows, dtype=torch.long, device=device),
            torch.as_tensor(cols, dtype=torch.long, device=device))


def detr_set_loss(
    pred_logits: Tensor,
    pred_boxes: Tensor,
    targets: list[dict[str, Tensor]],
    *,
    num_classes: int,
    eos_coef: float = 0.1,
    w_class: float = 1.0,
    w_bbox: float = 5.0,
    w_giou: float = 2.0,
) -> dict[str, Tensor]:
    """DETR's Hungarian set loss for a batch: ``w_class * ce + w_bbox * l1 + w_giou * (1 - GIoU)``."""
    B, Q, _ = pred_logits.shape
    device = pred_logits.device
    target_classes = torch.full((B, Q), num_classes, dtype=torch.long, device=device)
    src_list, tgt_list = [], []
    for b, t in enumerate(targets):
        pi, ti = hungarian_match(pred_logits[b], pred_boxes[b], t["labels"], t["boxes"],
                                 cost_class=w_class, cost_bbox=w_bbox, cost_giou=w_giou)
        target_classes[b, pi] = t["labels"][ti].long()
        src_list.append(pred_boxes[b, pi])  # (K_b, 4)
        tgt_list.append(t["boxes"][ti].to(pred_boxes.dtype))  # (K_b, 4)
    weight = torch.ones(num_classes + 1, dtype=pred_logits.dtype, device=device)
    weight[-1] = eos_coef
    loss_ce = F.cross_entropy(pred_logits.reshape(B * Q, -1), target_classes.reshape(-1), weight=weight)

    num_boxes = max(1, sum(int(t["labels"].shape[0]) for t in targets))
    src = torch.cat(src_list, dim=0)  # (K, 4)
    tgt = torch.cat(tgt_list, dim=0)  # (K, 4)
    loss_bbox = (src - tgt).abs().sum() / num_boxes
    giou = torch.diag(generalized_box_iou(box_cxcywh_to_xyxy(src), box_cxcywh_to_xyxy(tgt)))  # (K,)
    loss_giou = (1 - giou).sum() / num_boxes
    loss = w_class * loss_ce + w_bbox * loss_bbox + w_giou * loss_giou
    return {"loss": loss, "loss_ce": loss_ce, "loss_bbox": loss_bbox, "loss_giou": loss_giou}
