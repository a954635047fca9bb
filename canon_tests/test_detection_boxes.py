"""Reference tests for canon #18: box conversions, area, IoU and GIoU (docs/contract.md #18)."""

from __future__ import annotations

import pytest
import torch

from canon_refs.detection import boxes
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    iou_pair,
    optional_module,
    random_xyxy,
)

pytestmark = pytest.mark.canon("detection/boxes")


def _t(rows: list[list[float]], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


def _giou_pair(a: list[float], b: list[float]) -> float:
    cw = max(a[2], b[2]) - min(a[0], b[0])
    ch = max(a[3], b[3]) - min(a[1], b[1])
    area_c = cw * ch
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter_w * inter_h
    return iou_pair(a, b) - (area_c - union) / area_c


# -- IoU closed forms -------------------------------------------------------------------------------


def test_iou_overlapping_squares_is_one_seventh():
    iou = boxes.box_iou(_t([[0, 0, 2, 2]]), _t([[1, 1, 3, 3]]))
    assert iou.shape == (1, 1)
    assert iou.dtype == torch.float64
    assert_close(iou, _t([[1 / 7]]), what="box_iou([0,0,2,2], [1,1,3,3])")


def test_iou_identical_disjoint_touching_contained():
    a = _t([[0, 0, 2, 2], [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 4, 4]])
    b = _t([[0, 0, 2, 2], [2, 2, 3, 3], [1, 0, 2, 1], [1, 1, 2, 2]])
    iou = boxes.box_iou(a, b).diagonal()
    assert_close(iou, _t([1.0, 0.0, 0.0, 0.0625]), what="box_iou(identical, disjoint, touching, contained)")


def test_iou_disjoint_on_both_axes_is_zero_not_positive():
    # Without the clamp, the two negative sides (-1) * (-1) would make a positive "intersection".
    iou = boxes.box_iou(_t([[0, 0, 1, 1]]), _t([[2, 2, 3, 3], [5, -4, 6, -2]]))
    assert_close(iou, _t([[0.0, 0.0]]), what="box_iou(boxes disjoint on both axes)")


def test_iou_matrix_matches_pairwise_loop():
    a = random_xyxy(7, seed=1)
    b = random_xyxy(5, seed=2)
    iou = boxes.box_iou(a, b)
    assert iou.shape == (7, 5)
    want = _t([[iou_pair(x, y) for y in b.tolist()] for x in a.tolist()])
    assert_close(iou, want, what="box_iou(7 random, 5 random)")
    assert (iou > 0).any(), "random boxes should overlap somewhere, else the check is vacuous"


def test_box_area_values():
    area = boxes.box_area(_t([[0, 0, 2, 3], [1, 1, 1, 5], [-2, -1, 2, 1]]))
    assert_close(area, _t([6.0, 0.0, 8.0]), what="box_area")


# -- GIoU --------------------------------------------------------------------------------------------


def test_giou_disjoint_unit_squares_is_minus_seven_ninths():
    giou = boxes.generalized_box_iou(_t([[0, 0, 1, 1]]), _t([[2, 2, 3, 3]]))
    assert giou.shape == (1, 1)
    assert_close(giou, _t([[-7 / 9]]), what="generalized_box_iou([0,0,1,1], [2,2,3,3])")


def test_giou_matches_pairwise_loop_and_is_below_iou():
    a = random_xyxy(9, seed=3)
    b = random_xyxy(6, seed=4)
    giou = boxes.generalized_box_iou(a, b)
    iou = boxes.box_iou(a, b)
    want = _t([[_giou_pair(x, y) for y in b.tolist()] for x in a.tolist()])
    assert_close(giou, want, what="generalized_box_iou(9 random, 6 random)")
    assert (giou <= iou + 1e-12).all()  # float64 values in [-1, 1]: 1e-12 is thousands of ulps
    assert (giou >= -1).all() and (giou <= 1).all()
    assert (giou < iou - 1e-3).any(), "some pairs must be strictly penalised by the enclosing box"


def test_giou_of_identical_boxes_is_one():
    a = random_xyxy(4, seed=5)
    assert_close(boxes.generalized_box_iou(a, a).diagonal(), torch.ones(4, dtype=torch.float64),
                 what="generalized_box_iou(a, a).diagonal()")


def test_iou_and_giou_are_symmetric():
    a = random_xyxy(6, seed=6)
    b = random_xyxy(8, seed=7)
    for fn in (boxes.box_iou, boxes.generalized_box_iou):
        assert_close(fn(b, a), fn(a, b).T, what=f"{fn.__name__}(b, a) against {fn.__name__}(a, b).T")


# -- conversions -------------------------------------------------------------------------------------


def test_cxcywh_to_xyxy_value_and_inverse():
    assert_close(boxes.box_cxcywh_to_xyxy(_t([[5, 5, 2, 4]])), _t([[4, 3, 6, 7]]), what="box_cxcywh_to_xyxy")
    assert_close(boxes.box_xyxy_to_cxcywh(_t([[4, 3, 6, 7]])), _t([[5, 5, 2, 4]]), what="box_xyxy_to_cxcywh")


def test_xywh_to_xyxy_value():
    out = boxes.box_xywh_to_xyxy(_t([[1, 2, 3, 4], [10, 0, 0, 5]]))
    assert_close(out, _t([[1, 2, 4, 6], [10, 0, 10, 5]]), what="box_xywh_to_xyxy")


def test_conversions_round_trip_on_any_leading_shape():
    xyxy = random_xyxy(24, seed=8, dtype=torch.float32).reshape(2, 3, 4, 4)
    cxcywh = boxes.box_xyxy_to_cxcywh(xyxy)
    assert cxcywh.shape == xyxy.shape and cxcywh.dtype == torch.float32
    # float32 coordinates up to ~141: every element is compared at the spacing of the largest one
    assert_close(boxes.box_cxcywh_to_xyxy(cxcywh), xyxy, what="box_cxcywh_to_xyxy(box_xyxy_to_cxcywh(b))")
    xywh = torch.cat([xyxy[..., :2], xyxy[..., 2:] - xyxy[..., :2]], dim=-1)
    assert_close(boxes.box_xywh_to_xyxy(xywh), xyxy, what="box_xywh_to_xyxy")
    # cxcywh width/height equal the xywh width/height
    assert_close(cxcywh[..., 2:], xywh[..., 2:], magnitude=float(xyxy.abs().max()), what="box_xyxy_to_cxcywh(b)[..., 2:]")


# -- gradients ---------------------------------------------------------------------------------------


def test_giou_gradient_nonzero_for_disjoint_prediction_iou_gradient_zero():
    target = _t([[2, 2, 3, 3]])
    pred = _t([[0, 0, 1, 1]]).requires_grad_(True)
    boxes.generalized_box_iou(pred, target).sum().backward()
    assert pred.grad is not None and pred.grad.abs().sum() > 0.1
    # maximising GIoU moves the prediction towards the target: x2, y2 of the prediction grow
    assert pred.grad[0, 2] > 0 and pred.grad[0, 3] > 0
    pred2 = _t([[0, 0, 1, 1]]).requires_grad_(True)
    boxes.box_iou(pred2, target).sum().backward()
    assert pred2.grad is not None
    # exact zero is safe for every correct IoU: the clamped intersection is exactly 0, and so is its gradient
    assert torch.equal(pred2.grad, torch.zeros_like(pred2)), f"IoU gradient of a disjoint box: {pred2.grad}"


def test_iou_and_giou_pass_gradcheck():
    a = random_xyxy(4, seed=9).requires_grad_(True)
    b = random_xyxy(3, seed=10).requires_grad_(True)
    assert torch.autograd.gradcheck(boxes.generalized_box_iou, (a, b))
    assert torch.autograd.gradcheck(boxes.box_iou, (a, b))


# -- edge cases and numerics -------------------------------------------------------------------------


@pytest.mark.edge_case
def test_empty_inputs_give_empty_matrices():
    b = random_xyxy(3, seed=11)
    empty = torch.zeros(0, 4, dtype=torch.float64)
    for fn in (boxes.box_iou, boxes.generalized_box_iou):
        assert fn(empty, b).shape == (0, 3)
        assert fn(b, empty).shape == (3, 0)
    assert boxes.box_area(empty).shape == (0,)
    assert boxes.box_cxcywh_to_xyxy(empty).shape == (0, 4)


@pytest.mark.edge_case
def test_single_box_against_itself():
    one = _t([[3, 4, 8, 6]])
    assert_close(boxes.box_iou(one, one), _t([[1.0]]), what="box_iou(one box, itself)")
    assert_close(boxes.generalized_box_iou(one, one), _t([[1.0]]), what="generalized_box_iou(one box, itself)")


@pytest.mark.edge_case
def test_zero_area_boxes_give_finite_values():
    point = _t([[1, 1, 1, 1]])
    line = _t([[0, 0, 0, 2]])
    a = torch.cat([point, line, _t([[5, 5, 5, 5]])])
    iou = boxes.box_iou(a, a)
    giou = boxes.generalized_box_iou(a, a)
    assert torch.isfinite(iou).all() and torch.isfinite(giou).all()
    assert_close(iou, torch.zeros(3, 3, dtype=torch.float64), what="box_iou(zero-area boxes)")
    assert_close(giou[0, 0], _t(0.0), what="generalized_box_iou(point, same point)")  # enclosing box is empty too
    assert (giou >= -1).all() and (giou <= 1).all()


@pytest.mark.numerics_probe
def test_zero_area_boxes_give_finite_gradients():
    a = _t([[1, 1, 1, 1], [0, 0, 0, 2]]).requires_grad_(True)
    b = _t([[1, 1, 1, 1], [2, 0, 2, 2]]).requires_grad_(True)
    (boxes.box_iou(a, b).sum() + boxes.generalized_box_iou(a, b).sum()).backward()
    assert a.grad is not None and b.grad is not None
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


@pytest.mark.numerics_probe
def test_half_precision_large_pixel_boxes_stay_finite():
    # 300-pixel boxes: their area (9e4) overflows float16 (max 65504) even though every coordinate fits.
    a = _t([[0, 0, 300, 300], [100, 50, 420, 380], [10, 10, 12, 12]], dtype=torch.float32)
    b = _t([[20, 30, 310, 330], [0, 0, 400, 400]], dtype=torch.float32)
    assert_low_precision_matches(boxes.box_iou, a, b)
    assert_low_precision_matches(boxes.generalized_box_iou, a, b)


def test_dtype_is_preserved():
    for dtype in (torch.float32, torch.float64):
        a = random_xyxy(3, seed=12, dtype=dtype)
        assert boxes.box_iou(a, a).dtype == dtype
        assert boxes.generalized_box_iou(a, a).dtype == dtype
        assert boxes.box_cxcywh_to_xyxy(a).dtype == dtype
        assert boxes.box_area(a).dtype == dtype


def test_inputs_are_not_modified():
    a = random_xyxy(5, seed=15)
    b = random_xyxy(4, seed=16)
    for fn in (boxes.box_cxcywh_to_xyxy, boxes.box_xyxy_to_cxcywh, boxes.box_xywh_to_xyxy, boxes.box_area):
        call_leaves_inputs_unchanged(fn, a.clone())
    for fn in (boxes.box_iou, boxes.generalized_box_iou):
        call_leaves_inputs_unchanged(fn, a.clone(), b.clone())


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_wrong_last_dim_raises():
    bad = torch.zeros(3, 5)
    good = torch.zeros(2, 4)
    for fn in (boxes.box_cxcywh_to_xyxy, boxes.box_xyxy_to_cxcywh, boxes.box_xywh_to_xyxy, boxes.box_area):
        with pytest.raises(ValueError):
            fn(bad)
    for fn in (boxes.box_iou, boxes.generalized_box_iou):
        with pytest.raises(ValueError):
            fn(bad, good)
        with pytest.raises(ValueError):
            fn(good, bad)


@pytest.mark.contract
def test_inverted_boxes_raise():
    inverted_x = _t([[2, 0, 1, 1]])
    inverted_y = _t([[0, 3, 1, 1]])
    good = _t([[0, 0, 1, 1]])
    for bad in (inverted_x, inverted_y):
        with pytest.raises(ValueError):
            boxes.box_area(bad)
        for fn in (boxes.box_iou, boxes.generalized_box_iou):
            with pytest.raises(ValueError):
                fn(bad, good)
            with pytest.raises(ValueError):
                fn(good, bad)


# -- optional comparison -----------------------------------------------------------------------------


def test_matches_torchvision_when_installed():
    ops = optional_module("torchvision.ops")
    a = random_xyxy(11, seed=13, dtype=torch.float32)
    b = random_xyxy(7, seed=14, dtype=torch.float32)
    assert_close(boxes.box_iou(a, b), ops.box_iou(a, b), what="box_iou vs torchvision")
    assert_close(boxes.generalized_box_iou(a, b), ops.generalized_box_iou(a, b), what="generalized_box_iou vs torchvision")
    assert_close(boxes.box_area(a), ops.box_area(a), what="box_area vs torchvision")
    assert_close(boxes.box_cxcywh_to_xyxy(a), ops.box_convert(a, in_fmt="cxcywh", out_fmt="xyxy"),
                 what="box_cxcywh_to_xyxy vs torchvision")
