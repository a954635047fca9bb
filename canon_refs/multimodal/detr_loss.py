"""The DETR set-prediction loss: Hungarian matching of queries to objects, then CE + L1 + GIoU.

What it implements: DETR predicts a fixed set of ``Q`` boxes per image, each with ``C + 1`` class
logits where index ``C`` (= ``num_classes``) means "no object". :func:`hungarian_match` builds, for one
image, the ``(Q, M)`` matching cost
``cost_class * (-softmax(logits)[:, label]) + cost_bbox * L1(cxcywh) - cost_giou * GIoU(xyxy)``
and solves it with :func:`canon_refs.multimodal.hungarian.linear_sum_assignment`.
:func:`detr_set_loss` matches every image of the batch, labels the unmatched queries "no object",
and returns the weighted sum of a class-weighted cross-entropy over all ``B * Q`` queries and the L1
and ``1 - GIoU`` box losses over the matched pairs. Boxes come from item #18
(:mod:`canon_refs.detection.boxes`), so a learner's GIoU is exercised here as well.

The subtle point an interviewer probes: the box losses are *summed* over matched pairs and divided by
the number of ground-truth boxes in the batch, ``max(1, sum_b M_b)``, not averaged per coordinate or
per query; and the matching runs without gradients (the assignment is a discrete choice, it is
treated as a constant). The second one: the "no object" class gets weight ``eos_coef`` in the
cross-entropy, which is then a weighted mean (divided by the sum of the weights, as ``F.cross_entropy``
does), and an image with no targets must still give a finite loss with box losses of exactly 0.

Shape letters: ``B`` images, ``Q`` queries per image, ``C`` object classes (``C + 1`` logits), ``M``
targets of one image, ``S`` = ``sum_b M_b`` matched pairs in the batch.

Trade-off: the class cost uses ``-softmax(logits)[label]`` (a probability in [0, 1]) rather than the
log-probability, because it sits on the same scale as the L1 and GIoU terms (both O(1)); a
log-probability of a badly wrong query can reach -30 or below and would swamp the box costs,
which is why DETR chose the probability. ``eos_coef = 0.1`` down-weights the ``Q - M`` "no object"
queries (typically 100 - 7 = 93 of them per COCO image) so that they do not dominate the class loss.

What to test: the loss is invariant to permuting the queries; the matching agrees with brute force on
its own cost matrix; perfect predictions give zero box losses and a near-zero CE; an image without
targets gives box losses of 0 with finite gradients; check the CE against ``F.cross_entropy`` written
out with the class weights, and that bad labels, box shapes and logit widths raise ``ValueError``.
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
    """Match the ``Q`` predictions of one image to its ``M`` targets at minimum total cost.

    Args:
        pred_logits: ``(Q, C + 1)`` class logits, index ``C`` = "no object".
        pred_boxes: ``(Q, 4)`` predicted boxes, ``cxcywh`` normalised to [0, 1].
        tgt_labels: ``(M,)`` integer class ids in ``[0, C)``.
        tgt_boxes: ``(M, 4)`` target boxes, ``cxcywh`` in [0, 1].
        cost_class, cost_bbox, cost_giou: weights of the three cost terms (DETR: 1, 5, 2).

    Returns:
        ``pred_idx, tgt_idx``: two ``(K,)`` long tensors, ``K = min(Q, M)`` (``= M`` whenever
        ``Q >= M``, as DETR assumes), ordered by ascending ``pred_idx``; query ``pred_idx[k]`` is
        matched to target ``tgt_idx[k]``. The cost is built in float64 without gradients.

    Raises:
        ValueError: ``pred_logits`` not 2-D, ``pred_boxes`` not ``(Q, 4)``, ``tgt_boxes`` not ``(M, 4)``,
        ``tgt_labels`` not 1-D integers in ``[0, C)``.

    Source: Carion et al., "End-to-End Object Detection with Transformers" (2020), Eq. 1 and the
    matching cost of Sec. 3.1 (``HungarianMatcher`` of the official code).
    """
    _check_match_inputs(pred_logits, pred_boxes, tgt_labels, tgt_boxes)
    prob = pred_logits.double().softmax(dim=-1)                          # (Q, C+1)
    out_boxes = pred_boxes.double()
    tgt = tgt_boxes.double()
    class_term = -prob[:, tgt_labels.long()]                             # (Q, M)
    l1_term = (out_boxes[:, None, :] - tgt[None, :, :]).abs().sum(dim=-1)  # (Q, M)
    giou = generalized_box_iou(box_cxcywh_to_xyxy(out_boxes), box_cxcywh_to_xyxy(tgt))  # (Q, M)
    cost = cost_class * class_term + cost_bbox * l1_term - cost_giou * giou  # (Q, M)
    rows, cols = linear_sum_assignment(cost.cpu().numpy())               # (K,), (K,)  K = min(Q, M)
    device = pred_logits.device
    pred_idx = torch.as_tensor(rows, dtype=torch.long, device=device)    # (K,)
    tgt_idx = torch.as_tensor(cols, dtype=torch.long, device=device)     # (K,)
    return pred_idx, tgt_idx


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
    """DETR's Hungarian set loss for a batch: ``w_class * ce + w_bbox * l1 + w_giou * (1 - GIoU)``.

    Each image is matched with :func:`hungarian_match`; the matching cost weights are the implementation's
    choice (DETR's code keeps them separate from the loss weights, 1 / 5 / 2 by default; this reference
    passes the loss weights).

    Args:
        pred_logits: ``(B, Q, C + 1)`` class logits, ``C = num_classes`` is "no object".
        pred_boxes: ``(B, Q, 4)`` predicted ``cxcywh`` boxes in [0, 1].
        targets: ``B`` dicts with ``"labels"`` ``(M_b,)`` integer ids in ``[0, C)`` and ``"boxes"``
            ``(M_b, 4)`` ``cxcywh`` boxes; ``M_b = 0`` is allowed.
        num_classes: ``C`` (>= 1).
        eos_coef: class weight of "no object" in the cross-entropy (> 0).
        w_class, w_bbox, w_giou: non-negative weights of the three terms.

    Returns:
        A dict holding ``"loss"``, ``"loss_ce"``, ``"loss_bbox"``, ``"loss_giou"`` (extra keys allowed), each a ``()`` tensor in the dtype of
        ``pred_logits``/``pred_boxes``. ``loss_ce`` is ``F.cross_entropy`` over all ``B * Q`` queries
        (unmatched ones labelled ``C``) with class weights ``(1, ..., 1, eos_coef)``; ``loss_bbox`` and
        ``loss_giou`` are summed over matched pairs and divided by ``max(1, sum_b M_b)``.

    Raises:
        ValueError: ``pred_logits`` not 3-D or its last dim is not ``num_classes + 1``; ``pred_boxes``
        not ``(B, Q, 4)``; ``len(targets) != B``; a target's ``labels`` not integers in
        ``[0, num_classes)`` or its ``boxes`` not ``(M_b, 4)``; more targets than queries in an image
        (``M_b > Q``); ``B = 0``; ``num_classes < 1``; ``eos_coef <= 0``;
        a negative weight.

    Source: Carion et al. (2020), Eq. 2 (Hungarian loss) and Sec. 4 (weights 1 / 5 / 2, eos 0.1).
    """
    _check_loss_inputs(pred_logits, pred_boxes, targets, num_classes, eos_coef, (w_class, w_bbox, w_giou))
    n_images, n_queries, _ = pred_logits.shape
    batch_parts, query_parts, target_parts = [], [], []
    for b, target in enumerate(targets):
        pred_idx, tgt_idx = hungarian_match(pred_logits[b], pred_boxes[b], target["labels"], target["boxes"],
                                            cost_class=w_class, cost_bbox=w_bbox, cost_giou=w_giou)  # (M,), (M,)
        batch_parts.append(torch.full_like(pred_idx, b))
        query_parts.append(pred_idx)
        target_parts.append(tgt_idx)
    batch_idx = torch.cat(batch_parts)                                   # (S,)
    query_idx = torch.cat(query_parts)                                   # (S,)
    matched_labels = torch.cat([t["labels"][i] for t, i in zip(targets, target_parts)]).long()  # (S,)
    tgt_boxes = torch.cat([t["boxes"][i] for t, i in zip(targets, target_parts)]).to(pred_boxes.dtype)  # (S, 4)

    device = pred_logits.device
    target_classes = torch.full((n_images, n_queries), num_classes, dtype=torch.long, device=device)  # (B, Q)
    target_classes[batch_idx, query_idx] = matched_labels.to(device)
    class_weight = torch.ones(num_classes + 1, dtype=pred_logits.dtype, device=device)  # (C+1,)
    class_weight[num_classes] = eos_coef
    loss_ce = F.cross_entropy(pred_logits.transpose(1, 2), target_classes, weight=class_weight)  # ()

    num_boxes = max(1, int(batch_idx.numel()))
    src_boxes = pred_boxes[batch_idx, query_idx]                         # (S, 4)
    loss_bbox = (src_boxes - tgt_boxes).abs().sum() / num_boxes          # ()
    giou = generalized_box_iou(box_cxcywh_to_xyxy(src_boxes), box_cxcywh_to_xyxy(tgt_boxes))  # (S, S)
    loss_giou = (1 - torch.diagonal(giou)).sum() / num_boxes             # ()
    loss = w_class * loss_ce + w_bbox * loss_bbox + w_giou * loss_giou   # ()
    return {"loss": loss, "loss_ce": loss_ce, "loss_bbox": loss_bbox, "loss_giou": loss_giou}


def _check_match_inputs(pred_logits: Tensor, pred_boxes: Tensor, tgt_labels: Tensor, tgt_boxes: Tensor) -> None:
    """ValueError for the argument errors :func:`hungarian_match` documents."""
    if not isinstance(pred_logits, Tensor) or pred_logits.ndim != 2 or pred_logits.shape[-1] < 2:
        raise ValueError("pred_logits must have shape (Q, C + 1) with C >= 1")
    n_queries, n_logits = pred_logits.shape
    _check_boxes(pred_boxes, "pred_boxes", n_queries)
    _check_labels(tgt_labels, "tgt_labels", n_logits - 1)
    _check_boxes(tgt_boxes, "tgt_boxes", tgt_labels.shape[0])


def _check_loss_inputs(pred_logits: Tensor, pred_boxes: Tensor, targets: list[dict[str, Tensor]], num_classes: int,
                       eos_coef: float, weights: tuple[float, float, float]) -> None:
    """ValueError for the argument errors :func:`detr_set_loss` documents."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if not isinstance(pred_logits, Tensor) or pred_logits.ndim != 3:
        raise ValueError("pred_logits must have shape (B, Q, num_classes + 1)")
    if pred_logits.shape[-1] != num_classes + 1:
        raise ValueError(f"pred_logits last dim must be num_classes + 1 = {num_classes + 1}, "
                         f"got {pred_logits.shape[-1]}")
    n_images, n_queries, _ = pred_logits.shape
    if n_images == 0:
        raise ValueError("pred_logits must hold at least one image (B >= 1)")
    if not isinstance(pred_boxes, Tensor) or tuple(pred_boxes.shape) != (n_images, n_queries, 4):
        raise ValueError(f"pred_boxes must have shape (B, Q, 4) = ({n_images}, {n_queries}, 4)")
    if len(targets) != n_images:
        raise ValueError(f"targets must hold one dict per image ({n_images}), got {len(targets)}")
    for b, target in enumerate(targets):
        if "labels" not in target or "boxes" not in target:
            raise ValueError(f"targets[{b}] must have the keys 'labels' and 'boxes'")
        _check_labels(target["labels"], f"targets[{b}]['labels']", num_classes)
        _check_boxes(target["boxes"], f"targets[{b}]['boxes']", target["labels"].shape[0])
        if target["labels"].shape[0] > n_queries:
            raise ValueError(f"targets[{b}] holds {target['labels'].shape[0]} boxes but there are only "
                             f"Q = {n_queries} queries to match them")
    if not eos_coef > 0:
        raise ValueError(f"eos_coef must be > 0, got {eos_coef}")
    for name, value in zip(("w_class", "w_bbox", "w_giou"), weights):
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _check_boxes(boxes: Tensor, name: str, n: int | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``boxes`` is ``(n, 4)`` (any ``n`` when None)."""
    if not isinstance(boxes, Tensor) or boxes.ndim != 2 or boxes.shape[-1] != 4:
        shape = tuple(boxes.shape) if isinstance(boxes, Tensor) else type(boxes).__name__
        raise ValueError(f"{name} must have shape (M, 4), got {shape}")
    if n is not None and boxes.shape[0] != n:
        raise ValueError(f"{name} must hold {n} boxes to match its labels, got {boxes.shape[0]}")


def _check_labels(labels: Tensor, name: str, num_classes: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``labels`` is a 1-D integer tensor in ``[0, num_classes)``."""
    if not isinstance(labels, Tensor) or labels.ndim != 1:
        raise ValueError(f"{name} must be a 1-D tensor of class ids")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer class ids, got dtype {labels.dtype}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"{name} must lie in [0, num_classes) = [0, {num_classes}), got "
                         f"min {int(labels.min())}, max {int(labels.max())}")
