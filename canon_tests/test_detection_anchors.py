"""Reference tests for canon #20: anchor generation, matching and the box coder (docs/contract.md #20)."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from canon_refs.detection import anchors, boxes
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    optional_module,
    random_xyxy,
)

pytestmark = pytest.mark.canon("detection/anchors")

SIZES = (32.0, 64.0)
RATIOS = (0.5, 1.0, 2.0)


def _t(rows, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


_random_xyxy = functools.partial(random_xyxy, min_side=2.0, max_side=62.0)  # larger boxes than the IoU tests


# -- generate_anchors --------------------------------------------------------------------------------


def test_anchor_count_and_dtype():
    out = anchors.generate_anchors((3, 5), stride=16, sizes=SIZES, aspect_ratios=RATIOS)
    assert out.shape == (3 * 5 * 6, 4)
    assert out.dtype == torch.float32
    assert anchors.generate_anchors((4, 4), stride=8).shape == (4 * 4 * 3, 4)  # defaults: 1 size x 3 ratios


def test_first_anchor_is_centred_at_half_stride():
    out = anchors.generate_anchors((3, 5), stride=16, sizes=SIZES, aspect_ratios=RATIOS)
    centre = (out[:, :2] + out[:, 2:]) / 2
    # float32 anchors: the centre (x1 + x2) / 2 of a box up to 64 wide rounds at the spacing of 64
    assert_close(centre[:6], torch.full((6, 2), 8.0), magnitude=64.0, what="generate_anchors centres of cell (0, 0)")


def test_order_is_cells_row_major_then_sizes_then_ratios():
    H_f, W_f, stride = 3, 5, 16
    out = anchors.generate_anchors((H_f, W_f), stride=stride, sizes=SIZES, aspect_ratios=RATIOS)
    grid = out.reshape(H_f, W_f, len(SIZES), len(RATIOS), 4).double()
    y, x, si, ri = 1, 2, 1, 0
    s, r = SIZES[si], RATIOS[ri]
    w, h = s / math.sqrt(r), s * math.sqrt(r)
    cx, cy = (x + 0.5) * stride, (y + 0.5) * stride
    want = torch.tensor([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dtype=torch.float64)
    assert_close(grid[y, x, si, ri], want, dtype=torch.float32, what=f"generate_anchors cell (y={y}, x={x}) size {s} ratio {r}")
    centres = (grid[..., :2] + grid[..., 2:]) / 2  # (H_f, W_f, S, R, 2)
    xs = (torch.arange(W_f, dtype=torch.float64) + 0.5) * stride
    ys = (torch.arange(H_f, dtype=torch.float64) + 0.5) * stride
    magnitude = float(grid.abs().max())  # the centres are averages of float32 corners of this size
    assert_close(centres[..., 0], xs[None, :, None, None].expand(H_f, W_f, 2, 3), dtype=torch.float32,
                 magnitude=magnitude, what="generate_anchors x centres (cells row-major, then sizes, then ratios)")
    assert_close(centres[..., 1], ys[:, None, None, None].expand(H_f, W_f, 2, 3), dtype=torch.float32,
                 magnitude=magnitude, what="generate_anchors y centres (cells row-major, then sizes, then ratios)")


def test_areas_are_size_squared_and_shape_is_ratio():
    out = anchors.generate_anchors((2, 2), stride=32, sizes=SIZES, aspect_ratios=RATIOS).double()
    w = (out[:, 2] - out[:, 0]).reshape(4, len(SIZES), len(RATIOS))
    h = (out[:, 3] - out[:, 1]).reshape(4, len(SIZES), len(RATIOS))
    sizes = torch.tensor(SIZES, dtype=torch.float64)[None, :, None]
    ratios = torch.tensor(RATIOS, dtype=torch.float64)[None, None, :]
    # sides are differences of float32 corners up to ~110: relative to the side, cond = 110 / 22
    cond = float(out.abs().max()) / float((out[:, 2] - out[:, 0]).min())
    assert_close(w * h, (sizes**2).expand_as(w), dtype=torch.float32, cond=cond, what="generate_anchors areas (s**2)")
    assert_close(h / w, ratios.expand_as(w), dtype=torch.float32, cond=cond, what="generate_anchors h / w (ratio)")


def test_every_cell_holds_the_same_base_anchors_translated():
    stride = 8
    out = anchors.generate_anchors(
        (4, 3), stride=stride, sizes=(16.0, 40.0), aspect_ratios=(0.25, 1.0)
    ).double()
    cells = out.reshape(12, 4, 4)
    centres = (cells[..., :2] + cells[..., 2:]) / 2
    base = cells - centres.repeat(1, 1, 2)
    assert_close(base, base[:1].expand_as(base), dtype=torch.float32, magnitude=float(out.abs().max()),
                 what="generate_anchors base boxes of each cell")


@pytest.mark.edge_case
def test_one_by_one_map_and_empty_map():
    one = anchors.generate_anchors((1, 1), stride=10, sizes=(20.0,), aspect_ratios=(1.0,))
    assert_close(one, torch.tensor([[-5.0, -5.0, 15.0, 15.0]]), what="generate_anchors((1, 1), stride=10, (20,), (1,))")
    assert anchors.generate_anchors((0, 4), stride=10).shape == (0, 4)


# -- encode / decode ---------------------------------------------------------------------------------


def test_encode_closed_form_with_and_without_weights():
    a, g = _t([[0, 0, 10, 10]]), _t([[1, 2, 11, 22]])
    assert_close(anchors.encode_boxes(a, g), _t([[0.1, 0.7, 0.0, math.log(2)]]), what="encode_boxes")
    assert_close(anchors.encode_boxes(a, g, weights=(10.0, 10.0, 5.0, 5.0)), _t([[1.0, 7.0, 0.0, 5 * math.log(2)]]),
                 what="encode_boxes(weights=(10, 10, 5, 5))")


def test_decode_inverts_encode():
    a = _random_xyxy(50, seed=1, dtype=torch.float32)
    g = _random_xyxy(50, seed=2, dtype=torch.float32)
    for weights in ((1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)):
        deltas = anchors.encode_boxes(a, g, weights=weights)
        assert deltas.shape == (50, 4)
        # corners up to ~160 go through a log and an exp of ratios up to ~30: cond ~ a few
        assert_close(anchors.decode_boxes(a, deltas, weights=weights), g, cond=4.0,
                     what=f"decode_boxes(a, encode_boxes(a, g, {weights}))")
    g64, a64 = g.double(), a.double()
    assert_close(anchors.decode_boxes(a64, anchors.encode_boxes(a64, g64)), g64, cond=4.0,
                 what="decode_boxes(a, encode_boxes(a, g)) in float64")


def test_zero_deltas_decode_to_the_anchors():
    a = _random_xyxy(7, seed=3)
    assert_close(anchors.decode_boxes(a, torch.zeros(7, 4, dtype=torch.float64)), a, what="decode_boxes(a, zeros)")


@pytest.mark.numerics_probe
def test_huge_size_delta_decodes_to_a_finite_clamped_box():
    a = _t([[0, 0, 10, 20]])
    out = anchors.decode_boxes(a, _t([[0, 0, 1e4, 1e4]]))
    assert torch.isfinite(out).all()
    scale = 1000.0 / 16  # the clamp exp(log(1000/16))
    assert_close(out, _t([[5 - 5 * scale, 10 - 10 * scale, 5 + 5 * scale, 10 + 10 * scale]]),
                 what="decode_boxes(dw = dh = 1e4), clamped at log(1000/16)")
    out32 = anchors.decode_boxes(a.float(), torch.tensor([[1e4, -1e4, 1e4, -1e4]]))
    assert torch.isfinite(out32).all()
    assert out32[0, 3] - out32[0, 1] == 0  # exp(-1e4) underflows to a zero height, still finite


@pytest.mark.numerics_probe
def test_decode_half_precision_matches_float32():
    a = _random_xyxy(16, seed=4, dtype=torch.float32)
    deltas = torch.randn(16, 4, generator=torch.Generator().manual_seed(5)) * 0.5
    assert_low_precision_matches(anchors.decode_boxes, a, deltas)


# -- match_anchors -----------------------------------------------------------------------------------


def test_thresholds_give_index_background_ignore_exactly():
    # Anchors [0, 0, 10, w] inside the gt [0, 0, 10, 10] have IoU w / 10 (exact in float64).
    gt = _t([[0, 0, 10, 10]])
    widths = [10.0, 5.0, 4.5, 4.0, 3.0]
    a = torch.cat([_t([[0, 0, 10, w] for w in widths]), _t([[50, 50, 60, 60]])])
    for low_quality in (True, False):
        labels = anchors.match_anchors(a, gt, pos_iou=0.5, neg_iou=0.4, allow_low_quality=low_quality)
        assert labels.dtype == torch.long
        # IoU 1.0 -> 0; 0.5 == pos_iou -> positive; 0.45 -> ignore; 0.4 == neg_iou -> ignore; 0.3, 0 -> bg
        assert labels.tolist() == [0, 0, -2, -2, -1, -1]


def test_each_positive_anchor_takes_its_best_gt():
    gts = _t([[0, 0, 10, 10], [30, 0, 40, 10]])
    a = _t([[0, 0, 10, 9], [31, 0, 40, 10], [29, 0, 40, 10], [100, 100, 110, 110]])
    assert anchors.match_anchors(a, gts).tolist() == [0, 1, 1, -1]


def test_low_quality_rule_promotes_best_anchors_including_ties():
    # The gt's best IoU is 0.3, reached by two anchors (a tie); another anchor has IoU 0.2.
    gt = _t([[0, 0, 10, 10]])
    a = _t([[0, 0, 10, 3], [0, 7, 10, 10], [0, 0, 10, 2], [50, 50, 60, 60]])
    assert anchors.match_anchors(a, gt, allow_low_quality=True).tolist() == [0, 0, -1, -1]
    assert anchors.match_anchors(a, gt, allow_low_quality=False).tolist() == [-1, -1, -1, -1]


def test_low_quality_anchor_is_assigned_to_its_own_best_gt():
    # gt 1 promotes anchor 0 (its best, IoU 15/115), but anchor 0 overlaps gt 0 more (IoU 0.4): label 0.
    gts = _t([[0, 0, 10, 4], [5, 5, 15, 8]])
    a = _t([[0, 0, 10, 10], [20, 0, 30, 10]])
    assert anchors.match_anchors(a, gts, allow_low_quality=True).tolist() == [0, -1]
    # without the rule anchor 0 sits exactly at neg_iou = 0.4: ignore
    assert anchors.match_anchors(a, gts, allow_low_quality=False).tolist() == [-2, -1]


def test_gt_with_zero_best_iou_promotes_nothing():
    gts = _t([[500, 500, 510, 510]])
    a = _t([[0, 0, 10, 10], [20, 0, 30, 10]])
    assert anchors.match_anchors(a, gts, allow_low_quality=True).tolist() == [-1, -1]


@pytest.mark.edge_case
def test_no_gt_boxes_labels_everything_background():
    a = anchors.generate_anchors((2, 3), stride=16)
    labels = anchors.match_anchors(a, torch.zeros(0, 4))
    assert labels.shape == (18,) and labels.dtype == torch.long
    assert (labels == -1).all()


@pytest.mark.edge_case
def test_no_anchors_gives_empty_labels():
    labels = anchors.match_anchors(torch.zeros(0, 4), _t([[0, 0, 1, 1]]))
    assert labels.shape == (0,) and labels.dtype == torch.long


def test_equal_thresholds_have_no_ignore_band():
    gt = _t([[0, 0, 10, 10]])
    a = _t([[0, 0, 10, 5], [0, 0, 10, 4.9], [0, 0, 10, 10]])
    labels = anchors.match_anchors(a, gt, pos_iou=0.5, neg_iou=0.5, allow_low_quality=False)
    assert labels.tolist() == [0, -1, 0]


def test_matching_on_generated_anchors_is_consistent():
    a = anchors.generate_anchors((8, 8), stride=16, sizes=(24.0, 48.0), aspect_ratios=RATIOS)
    gts = _random_xyxy(5, seed=6, dtype=torch.float32) * 1.2
    labels = anchors.match_anchors(a, gts)
    assert labels.shape == (a.shape[0],)
    assert set(labels.unique().tolist()) <= {-2, -1, 0, 1, 2, 3, 4}
    iou = boxes.box_iou(a, gts)
    best_anchor = iou.argmax(dim=0)
    assert (labels[best_anchor] >= 0).all(), "the low-quality rule makes every gt's best anchor positive"
    positive = labels >= 0
    assert torch.equal(labels[positive], iou[positive].argmax(dim=1))  # each takes its own best gt
    assert (iou.max(dim=1).values[labels == -1] < 0.4).all()


def test_inputs_are_not_modified():
    a = _random_xyxy(6, seed=11)
    g = _random_xyxy(6, seed=12)
    call_leaves_inputs_unchanged(anchors.match_anchors, a.clone(), g[:3].clone())
    deltas = call_leaves_inputs_unchanged(anchors.encode_boxes, a.clone(), g.clone())
    call_leaves_inputs_unchanged(anchors.decode_boxes, a.clone(), deltas.clone())


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_generate_anchors_errors():
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, 2), stride=0)
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, 2), stride=-8)
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, 2), stride=8, sizes=())
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, 2), stride=8, sizes=(32.0, -1.0))
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, 2), stride=8, aspect_ratios=())
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, 2), stride=8, aspect_ratios=(0.0, 1.0))
    with pytest.raises(ValueError):
        anchors.generate_anchors((2, -1), stride=8)


@pytest.mark.contract
def test_match_anchors_errors():
    a, g = _t([[0, 0, 1, 1]]), _t([[0, 0, 1, 1]])
    with pytest.raises(ValueError):
        anchors.match_anchors(a, g, pos_iou=0.3, neg_iou=0.4)
    with pytest.raises(ValueError):
        anchors.match_anchors(a, g, pos_iou=1.5, neg_iou=0.4)
    with pytest.raises(ValueError):
        anchors.match_anchors(a, g, pos_iou=0.5, neg_iou=-0.1)
    with pytest.raises(ValueError):
        anchors.match_anchors(torch.zeros(3, 5), g)
    with pytest.raises(ValueError):
        anchors.match_anchors(a, torch.zeros(4))


@pytest.mark.contract
def test_coder_shape_mismatch_errors():
    a = _random_xyxy(3, seed=7)
    with pytest.raises(ValueError):
        anchors.encode_boxes(a, _random_xyxy(4, seed=8))
    with pytest.raises(ValueError):
        anchors.encode_boxes(torch.zeros(3, 3), a)
    with pytest.raises(ValueError):
        anchors.decode_boxes(a, torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError):
        anchors.decode_boxes(a, torch.zeros(3, 5, dtype=torch.float64))


# -- optional comparison -----------------------------------------------------------------------------


def test_matches_torchvision_matcher_and_coder_when_installed():
    det_utils = optional_module("torchvision.models.detection._utils")
    a = anchors.generate_anchors((6, 6), stride=16, sizes=(24.0, 48.0), aspect_ratios=RATIOS)
    gts = _random_xyxy(4, seed=9, dtype=torch.float32)
    matcher = det_utils.Matcher(0.5, 0.4, allow_low_quality_matches=True)
    assert torch.equal(anchors.match_anchors(a, gts), matcher(boxes.box_iou(gts, a)))
    g = _random_xyxy(a.shape[0], seed=10, dtype=torch.float32)
    coder = det_utils.BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    deltas = anchors.encode_boxes(a, g, weights=(10.0, 10.0, 5.0, 5.0))
    assert_close(deltas, coder.encode_single(g, a), cond=4.0, what="encode_boxes vs torchvision BoxCoder")
    assert_close(anchors.decode_boxes(a, deltas, weights=(10.0, 10.0, 5.0, 5.0)), coder.decode_single(deltas, a),
                 cond=4.0, what="decode_boxes vs torchvision BoxCoder")
