"""Reference tests for canon #21: sigmoid and softmax focal loss (docs/contract.md #21)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from canon_refs.detection import focal_loss
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    optional_module,
    randn,
)

pytestmark = pytest.mark.canon("detection/focal_loss")


def _t(values, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _binary_targets(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=gen) < 0.3).to(dtype)


# -- sigmoid focal loss: closed forms ----------------------------------------------------------------


def test_logit_zero_target_one_closed_form():
    loss = focal_loss.sigmoid_focal_loss(_t([0.0]), _t([1.0]), alpha=0.25, gamma=2.0)
    assert loss.shape == (1,)
    assert_close(loss, _t([0.25 * 0.25 * math.log(2)]), what="sigmoid_focal_loss(0, 1, alpha=0.25, gamma=2)")
    assert_close(loss, _t([0.04332169878499658]), what="sigmoid_focal_loss(0, 1, alpha=0.25, gamma=2)")


def test_two_logits_closed_form_and_default_arguments():
    loss = focal_loss.sigmoid_focal_loss(_t([2.0, -1.0]), _t([1.0, 0.0]))  # alpha 0.25, gamma 2, "none"
    assert loss.dtype == torch.float64
    assert_close(loss, _t([0.00045089070881009483, 0.016993543131350493]), what="sigmoid_focal_loss([2, -1], [1, 0])")


def test_gamma_zero_without_alpha_is_bce_with_logits():
    logits = randn(4, 7, seed=1, dtype=torch.float64) * 3
    targets = _binary_targets((4, 7), seed=2)
    soft = torch.rand(4, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for t in (targets, soft):
        got = focal_loss.sigmoid_focal_loss(logits, t, alpha=None, gamma=0.0)
        assert_close(got, F.binary_cross_entropy_with_logits(logits, t, reduction="none"),
                     what="sigmoid_focal_loss(alpha=None, gamma=0) vs binary_cross_entropy_with_logits")


def test_ratio_to_bce_is_alpha_t_times_modulating_factor():
    logits = randn(50, seed=4, dtype=torch.float64) * 4
    targets = _binary_targets((50,), seed=5)
    alpha, gamma = 0.25, 2.0
    focal = focal_loss.sigmoid_focal_loss(logits, targets, alpha=alpha, gamma=gamma)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p = torch.sigmoid(logits)
    p_t = torch.where(targets == 1, p, 1 - p)
    one_minus_p_t = torch.where(targets == 1, torch.sigmoid(-logits), p)  # without the cancellation 1 - p_t
    alpha_t = torch.where(targets == 1, alpha, 1 - alpha)
    # an implementation may form 1 - p_t as 1 - sigmoid(z): its relative error is eps / (1 - p_t)
    cond = float((1 / one_minus_p_t).max())
    assert_close(focal / ce, alpha_t * one_minus_p_t**gamma, cond=cond, what="sigmoid_focal_loss / BCE")
    # easy examples (p_t > 0.9) are down-weighted by at least 100x relative to CE
    easy = p_t > 0.9
    assert easy.any() and ((focal / ce)[easy] < 0.01).all()


def test_soft_targets_follow_the_interpolated_formula():
    logits = _t([1.5, -0.5, 0.0, 3.0])
    targets = _t([0.3, 0.9, 0.5, 0.0])
    p = torch.sigmoid(logits)
    ce = -(targets * torch.log(p) + (1 - targets) * torch.log(1 - p))
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = 0.25 * targets + 0.75 * (1 - targets)
    want = alpha_t * (1 - p_t) ** 2 * ce
    assert_close(focal_loss.sigmoid_focal_loss(logits, targets), want, cond=20.0, what="sigmoid_focal_loss(soft targets)")


def test_reductions_and_any_shape():
    logits = randn(2, 3, 5, seed=6, dtype=torch.float64)
    targets = _binary_targets((2, 3, 5), seed=7)
    none = focal_loss.sigmoid_focal_loss(logits, targets, reduction="none")
    assert none.shape == (2, 3, 5)
    mean = focal_loss.sigmoid_focal_loss(logits, targets, reduction="mean")
    total = focal_loss.sigmoid_focal_loss(logits, targets, reduction="sum")
    assert mean.shape == () and total.shape == ()
    assert_close(mean, none.mean(), what="sigmoid_focal_loss(reduction='mean')")
    assert_close(total, none.sum(), what="sigmoid_focal_loss(reduction='sum')")


def test_integer_targets_are_accepted():
    logits = _t([2.0, -1.0])
    got = focal_loss.sigmoid_focal_loss(logits, torch.tensor([1, 0]))
    assert_close(got, _t([0.00045089070881009483, 0.016993543131350493]), what="sigmoid_focal_loss(integer targets)")


def test_sigmoid_gradcheck():
    logits = (randn(6, seed=8, dtype=torch.float64) * 2).requires_grad_(True)
    targets = _t([1.0, 0.0, 0.0, 1.0, 0.4, 0.0])
    assert torch.autograd.gradcheck(
        lambda z: focal_loss.sigmoid_focal_loss(z, targets, reduction="sum"), (logits,)
    )


def test_matches_torchvision_when_installed():
    ops = optional_module("torchvision.ops")
    logits = randn(8, 5, seed=9) * 3
    targets = _binary_targets((8, 5), seed=10, dtype=torch.float32)
    for reduction in ("none", "mean", "sum"):
        assert_close(focal_loss.sigmoid_focal_loss(logits, targets, reduction=reduction),
                     ops.sigmoid_focal_loss(logits, targets, reduction=reduction), cond=10.0,
                     what=f"sigmoid_focal_loss(reduction={reduction!r}) vs torchvision")


# -- softmax focal loss ------------------------------------------------------------------------------


def test_softmax_uniform_two_classes_closed_form():
    loss = focal_loss.softmax_focal_loss(_t([[0.0, 0.0]]), torch.tensor([0]), gamma=2.0, reduction="none")
    assert loss.shape == (1,)
    assert_close(loss, _t([0.25 * math.log(2)]), what="softmax_focal_loss([[0, 0]], [0], gamma=2)")


def test_softmax_gamma_zero_is_cross_entropy():
    logits = randn(10, 4, seed=11, dtype=torch.float64) * 2
    targets = torch.randint(0, 4, (10,), generator=torch.Generator().manual_seed(12))
    for reduction in ("none", "mean", "sum"):
        got = focal_loss.softmax_focal_loss(logits, targets, gamma=0.0, reduction=reduction)
        assert_close(got, F.cross_entropy(logits, targets, reduction=reduction),
                     what=f"softmax_focal_loss(gamma=0, reduction={reduction!r}) vs cross_entropy")
    assert focal_loss.softmax_focal_loss(logits, targets).shape == ()  # default reduction "mean"


def test_softmax_ratio_to_ce_and_alpha_weights():
    logits = randn(12, 3, seed=13, dtype=torch.float64) * 3
    targets = torch.randint(0, 3, (12,), generator=torch.Generator().manual_seed(14))
    ce = F.cross_entropy(logits, targets, reduction="none")
    one_minus_p_t = -torch.expm1(-ce)  # 1 - p_t without cancellation
    focal = focal_loss.softmax_focal_loss(logits, targets, gamma=2.0, reduction="none")
    cond = float((1 / one_minus_p_t).max())  # 1 - softmax(...)[t] may cancel: relative error eps / (1 - p_t)
    assert_close(focal / ce, one_minus_p_t**2, cond=cond, what="softmax_focal_loss / cross_entropy")
    alpha = _t([0.2, 0.5, 0.9])
    weighted = focal_loss.softmax_focal_loss(logits, targets, gamma=2.0, alpha=alpha, reduction="none")
    want = alpha[targets] * one_minus_p_t**2 * ce
    assert_close(weighted, want, cond=cond, what="softmax_focal_loss(alpha)")
    mean = focal_loss.softmax_focal_loss(logits, targets, gamma=2.0, alpha=alpha, reduction="mean")
    assert_close(mean, want.mean(), cond=cond, what="softmax_focal_loss(alpha, reduction='mean')")
    weighted_mean = want.sum() / alpha[targets].sum()
    assert abs(mean.item() - weighted_mean.item()) > 1e-6, "mean must be the plain mean over N"


def test_softmax_gradcheck():
    logits = (randn(5, 4, seed=15, dtype=torch.float64) * 2).requires_grad_(True)
    targets = torch.tensor([0, 3, 1, 1, 2])
    alpha = _t([0.1, 0.4, 0.6, 1.0])
    assert torch.autograd.gradcheck(
        lambda z: focal_loss.softmax_focal_loss(z, targets, alpha=alpha), (logits,)
    )


# -- edge cases and numerics -------------------------------------------------------------------------


@pytest.mark.edge_case
def test_empty_inputs():
    empty = torch.zeros(0, dtype=torch.float64)
    assert focal_loss.sigmoid_focal_loss(empty, empty).shape == (0,)
    assert focal_loss.sigmoid_focal_loss(empty, empty, reduction="sum").item() == 0.0
    none = focal_loss.softmax_focal_loss(
        torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), reduction="none"
    )
    assert none.shape == (0,)


@pytest.mark.edge_case
def test_single_sample_and_alpha_extremes():
    z, t = _t([0.7]), _t([1.0])
    assert focal_loss.sigmoid_focal_loss(z, t, alpha=0.0).item() == 0.0  # positives get weight alpha
    assert focal_loss.sigmoid_focal_loss(z, _t([0.0]), alpha=1.0).item() == 0.0  # negatives get 1 - alpha
    assert focal_loss.sigmoid_focal_loss(z, t, alpha=1.0).item() > 0


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sigmoid_extreme_logits_finite_losses_and_gradients(dtype):
    logits = torch.tensor([1e4, -1e4, 1e4, -1e4], dtype=dtype, requires_grad=True)
    targets = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=dtype)
    loss = focal_loss.sigmoid_focal_loss(logits, targets)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logits.grad).all()
    # confident and right -> 0; confident and wrong -> alpha_t * 1e4 (CE is |z|, the factor is 1)
    assert_close(loss.detach(), torch.tensor([0.0, 2500.0, 7500.0, 0.0], dtype=dtype),
                 magnitude=1e4, what="sigmoid_focal_loss(+-1e4)")
    assert_close(logits.grad, torch.tensor([0.0, -0.25, 0.75, 0.0], dtype=dtype), what="grad of sigmoid_focal_loss(+-1e4)")


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_extreme_logits_finite_losses_and_gradients(dtype):
    logits = torch.tensor([[1e4, -1e4, 0.0], [1e4, -1e4, 0.0]], dtype=dtype, requires_grad=True)
    targets = torch.tensor([0, 1])
    loss = focal_loss.softmax_focal_loss(logits, targets, reduction="none")
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logits.grad).all()
    assert_close(loss.detach(), torch.tensor([0.0, 2e4], dtype=dtype), magnitude=2e4, what="softmax_focal_loss(+-1e4)")


@pytest.mark.numerics_probe
def test_half_precision_probe():
    logits = randn(6, 4, seed=16) * 4
    targets = _binary_targets((6, 4), seed=17, dtype=torch.float32)
    assert_low_precision_matches(lambda z, t: focal_loss.sigmoid_focal_loss(z, t), logits, targets)
    classes = torch.tensor([0, 3, 2, 1, 1, 0])
    assert_low_precision_matches(
        lambda z: focal_loss.softmax_focal_loss(z, classes, reduction="none"), logits
    )


def test_inputs_are_not_modified():
    logits = randn(4, 3, seed=18, dtype=torch.float64)
    call_leaves_inputs_unchanged(focal_loss.sigmoid_focal_loss, logits.clone(), _binary_targets((4, 3), seed=19))
    alpha = _t([0.2, 0.5, 0.9])
    call_leaves_inputs_unchanged(focal_loss.softmax_focal_loss, logits.clone(), torch.tensor([0, 2, 1, 1]),
                                 alpha=alpha.clone())


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_sigmoid_errors():
    z = _t([0.0, 1.0])
    with pytest.raises(ValueError):
        focal_loss.sigmoid_focal_loss(z, _t([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError):
        focal_loss.sigmoid_focal_loss(z, _t([1.5, 0.0]))
    with pytest.raises(ValueError):
        focal_loss.sigmoid_focal_loss(z, _t([-0.1, 0.0]))
    with pytest.raises(ValueError):
        focal_loss.sigmoid_focal_loss(z, _t([1.0, 0.0]), gamma=-1.0)
    with pytest.raises(ValueError):
        focal_loss.sigmoid_focal_loss(z, _t([1.0, 0.0]), alpha=1.5)
    with pytest.raises(ValueError):
        focal_loss.sigmoid_focal_loss(z, _t([1.0, 0.0]), reduction="avg")


@pytest.mark.contract
def test_softmax_errors():
    z = _t([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, 3]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, -1]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, _t([0.0, 1.0]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(_t([0.0, 1.0]), torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, 1]), gamma=-0.5)
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, 1]), alpha=_t([0.5, 1.5, 0.5]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, 1]), alpha=_t([0.5, 0.5]))
    with pytest.raises(ValueError):
        focal_loss.softmax_focal_loss(z, torch.tensor([0, 1]), reduction="batchmean")
