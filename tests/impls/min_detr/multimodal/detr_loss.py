"""The DETR set-prediction loss: Hungarian matching of queries to objects, then CE ...

TODO: your plan (not implemented yet).
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
    raise NotImplementedError("hungarian_match: not implemented yet")


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

    Each image is matched with :func:`hungarian_match` using the loss weights as matching costs
    (``cost_class = w_class``, ``cost_bbox = w_bbox``, ``cost_giou = w_giou``, as in DETR).

    Args:
        pred_logits: ``(B, Q, C + 1)`` class logits, ``C = num_classes`` is "no object".
        pred_boxes: ``(B, Q, 4)`` predicted ``cxcywh`` boxes in [0, 1].
        targets: ``B`` dicts with ``"labels"`` ``(M_b,)`` integer ids in ``[0, C)`` and ``"boxes"``
            ``(M_b, 4)`` ``cxcywh`` boxes; ``M_b = 0`` is allowed.
        num_classes: ``C`` (>= 1).
        eos_coef: class weight of "no object" in the cross-entropy (> 0).
        w_class, w_bbox, w_giou: non-negative weights of the three terms.

    Returns:
        ``{"loss", "loss_ce", "loss_bbox", "loss_giou"}``, each a ``()`` tensor in the dtype of
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
    raise NotImplementedError("detr_set_loss: not implemented yet")
