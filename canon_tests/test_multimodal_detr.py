"""Reference tests for canon #40: the Hungarian algorithm (NumPy) and the DETR set loss (torch).

Optimality is always checked against brute force over permutations, which needs nothing but the
standard library; SciPy's ``linear_sum_assignment`` is a second, optional oracle. The DETR matching
cost is recomputed here from the formula with plain Python box arithmetic, so the matching check does
not lean on the item's own (or #18's) GIoU.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from canon_refs.multimodal import detr_loss, hungarian
from pytest_mlcanon.testing import (
    assert_close,
    call_leaves_inputs_unchanged,
    optional_module,
    rng,
    strict_numpy,
)

pytestmark = pytest.mark.canon("multimodal/detr")

LOSS_KEYS = ("loss", "loss_ce", "loss_bbox", "loss_giou")


# --- helpers ------------------------------------------------------------------------------------------


def brute_force_min_cost(cost: np.ndarray) -> float:
    """Minimum total cost over every matching of size min(N, M), by enumeration (N, M <= 8)."""
    cost = np.asarray(cost, dtype=np.float64)
    n, m = cost.shape
    if n <= m:
        return min(sum(cost[i, j] for i, j in enumerate(cols)) for cols in itertools.permutations(range(m), n))
    return min(sum(cost[i, j] for j, i in enumerate(rows)) for rows in itertools.permutations(range(n), m))


def assert_valid_matching(cost: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
    """Size min(N, M), int64, rows strictly ascending, no row or column used twice, indices in range."""
    n, m = np.shape(cost)
    k = min(n, m)
    assert isinstance(rows, np.ndarray) and isinstance(cols, np.ndarray)
    assert rows.shape == (k,) and cols.shape == (k,)
    assert rows.dtype == np.int64 and cols.dtype == np.int64
    assert np.all(np.diff(rows) > 0), f"rows must be strictly ascending, got {rows}"
    assert len(set(cols.tolist())) == k, f"a column is used twice: {cols}"
    assert k == 0 or (rows.min() >= 0 and rows.max() < n and cols.min() >= 0 and cols.max() < m)


def _xyxy(box: list[float]) -> list[float]:
    cx, cy, w, h = box
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def giou_pair(a_cxcywh: list[float], b_cxcywh: list[float]) -> float:
    """GIoU of two cxcywh boxes in plain Python floats (the test's own formula)."""
    a, b = _xyxy(a_cxcywh), _xyxy(b_cxcywh)
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    return inter / union - (hull - union) / hull


def matching_cost(logits: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor, tgt: torch.Tensor,
                  w_class: float = 1.0, w_bbox: float = 5.0, w_giou: float = 2.0) -> np.ndarray:
    """DETR's (Q, M) matching cost written out entry by entry."""
    prob = torch.softmax(logits.double(), dim=-1).tolist()
    q_boxes, t_boxes, t_labels = boxes.double().tolist(), tgt.double().tolist(), labels.tolist()
    cost = np.zeros((len(q_boxes), len(t_boxes)))
    for q, p in enumerate(q_boxes):
        for j, t in enumerate(t_boxes):
            l1 = sum(abs(x - y) for x, y in zip(p, t))
            cost[q, j] = -w_class * prob[q][t_labels[j]] + w_bbox * l1 - w_giou * giou_pair(p, t)
    return cost


def random_boxes(n: int, gen: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` cxcywh boxes with centres in [0.2, 0.8] and sides in [0.05, 0.35]."""
    centres = 0.2 + 0.6 * torch.rand(n, 2, generator=gen, dtype=dtype)
    sizes = 0.05 + 0.3 * torch.rand(n, 2, generator=gen, dtype=dtype)
    return torch.cat([centres, sizes], dim=1)


def random_batch(seed: int, sizes: tuple[int, ...] = (3, 0, 5), n_queries: int = 7, num_classes: int = 4,
                 dtype: torch.dtype = torch.float64):
    """Random logits ``(B, Q, C+1)``, boxes ``(B, Q, 4)`` and targets with ``sizes[b]`` objects each."""
    gen = torch.Generator().manual_seed(seed)
    batch = len(sizes)
    logits = torch.randn(batch, n_queries, num_classes + 1, generator=gen, dtype=dtype)
    boxes = random_boxes(batch * n_queries, gen, dtype).reshape(batch, n_queries, 4)
    targets = [
        {"labels": torch.randint(0, num_classes, (m,), generator=gen), "boxes": random_boxes(m, gen, dtype)}
        for m in sizes
    ]
    return logits, boxes, targets


# --- Hungarian algorithm --------------------------------------------------------------------------------
# Optimal totals are compared at 1e-9: float64 sums of at most 8 costs below 1 differ by ~1e-15 between
# summation orders, while a suboptimal matching of these random costs is off by far more.


def test_three_by_three_example():
    cost = np.array([[4, 1, 3], [2, 0, 5], [3, 2, 2]])
    rows, cols = hungarian.linear_sum_assignment(cost)
    assert rows.tolist() == [0, 1, 2]
    assert cols.tolist() == [1, 0, 2]
    assert rows.dtype == np.int64 and cols.dtype == np.int64
    assert cost[rows, cols].sum() == 5


@pytest.mark.parametrize("shape", [(6, 6), (4, 7), (7, 4)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_costs_match_brute_force(shape, seed):
    cost = rng(seed).normal(size=shape)
    rows, cols = hungarian.linear_sum_assignment(cost)
    assert_valid_matching(cost, rows, cols)
    assert abs(cost[rows, cols].sum() - brute_force_min_cost(cost)) <= 1e-9


@pytest.mark.parametrize("shape", [(6, 6), (4, 7), (7, 4), (1, 5), (5, 1), (8, 8)])
def test_integer_costs_with_ties_match_brute_force(shape):
    cost = rng(7).integers(0, 4, size=shape).astype(np.float64)  # many ties among optimal matchings
    rows, cols = hungarian.linear_sum_assignment(cost)
    assert_valid_matching(cost, rows, cols)
    assert abs(cost[rows, cols].sum() - brute_force_min_cost(cost)) <= 1e-9


@pytest.mark.parametrize("shape", [(6, 6), (4, 7), (7, 4), (30, 45), (45, 30)])
def test_agrees_with_scipy(shape):
    optimize = optional_module("scipy.optimize")
    for seed in range(3):
        cost = rng(100 + seed).normal(size=shape) * 10
        rows, cols = hungarian.linear_sum_assignment(cost)
        assert_valid_matching(cost, rows, cols)
        ref_rows, ref_cols = optimize.linear_sum_assignment(cost)
        np.testing.assert_allclose(cost[rows, cols].sum(), cost[ref_rows, ref_cols].sum(), atol=1e-9, rtol=0)


def test_planted_permutation_is_recovered_at_size_100():
    # A zero-cost permutation hidden among costs >= 1 is the unique optimum; brute force cannot reach
    # n = 100, and an O(n^3) solver needs well under a second.
    g = rng(3)
    n = 100
    perm = g.permutation(n)
    cost = 1.0 + g.random((n, n))
    cost[np.arange(n), perm] = 0.0
    rows, cols = hungarian.linear_sum_assignment(cost)
    assert rows.tolist() == list(range(n))
    assert cols.tolist() == perm.tolist()


def test_negative_costs_and_maximisation():
    profit = rng(11).normal(size=(5, 6))
    rows, cols = hungarian.linear_sum_assignment(-profit)
    assert_valid_matching(profit, rows, cols)
    best = -brute_force_min_cost(-profit)
    assert abs(profit[rows, cols].sum() - best) <= 1e-9


def test_input_is_not_modified_and_lists_are_accepted():
    cost = rng(5).normal(size=(4, 6))
    before = cost.copy()
    rows, cols = hungarian.linear_sum_assignment(cost)
    np.testing.assert_array_equal(cost, before)
    rows_l, cols_l = hungarian.linear_sum_assignment(cost.tolist())
    assert rows_l.tolist() == rows.tolist() and cols_l.tolist() == cols.tolist()


@pytest.mark.edge_case
def test_all_equal_cost_gives_a_perfect_matching():
    for shape in [(5, 5), (3, 6), (6, 3)]:
        cost = np.full(shape, 2.5)
        rows, cols = hungarian.linear_sum_assignment(cost)
        assert_valid_matching(cost, rows, cols)
        assert cost[rows, cols].sum() == 2.5 * min(shape)
    rows, cols = hungarian.linear_sum_assignment(np.zeros((5, 5)))
    assert sorted(cols.tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.edge_case
@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_cost_gives_two_empty_arrays(shape):
    rows, cols = hungarian.linear_sum_assignment(np.zeros(shape))
    assert rows.shape == (0,) and cols.shape == (0,)
    assert rows.dtype == np.int64 and cols.dtype == np.int64


@pytest.mark.edge_case
def test_single_row_and_single_column_pick_the_minimum():
    row = np.array([[3.0, -1.0, 2.0, 0.5]])
    assert [a.tolist() for a in hungarian.linear_sum_assignment(row)] == [[0], [1]]
    column = row.T.copy()
    assert [a.tolist() for a in hungarian.linear_sum_assignment(column)] == [[1], [0]]
    assert [a.tolist() for a in hungarian.linear_sum_assignment([[7.0]])] == [[0], [0]]


@pytest.mark.numerics_probe
@pytest.mark.parametrize("scale", [1e12, 1e-12, 1e150])
def test_extreme_cost_magnitudes(scale):
    # Costs far above a "big number" sentinel such as 1e9 (or far below 1) must be handled as well as
    # unit costs: the optimal assignment of a scaled matrix is the same, and no float warning fires.
    base = rng(21).random((6, 6))
    want = brute_force_min_cost(base)
    with strict_numpy():
        rows, cols = hungarian.linear_sum_assignment(base * scale)
    assert_valid_matching(base, rows, cols)
    assert abs(base[rows, cols].sum() - want) <= 1e-9


@pytest.mark.numerics_probe
def test_large_offset_does_not_change_the_matching():
    base = rng(22).integers(0, 50, size=(7, 5)).astype(np.float64)
    want = brute_force_min_cost(base)
    with strict_numpy():
        rows, cols = hungarian.linear_sum_assignment(base + 1e10)
    assert_valid_matching(base, rows, cols)
    assert base[rows, cols].sum() == want


@pytest.mark.contract
@pytest.mark.parametrize(
    "bad",
    [np.zeros(4), np.zeros((2, 2, 2)), np.array([[0.0, np.nan], [1.0, 2.0]]), np.array([[0.0, np.inf], [1.0, 2.0]])],
    ids=["1-D", "3-D", "nan", "inf"],
)
def test_cost_errors(bad):
    with pytest.raises(ValueError):
        hungarian.linear_sum_assignment(bad)


# --- DETR matching ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_hungarian_match_agrees_with_brute_force(seed):
    logits, boxes, targets = random_batch(seed, sizes=(4,), n_queries=6)
    labels, tgt = targets[0]["labels"], targets[0]["boxes"]
    pred_idx, tgt_idx = detr_loss.hungarian_match(logits[0], boxes[0], labels, tgt)
    assert pred_idx.dtype == torch.long and tgt_idx.dtype == torch.long
    assert pred_idx.shape == (4,) and tgt_idx.shape == (4,)
    assert sorted(tgt_idx.tolist()) == [0, 1, 2, 3]
    assert len(set(pred_idx.tolist())) == 4
    cost = matching_cost(logits[0], boxes[0], labels, tgt)
    got = cost[pred_idx.numpy(), tgt_idx.numpy()].sum()
    assert abs(got - brute_force_min_cost(cost.T)) <= 1e-9


def test_hungarian_match_uses_the_cost_weights():
    # Query 0 sits on target 0's box but predicts target 1's class, query 1 the other way round:
    # a box-only cost pairs (0, 0), (1, 1); a class-only cost pairs (0, 1), (1, 0).
    logits = torch.tensor([[0.0, 8.0, 0.0], [8.0, 0.0, 0.0]], dtype=torch.float64)
    boxes = torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.7, 0.2, 0.2]], dtype=torch.float64)
    labels = torch.tensor([0, 1])
    pairs = {}
    for name, kw in {"box": dict(cost_class=0.0), "class": dict(cost_bbox=0.0, cost_giou=0.0)}.items():
        pred_idx, tgt_idx = detr_loss.hungarian_match(logits, boxes, labels, boxes.clone(), **kw)
        pairs[name] = sorted(zip(pred_idx.tolist(), tgt_idx.tolist()))
    assert pairs["box"] == [(0, 0), (1, 1)]
    assert pairs["class"] == [(0, 1), (1, 0)]


def test_hungarian_match_needs_no_gradient():
    logits, boxes, targets = random_batch(1, sizes=(3,))
    logits.requires_grad_(True)
    boxes.requires_grad_(True)
    pred_idx, tgt_idx = detr_loss.hungarian_match(logits[0], boxes[0], targets[0]["labels"], targets[0]["boxes"])
    assert not pred_idx.requires_grad and not tgt_idx.requires_grad


# --- DETR set loss ---------------------------------------------------------------------------------------


def test_loss_matches_the_formula_written_out():
    num_classes, eos = 3, 0.25
    w_class, w_bbox, w_giou = 1.5, 4.0, 3.0
    # The matching costs are the implementation's choice (the loss weights, or DETR's separate matcher
    # costs 1/5/2): this problem is one where both give the same matching, which the test checks first.
    logits, boxes, targets = random_batch(6, sizes=(2, 0, 3), n_queries=5, num_classes=num_classes)
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=num_classes, eos_coef=eos,
                                  w_class=w_class, w_bbox=w_bbox, w_giou=w_giou)
    assert set(LOSS_KEYS) <= set(out)  # the four documented keys; extra keys are allowed
    ce_num = ce_den = l1 = giou = 0.0
    for b, target in enumerate(targets):
        cost = matching_cost(logits[b], boxes[b], target["labels"], target["boxes"], w_class, w_bbox, w_giou)
        rows, cols = hungarian.linear_sum_assignment(cost)
        assert abs(cost[rows, cols].sum() - (brute_force_min_cost(cost) if cost.size else 0.0)) <= 1e-9
        if cost.size:  # the same matching is optimal for DETR's default matcher costs as well
            default_cost = matching_cost(logits[b], boxes[b], target["labels"], target["boxes"])
            assert default_cost[rows, cols].sum() <= brute_force_min_cost(default_cost) + 1e-9
        label_of = {int(q): int(target["labels"][j]) for q, j in zip(rows, cols)}
        log_probs = torch.log_softmax(logits[b], dim=-1)
        for q in range(logits.shape[1]):
            y = label_of.get(q, num_classes)
            weight = eos if y == num_classes else 1.0
            ce_num -= weight * float(log_probs[q, y])
            ce_den += weight
        for q, j in zip(rows, cols):
            p, t = boxes[b, q].tolist(), target["boxes"][j].tolist()
            l1 += sum(abs(x - y) for x, y in zip(p, t))
            giou += 1.0 - giou_pair(p, t)
    n_boxes = 5
    want = {"loss_ce": ce_num / ce_den, "loss_bbox": l1 / n_boxes, "loss_giou": giou / n_boxes}
    want["loss"] = w_class * want["loss_ce"] + w_bbox * want["loss_bbox"] + w_giou * want["loss_giou"]
    for key in LOSS_KEYS:
        assert out[key].shape == () and out[key].dtype == torch.float64
        assert_close(out[key], torch.tensor(want[key], dtype=torch.float64), cond=16.0, what=f"detr_set_loss[{key!r}]")


def test_cross_entropy_equals_torch_with_class_weights():
    logits, boxes, targets = random_batch(6, sizes=(2, 1), n_queries=4, num_classes=3)
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=3)
    classes = torch.full((2, 4), 3, dtype=torch.long)
    for b, target in enumerate(targets):
        pred_idx, tgt_idx = detr_loss.hungarian_match(logits[b], boxes[b], target["labels"], target["boxes"])
        classes[b, pred_idx] = target["labels"][tgt_idx]
    weight = torch.tensor([1.0, 1.0, 1.0, 0.1], dtype=torch.float64)
    want = F.cross_entropy(logits.reshape(-1, 4), classes.reshape(-1), weight=weight)
    assert_close(out["loss_ce"], want, cond=4.0, what="detr_set_loss['loss_ce'] vs F.cross_entropy(weight=...)")


@pytest.mark.parametrize("seed", range(3))
def test_permuting_queries_leaves_losses_unchanged(seed):
    logits, boxes, targets = random_batch(seed, sizes=(3, 0, 5), n_queries=7)
    base = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=4)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(seed + 50))
    permuted = detr_loss.detr_set_loss(logits[:, perm], boxes[:, perm], targets, num_classes=4)
    for key in LOSS_KEYS:
        assert_close(permuted[key], base[key], cond=16.0, what=f"detr_set_loss[{key!r}] with queries permuted")


def test_permuting_targets_leaves_losses_unchanged():
    logits, boxes, targets = random_batch(8, sizes=(4, 2), n_queries=6)
    base = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=4)
    shuffled = [{"labels": t["labels"].flip(0), "boxes": t["boxes"].flip(0)} for t in targets]
    other = detr_loss.detr_set_loss(logits, boxes, shuffled, num_classes=4)
    for key in LOSS_KEYS:
        assert_close(other[key], base[key], cond=16.0, what=f"detr_set_loss[{key!r}] with targets permuted")


def test_perfect_predictions_give_zero_box_losses():
    num_classes, n_queries = 4, 6
    gen = torch.Generator().manual_seed(3)
    targets = [
        {"labels": torch.tensor([2, 0, 3]), "boxes": random_boxes(3, gen)},
        {"labels": torch.tensor([1]), "boxes": random_boxes(1, gen)},
    ]
    logits = torch.zeros(2, n_queries, num_classes + 1, dtype=torch.float64)
    logits[..., num_classes] = 20.0
    boxes = random_boxes(2 * n_queries, gen).reshape(2, n_queries, 4)
    slots = [[4, 1, 5], [2]]  # the query that carries each target
    for b, target in enumerate(targets):
        for j, q in enumerate(slots[b]):
            logits[b, q] = 0.0
            logits[b, q, target["labels"][j]] = 20.0
            boxes[b, q] = target["boxes"][j]
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=num_classes)
    assert_close(out["loss_bbox"], torch.tensor(0.0, dtype=torch.float64), what="loss_bbox of perfect boxes")
    assert_close(out["loss_giou"], torch.tensor(0.0, dtype=torch.float64), magnitude=1.0,  # 1 - GIoU: terms of 1 cancel
                 what="loss_giou of perfect boxes")
    assert 0.0 <= out["loss_ce"].item() < 1e-6  # CE of logits 20 apart: about 5 * exp(-20) = 1e-8
    for b, target in enumerate(targets):
        pred_idx, tgt_idx = detr_loss.hungarian_match(logits[b], boxes[b], target["labels"], target["boxes"])
        assert sorted(zip(tgt_idx.tolist(), pred_idx.tolist())) == list(enumerate(slots[b]))


@pytest.mark.edge_case
def test_image_without_targets():
    logits, boxes, targets = random_batch(4, sizes=(0,), n_queries=5)
    logits.requires_grad_(True)
    boxes.requires_grad_(True)
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=4)
    assert out["loss_bbox"].item() == 0.0 and out["loss_giou"].item() == 0.0
    assert math.isfinite(out["loss_ce"].item())
    want = F.cross_entropy(logits[0].detach(), torch.full((5,), 4))  # every query is "no object"
    assert_close(out["loss_ce"], want, cond=4.0, what="loss_ce of an image without targets")
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all()
    # the box losses are 0 here: a loss that no longer depends on pred_boxes (grad None) is as right as one
    # that carries a zero gradient back
    assert boxes.grad is None or torch.count_nonzero(boxes.grad) == 0


@pytest.mark.edge_case
def test_one_query_one_target():
    logits = torch.tensor([[[0.5, -0.2, 0.1]]], dtype=torch.float64)
    box = [0.5, 0.5, 0.2, 0.4]
    pred = [0.55, 0.45, 0.3, 0.3]
    targets = [{"labels": torch.tensor([1]), "boxes": torch.tensor([box], dtype=torch.float64)}]
    out = detr_loss.detr_set_loss(logits, torch.tensor([[pred]], dtype=torch.float64), targets, num_classes=2)
    assert_close(out["loss_ce"], -torch.log_softmax(logits[0, 0], -1)[1], cond=4.0, what="loss_ce, one query")
    assert_close(out["loss_bbox"], torch.tensor(0.3, dtype=torch.float64), what="loss_bbox, one pair")  # 0.05+0.05+0.1+0.1
    assert_close(out["loss_giou"], torch.tensor(1 - giou_pair(pred, box), dtype=torch.float64), cond=4.0,
                 what="loss_giou, one pair")


def test_gradients_flow_to_logits_and_matched_boxes_only():
    logits, boxes, targets = random_batch(9, sizes=(2,), n_queries=5, dtype=torch.float32)
    logits.requires_grad_(True)
    boxes.requires_grad_(True)
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=4)
    assert out["loss"].dtype == torch.float32
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad.abs().sum(-1) > 0).all()
    pred_idx, _ = detr_loss.hungarian_match(logits[0], boxes[0], targets[0]["labels"], targets[0]["boxes"])
    moved = (boxes.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert moved == sorted(pred_idx.tolist())


@pytest.mark.numerics_probe
def test_extreme_logits_stay_finite():
    logits, boxes, targets = random_batch(10, sizes=(2, 3), n_queries=6, dtype=torch.float32)
    logits = (torch.sign(logits) * 1e4).requires_grad_(True)
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=4)
    for key in LOSS_KEYS:
        assert torch.isfinite(out[key]), key
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all()
    assert out["loss_ce"].item() > 100.0, "with +-1e4 logits some queries are confidently wrong"


@pytest.mark.numerics_probe
def test_degenerate_zero_size_boxes_stay_finite():
    logits, boxes, targets = random_batch(12, sizes=(2,), n_queries=3)
    boxes = boxes.clone()
    boxes[..., 2:] = 0.0
    targets[0]["boxes"][:, 2:] = 0.0
    boxes.requires_grad_(True)
    out = detr_loss.detr_set_loss(logits, boxes, targets, num_classes=4)
    out["loss"].backward()
    assert all(torch.isfinite(out[k]) for k in LOSS_KEYS)
    assert torch.isfinite(boxes.grad).all()


def test_loss_leaves_its_inputs_unchanged():
    logits, boxes, targets = random_batch(13, sizes=(2, 1), n_queries=4, num_classes=3)
    call_leaves_inputs_unchanged(detr_loss.detr_set_loss, logits, boxes, targets, num_classes=3)
    call_leaves_inputs_unchanged(detr_loss.hungarian_match, logits[0], boxes[0], targets[0]["labels"],
                                 targets[0]["boxes"])


def _valid_inputs():
    logits, boxes, targets = random_batch(0, sizes=(2, 1), n_queries=4, num_classes=3)
    return logits, boxes, targets


@pytest.mark.contract
@pytest.mark.parametrize(
    "mutate, arg",
    [
        (lambda lg, bx, tg: (lg, bx, [{"labels": torch.tensor([0, 3]), "boxes": tg[0]["boxes"]}, tg[1]]), "labels"),
        (lambda lg, bx, tg: (lg, bx, [{"labels": torch.tensor([-1, 0]), "boxes": tg[0]["boxes"]}, tg[1]]), "labels"),
        (lambda lg, bx, tg: (lg, bx, [tg[0], {"labels": tg[1]["labels"], "boxes": torch.rand(1, 5)}]), "boxes"),
        (lambda lg, bx, tg: (lg, bx, [tg[0], {"labels": tg[1]["labels"], "boxes": torch.rand(2, 4)}]), "boxes"),
        (lambda lg, bx, tg: (lg[..., :3], bx, tg), "num_classes"),
        (lambda lg, bx, tg: (lg, bx[..., :3], tg), "pred_boxes"),
        (lambda lg, bx, tg: (lg, bx, tg[:1]), "targets"),
    ],
    ids=["label-too-big", "label-negative", "box-width-5", "box-count", "logit-width", "pred-boxes", "n-targets"],
)
def test_detr_set_loss_errors(mutate, arg):
    logits, boxes, targets = mutate(*_valid_inputs())
    with pytest.raises(ValueError):
        detr_loss.detr_set_loss(logits, boxes, targets, num_classes=3)


@pytest.mark.contract
def test_hungarian_match_errors():
    logits, boxes, targets = _valid_inputs()
    labels, tgt = targets[0]["labels"], targets[0]["boxes"]
    with pytest.raises(ValueError):
        detr_loss.hungarian_match(logits[0], boxes[0], torch.tensor([0, 3]), tgt)
    with pytest.raises(ValueError):
        detr_loss.hungarian_match(logits[0], boxes[0], labels, tgt[:, :3])
    with pytest.raises(ValueError):
        detr_loss.hungarian_match(logits[0], boxes[0, :2], labels, tgt)
