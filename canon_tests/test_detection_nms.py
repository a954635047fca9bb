"""Reference tests for canon #19: greedy NMS and per-class batched NMS (docs/contract.md #19)."""

from __future__ import annotations

import pytest
import torch

from canon_refs.detection import nms
from pytest_mlcanon.testing import (
    call_leaves_inputs_unchanged,
    iou_pair,
    low_precision_dtype,
    optional_module,
)

pytestmark = pytest.mark.canon("detection/nms")

THREE_BOXES = [[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]]
THREE_SCORES = [0.9, 0.8, 0.7]


def _t(rows, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


def _random_problem(n: int, seed: int, n_classes: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` float64 xyxy boxes jittered around ``n // 10`` objects (so IoUs span (0, 1)), distinct
    scores (a permutation) and class ids in ``[0, n_classes)``."""
    gen = torch.Generator().manual_seed(seed)
    n_objects = max(1, n // 10)
    centres = torch.rand(n_objects, 2, generator=gen, dtype=torch.float64) * 100
    sizes = torch.rand(n_objects, 2, generator=gen, dtype=torch.float64) * 20 + 10
    owner = torch.randint(0, n_objects, (n,), generator=gen)
    centre = centres[owner] + torch.randn(n, 2, generator=gen, dtype=torch.float64) * 3
    half = sizes[owner] * (1 + 0.2 * torch.rand(n, 2, generator=gen, dtype=torch.float64)) / 2
    boxes = torch.cat([centre - half, centre + half], dim=1)
    scores = (torch.randperm(n, generator=gen).to(torch.float64) + 1) / n
    classes = torch.randint(0, n_classes, (n,), generator=gen)
    return boxes, scores, classes


def _brute_force_nms(boxes: torch.Tensor, scores: torch.Tensor, thr: float, classes=None) -> list[int]:
    """Textbook greedy NMS: walk by (score desc, index asc); keep a box unless a kept box of its class
    overlaps it with IoU > thr."""
    b = boxes.tolist()
    s = scores.tolist()
    c = [0] * len(b) if classes is None else classes.tolist()
    kept: list[int] = []
    for i in sorted(range(len(b)), key=lambda k: (-s[k], k)):
        if all(c[j] != c[i] or iou_pair(b[i], b[j]) <= thr for j in kept):
            kept.append(i)
    return kept


# -- closed-form examples ----------------------------------------------------------------------------


def test_three_boxes_at_two_thresholds():
    boxes, scores = _t(THREE_BOXES), _t(THREE_SCORES)
    keep = nms.nms(boxes, scores, 0.5)
    assert keep.dtype == torch.long
    assert keep.tolist() == [0, 2]  # IoU(0, 1) = 81/119 = 0.6807 > 0.5
    assert nms.nms(boxes, scores, 0.7).tolist() == [0, 1, 2]


def test_threshold_brackets_iou_81_over_119():
    boxes, scores = _t(THREE_BOXES, torch.float64), _t(THREE_SCORES, torch.float64)
    assert nms.nms(boxes, scores, 0.6806).tolist() == [0, 2]
    assert nms.nms(boxes, scores, 0.6808).tolist() == [0, 1, 2]


def test_suppression_is_strict_greater_than():
    # IoU([0,0,2,1], [0,0,1,1]) = 1/2 exactly: at threshold 0.5 nothing is suppressed.
    boxes = _t([[0, 0, 2, 1], [0, 0, 1, 1]], torch.float64)
    scores = _t([0.9, 0.8], torch.float64)
    assert nms.nms(boxes, scores, 0.5).tolist() == [0, 1]
    assert nms.nms(boxes, scores, 0.4999).tolist() == [0]


def test_suppressed_box_does_not_suppress():
    # A suppresses B (IoU 1/3); B would suppress C (IoU 1/3), but B is gone and IoU(A, C) = 0: C stays.
    boxes = _t([[0, 0, 10, 10], [5, 0, 15, 10], [10, 0, 20, 10]])
    scores = _t([0.9, 0.8, 0.7])
    assert nms.nms(boxes, scores, 0.3).tolist() == [0, 2]


def test_output_sorted_by_decreasing_score_with_original_indices():
    boxes = _t([[20, 20, 30, 30], [0, 0, 10, 10], [50, 50, 60, 60], [1, 1, 11, 11]])
    scores = _t([0.2, 0.6, 0.9, 0.95])
    assert nms.nms(boxes, scores, 0.5).tolist() == [3, 2, 0]


def test_inputs_not_mutated():
    boxes, scores = _t(THREE_BOXES), _t([0.7, 0.9, 0.8])
    call_leaves_inputs_unchanged(nms.nms, boxes, scores, 0.5)
    call_leaves_inputs_unchanged(nms.batched_nms, boxes, scores, torch.tensor([0, 1, 0]), 0.5)


# -- ties and thresholds -----------------------------------------------------------------------------


@pytest.mark.edge_case
def test_identical_boxes_equal_scores_keep_lower_index():
    boxes = _t([[0, 0, 4, 4], [0, 0, 4, 4], [0, 0, 4, 4]])
    assert nms.nms(boxes, _t([0.5, 0.5, 0.5]), 0.5).tolist() == [0]
    assert nms.nms(boxes, _t([0.1, 0.5, 0.5]), 0.5).tolist() == [1]


@pytest.mark.edge_case
def test_equal_scores_are_ordered_by_index():
    boxes = _t([[0, 0, 1, 1], [10, 10, 11, 11], [20, 20, 21, 21], [30, 30, 31, 31], [40, 40, 41, 41]])
    scores = _t([0.3, 0.5, 0.5, 0.3, 0.5])
    assert nms.nms(boxes, scores, 0.5).tolist() == [1, 2, 4, 0, 3]


@pytest.mark.parametrize("n", [17, 40, 100])
def test_more_than_sixteen_tied_scores_keep_index_order(n):
    # torch's default (unstable) CPU sort orders ties arbitrarily above 16 elements; the stated
    # convention is the stable order: among equal scores, the lower index first.
    spread = _t([[20 * i, 0, 20 * i + 10, 10] for i in range(n)])  # disjoint boxes: every box is kept
    scores = torch.full((n,), 0.5)
    scores[n // 2] = 0.9
    want = [n // 2] + [i for i in range(n) if i != n // 2]
    assert nms.nms(spread, scores, 0.5).tolist() == want
    stacked = _t([[0, 0, 10, 10]] * n)  # identical boxes: only the first of the tied best survives
    assert nms.nms(stacked, torch.full((n,), 0.5), 0.5).tolist() == [0]
    classes = torch.arange(n) % 3
    assert nms.batched_nms(stacked, torch.full((n,), 0.5), classes, 0.5).tolist() == [0, 1, 2]


@pytest.mark.edge_case
def test_threshold_one_keeps_everything():
    boxes = _t([[0, 0, 4, 4], [0, 0, 4, 4], [1, 1, 5, 5]])
    scores = _t([0.2, 0.9, 0.5])
    assert nms.nms(boxes, scores, 1.0).tolist() == [1, 2, 0]


@pytest.mark.edge_case
def test_threshold_zero_suppresses_any_overlap():
    boxes = _t([[0, 0, 4, 4], [3, 3, 8, 8], [4, 0, 8, 3]])  # box 2 only touches box 0 (IoU 0)
    assert nms.nms(boxes, _t([0.9, 0.8, 0.7]), 0.0).tolist() == [0, 2]


# -- edge cases --------------------------------------------------------------------------------------


@pytest.mark.edge_case
def test_empty_input_gives_empty_long_tensor():
    keep = nms.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert keep.shape == (0,) and keep.dtype == torch.long
    keep = nms.batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.5)
    assert keep.shape == (0,) and keep.dtype == torch.long


@pytest.mark.edge_case
def test_single_box_is_kept():
    assert nms.nms(_t([[1, 2, 3, 4]]), _t([0.1]), 0.5).tolist() == [0]
    assert nms.batched_nms(_t([[1, 2, 3, 4]]), _t([0.1]), torch.tensor([3]), 0.5).tolist() == [0]


# -- random problems: brute force, permutation, torchvision -------------------------------------------


@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_matches_brute_force_greedy_on_200_random_boxes(thr):
    boxes, scores, _ = _random_problem(200, seed=0)
    keep = nms.nms(boxes, scores, thr)
    want = _brute_force_nms(boxes, scores, thr)
    assert keep.tolist() == want
    assert 10 < len(want) < 190, "the problem should be crowded enough for suppression to matter"


@pytest.mark.parametrize("thr", [0.3, 0.6])
def test_batched_matches_brute_force_per_class_on_200_random_boxes(thr):
    boxes, scores, classes = _random_problem(200, seed=1, n_classes=4)
    keep = nms.batched_nms(boxes, scores, classes, thr)
    assert keep.dtype == torch.long
    assert keep.tolist() == _brute_force_nms(boxes, scores, thr, classes)
    assert len(keep) > len(nms.nms(boxes, scores, thr)), "classes must shield boxes from each other"


def test_permuting_the_input_keeps_the_same_boxes():
    boxes, scores, _ = _random_problem(60, seed=2)
    perm = torch.randperm(60, generator=torch.Generator().manual_seed(3))
    kept = {tuple(r) for r in boxes[nms.nms(boxes, scores, 0.4)].tolist()}
    kept_perm = {tuple(r) for r in boxes[perm][nms.nms(boxes[perm], scores[perm], 0.4)].tolist()}
    assert kept == kept_perm


def test_matches_torchvision_when_installed():
    ops = optional_module("torchvision.ops")
    boxes, scores, classes = _random_problem(200, seed=4, n_classes=5)
    boxes, scores = boxes.float(), scores.float()
    for thr in (0.3, 0.5, 0.7):
        assert torch.equal(nms.nms(boxes, scores, thr), ops.nms(boxes, scores, thr))
        assert torch.equal(
            nms.batched_nms(boxes, scores, classes, thr), ops.batched_nms(boxes, scores, classes, thr)
        )


# -- batched_nms -------------------------------------------------------------------------------------


def test_batched_identical_boxes_of_different_classes_are_both_kept():
    boxes = _t([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]])
    scores = _t([0.9, 0.8, 0.7])
    assert nms.batched_nms(boxes, scores, torch.tensor([0, 1, 0]), 0.5).tolist() == [0, 1]
    assert nms.batched_nms(boxes, scores, torch.tensor([0, 0, 0]), 0.5).tolist() == [0]


def test_batched_output_sorted_by_decreasing_score_across_classes():
    boxes = _t([[0, 0, 10, 10], [40, 40, 50, 50], [1, 1, 11, 11], [0, 0, 10, 10]])
    scores = _t([0.5, 0.9, 0.7, 0.8])
    classes = torch.tensor([0, 1, 0, 2])
    assert nms.batched_nms(boxes, scores, classes, 0.5).tolist() == [1, 3, 2]


@pytest.mark.edge_case
def test_batched_separates_classes_with_negative_coordinates():
    # An offset of class_id * (max + 1) is zero here (max = -1): classes would not be separated.
    boxes = _t([[-10, -10, -1, -1], [-10, -10, -1, -1], [-9, -9, -1, -1]])
    scores = _t([0.9, 0.8, 0.7])
    assert nms.batched_nms(boxes, scores, torch.tensor([0, 1, 1]), 0.5).tolist() == [0, 1]


# -- numerics ----------------------------------------------------------------------------------------


@pytest.mark.numerics_probe
def test_half_precision_large_boxes_match_float32():
    dtype = low_precision_dtype()
    if dtype is None:
        pytest.skip("no float16/bfloat16 kernels")
    # 300-pixel boxes: areas overflow float16 (max 65504); IoUs are 0.8 and 0.25, far from 0.5.
    boxes = _t([[0, 0, 300, 300], [0, 0, 300, 375], [0, 0, 300, 1200], [600, 600, 900, 900]])
    scores = _t([0.9, 0.8, 0.7, 0.6])
    want = nms.nms(boxes, scores, 0.5)
    assert want.tolist() == [0, 2, 3]
    assert torch.equal(nms.nms(boxes.to(dtype), scores.to(dtype), 0.5), want)


@pytest.mark.numerics_probe
def test_infinite_scores_are_ordered():
    boxes = _t([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [21, 21, 31, 31]])
    scores = _t([float("-inf"), float("inf"), 0.0, 1e30])
    assert nms.nms(boxes, scores, 0.5).tolist() == [1, 3]


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_bad_boxes_raise():
    with pytest.raises(ValueError):
        nms.nms(torch.zeros(3, 5), torch.zeros(3), 0.5)
    with pytest.raises(ValueError):
        nms.nms(torch.zeros(4), torch.zeros(1), 0.5)
    with pytest.raises(ValueError):
        nms.batched_nms(torch.zeros(2, 3, 4), torch.zeros(2), torch.zeros(2, dtype=torch.long), 0.5)


@pytest.mark.contract
def test_bad_scores_raise():
    boxes = _t(THREE_BOXES)
    with pytest.raises(ValueError):
        nms.nms(boxes, torch.zeros(2), 0.5)
    with pytest.raises(ValueError):
        nms.nms(boxes, _t([0.5, float("nan"), 0.1]), 0.5)
    with pytest.raises(ValueError):
        nms.batched_nms(boxes, torch.zeros(4), torch.zeros(3, dtype=torch.long), 0.5)


@pytest.mark.contract
def test_bad_idxs_raise():
    boxes, scores = _t(THREE_BOXES), _t(THREE_SCORES)
    with pytest.raises(ValueError):
        nms.batched_nms(boxes, scores, torch.zeros(2, dtype=torch.long), 0.5)


@pytest.mark.contract
@pytest.mark.parametrize("thr", [-0.1, 1.5, float("nan")])
def test_threshold_outside_unit_interval_raises(thr):
    boxes, scores = _t(THREE_BOXES), _t(THREE_SCORES)
    with pytest.raises(ValueError):
        nms.nms(boxes, scores, thr)
    with pytest.raises(ValueError):
        nms.batched_nms(boxes, scores, torch.zeros(3, dtype=torch.long), thr)
