"""Reference tests for int8 weight-only quantized matmul (#58, ``quant/qlinear``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from canon_refs.quant import qlinear
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    copy_linear,
    randn,
)

pytestmark = pytest.mark.canon("quant/qlinear")


def _gaussian_linear(in_features: int = 256, out_features: int = 128, seed: int = 0, bias: bool = True) -> nn.Linear:
    layer = nn.Linear(in_features, out_features, bias=bias)
    copy_linear(layer, 0.05 * randn(out_features, in_features, seed=seed),
                0.1 * randn(out_features, seed=seed + 1) if bias else None)
    return layer


# ---- quantize_per_channel / dequantize --------------------------------------------------------


def test_quoted_row() -> None:
    q, scale = call_leaves_inputs_unchanged(qlinear.quantize_per_channel, torch.tensor([[0.5, -1.27, 0.127]]))
    assert q.dtype == torch.int8 and q.shape == (1, 3)
    assert scale.dtype == torch.float32 and scale.shape == (1,)
    assert_close(scale, torch.tensor([0.01]), what="quantize_per_channel(...).scale")
    assert q.tolist() == [[50, -127, 13]]


@pytest.mark.edge_case
def test_all_zero_row_gets_scale_one_and_no_nan() -> None:
    w = torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
    q, scale = qlinear.quantize_per_channel(w)
    assert q[0].tolist() == [0, 0, 0]
    assert scale[0].item() == 1.0
    deq = qlinear.dequantize(q, scale)
    assert torch.isfinite(deq).all() and deq[0].tolist() == [0.0, 0.0, 0.0]
    y = qlinear.int8_weight_only_matmul(torch.ones(4, 3), q, scale)
    assert torch.isfinite(y).all() and (y[:, 0] == 0).all()


def test_dequantization_error_within_half_a_step() -> None:
    w = randn(64, 100, seed=2)
    q, scale = qlinear.quantize_per_channel(w)
    assert q.dtype == torch.int8 and q.shape == (64, 100)
    assert int(q.min()) >= -127 and int(q.max()) <= 127
    assert (q.abs().amax(dim=1) == 127).all(), "each row's largest |w| must map to +-127"
    assert_close(scale, w.abs().amax(dim=1) / 127, what="quantize_per_channel(w).scale")
    deq = qlinear.dequantize(q, scale)
    assert deq.dtype == torch.float32 and deq.shape == (64, 100)
    assert ((w - deq).abs() <= scale[:, None] / 2 + 1e-7).all()  # half a step, plus float32 rounding of q * scale


def test_never_minus_128_and_codes_are_rounded_not_truncated() -> None:
    # the most negative entry of every row maps to -127 (never -128); 0.7 steps round up to 1.
    w = torch.tensor([[-1.27, 0.007, 0.5], [0.3, -0.3, -0.3]])
    q, scale = qlinear.quantize_per_channel(w)
    assert q.tolist() == [[-127, 1, 50], [127, -127, -127]]
    assert int(qlinear.quantize_per_channel(-randn(8, 50, seed=3).abs())[0].min()) == -127


def test_float64_and_bfloat16_weights() -> None:
    w = randn(8, 16, seed=4, dtype=torch.float64)
    q64, s64 = qlinear.quantize_per_channel(w)
    q32, s32 = qlinear.quantize_per_channel(w.float())
    assert q64.dtype == torch.int8 and s64.dtype == torch.float32
    assert (q64.int() - q32.int()).abs().max() <= 1
    assert_close(s64, s32, what="scale from float64 vs float32 weights")
    qb, sb = qlinear.quantize_per_channel(w.bfloat16())
    assert qb.dtype == torch.int8 and sb.dtype == torch.float32


# ---- int8_weight_only_matmul ----------------------------------------------------------------


def test_matmul_then_scale_equals_dequantize_then_matmul() -> None:
    q, scale = qlinear.quantize_per_channel(randn(48, 96, seed=5))
    x = randn(3, 7, 96, seed=6)
    b = randn(48, seed=7)
    got = call_leaves_inputs_unchanged(qlinear.int8_weight_only_matmul, x, q, scale, b)
    assert got.shape == (3, 7, 48) and got.dtype == torch.float32
    want = x @ qlinear.dequantize(q, scale).T + b
    # float32 sums of 96 products, in either order of scaling: a few ulps of the largest output per term
    tol = {"magnitude": float(want.abs().max()), "cond": 96}
    assert_close(got, want, **tol, what="int8_weight_only_matmul(x, q, scale, b)")
    no_bias = qlinear.int8_weight_only_matmul(x, q, scale)
    assert_close(no_bias, got - b, **tol, what="int8_weight_only_matmul(x, q, scale)")


def test_matmul_keeps_float64_and_matches_exact_product() -> None:
    q, scale = qlinear.quantize_per_channel(randn(10, 20, seed=8))
    x = randn(5, 20, seed=9, dtype=torch.float64)
    got = qlinear.int8_weight_only_matmul(x, q, scale)
    assert got.dtype == torch.float64
    want = (x @ q.double().T) * scale.double()
    # the stub: computed in x.dtype with the scale applied after the matmul, so float64 throughout
    assert_close(got, want, magnitude=float(want.abs().max()), cond=20, what="int8_weight_only_matmul(float64 x)")


# ---- QLinear ----------------------------------------------------------------------------------


def test_from_linear_error_bounds() -> None:
    # relative error 0.0069 on seeds 0-4 (uniform rounding error ~ s / sqrt(12), s ~ 3.3 sigma / 127)
    linear = _gaussian_linear()
    before = linear.weight.detach().clone()
    layer = qlinear.QLinear.from_linear(linear)
    x = randn(64, 256, seed=10)
    with torch.no_grad():
        y, y_q = linear(x), layer(x)
    assert y_q.shape == (64, 128) and y_q.dtype == torch.float32
    rel = float((y - y_q).norm() / y.norm())
    assert rel < 1e-2, f"relative output error {rel:.4f}"
    bound = x.abs().sum(dim=1, keepdim=True) * layer.scale[None, :] / 2
    assert ((y - y_q).abs() <= bound * (1 + 1e-5) + 1e-5).all()
    torch.testing.assert_close(layer.bias.detach(), linear.bias.detach(), atol=0, rtol=0)
    assert torch.equal(linear.weight.detach(), before), "from_linear must not modify the float layer"
    q, scale = qlinear.quantize_per_channel(linear.weight.detach())
    assert torch.equal(layer.qweight, q) and torch.equal(layer.scale, scale)


def test_state_dict_holds_int8_a_quarter_of_the_bytes() -> None:
    linear = _gaussian_linear()
    layer = qlinear.QLinear.from_linear(linear)
    sd = layer.state_dict()
    assert {"qweight", "scale", "bias"} <= set(sd)  # other entries are allowed, a float copy of the weight is not
    assert not any(v.is_floating_point() and v.shape == (128, 256) for v in sd.values()), "a float weight is stored"
    assert sd["qweight"].dtype == torch.int8 and sd["qweight"].shape == (128, 256)
    assert sd["scale"].dtype == torch.float32 and sd["scale"].shape == (128,)
    float_bytes = linear.weight.numel() * linear.weight.element_size()
    assert sd["qweight"].numel() * sd["qweight"].element_size() * 4 == float_bytes
    assert [name for name, _ in layer.named_parameters()] == ["bias"], "qweight and scale are buffers"
    assert isinstance(layer.bias, nn.Parameter)
    fresh = qlinear.QLinear(256, 128)
    fresh.load_state_dict(sd)
    x = randn(4, 256, seed=11)
    torch.testing.assert_close(fresh(x), layer(x), atol=0, rtol=0)  # the same state and code: bit for bit


@pytest.mark.edge_case
def test_no_bias_layer_and_batched_input() -> None:
    linear = _gaussian_linear(32, 16, seed=12, bias=False)
    layer = qlinear.QLinear.from_linear(linear)
    assert layer.bias is None
    fresh = qlinear.QLinear(32, 16, bias=False)
    assert fresh.qweight.dtype == torch.int8 and fresh.qweight.shape == (16, 32)
    assert fresh.scale.dtype == torch.float32 and fresh.scale.shape == (16,)
    x = randn(2, 5, 32, seed=13)
    y = layer(x)
    assert y.shape == (2, 5, 16)
    tol = {"magnitude": float(y.abs().max()), "cond": 32}
    assert_close(y.reshape(10, 16), layer(x.reshape(10, 32)), **tol, what="QLinear on (2, 5, 32) vs (10, 32)")
    assert_close(y, qlinear.int8_weight_only_matmul(x, layer.qweight, layer.scale), **tol, what="QLinear(x)")


def test_per_channel_outlier_raises_only_its_own_row() -> None:
    w = 0.05 * randn(128, 256, seed=14)
    w_out = w.clone()
    w_out[5, 17] = 100 * w[5].abs().max()
    err = (w - qlinear.dequantize(*qlinear.quantize_per_channel(w))).abs().mean(dim=1)
    err_out = (w_out - qlinear.dequantize(*qlinear.quantize_per_channel(w_out))).abs().mean(dim=1)
    others = torch.arange(128) != 5
    assert torch.equal(err_out[others], err[others]), "an outlier in row 5 changed other rows' error"
    assert err_out[5] > 10 * err[5]


@pytest.mark.numerics_probe
def test_bfloat16_input_gives_finite_bfloat16_output() -> None:
    layer = qlinear.QLinear.from_linear(_gaussian_linear(seed=15))
    x = randn(16, 256, seed=16)
    with torch.no_grad():
        y32 = layer(x)
        y16 = layer(x.bfloat16())
    assert y16.dtype == torch.bfloat16 and torch.isfinite(y16).all()
    torch.testing.assert_close(y16.float(), y32, atol=5e-2, rtol=2e-2)
    with torch.no_grad():
        assert_low_precision_matches(layer, x)


@pytest.mark.numerics_probe
def test_extreme_rows_stay_finite() -> None:
    # a subnormal row whose absmax / 127 underflows to 0 in float32 is treated like an all-zero row
    w = torch.tensor([[5e-44, 0.0, -2e-44], [3e38, -1e38, 0.0], [1.0, 0.5, -0.25]])
    q, scale = qlinear.quantize_per_channel(w)
    assert torch.isfinite(scale).all() and (scale > 0).all()
    assert q[0].tolist() == [0, 0, 0] and q[1].tolist() == [127, -42, 0]
    deq = qlinear.dequantize(q, scale)
    assert torch.isfinite(deq).all()
    y = qlinear.int8_weight_only_matmul(torch.full((2, 3), 1e-3), q, scale)
    assert torch.isfinite(y).all()


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
def test_bad_weights_raise() -> None:
    for weight in (randn(6), torch.tensor([[1.0, float("nan")]]), torch.tensor([[1.0, float("inf")]])):
        with pytest.raises(ValueError):
            qlinear.quantize_per_channel(weight)


@pytest.mark.contract
def test_bad_codes_scales_and_inputs_raise() -> None:
    q, scale = qlinear.quantize_per_channel(randn(4, 6, seed=17))
    for bad_q, bad_scale in ((q.to(torch.int32), scale), (q, scale[:3]), (q, torch.zeros(4))):
        with pytest.raises(ValueError):
            qlinear.dequantize(bad_q, bad_scale)
    for x, bad_q, bad_scale in ((randn(2, 6), q, -scale), (randn(2, 6), q.float(), scale), (randn(2, 5), q, scale)):
        with pytest.raises(ValueError):
            qlinear.int8_weight_only_matmul(x, bad_q, bad_scale)
    layer = qlinear.QLinear.from_linear(_gaussian_linear(6, 4, seed=18))
    with pytest.raises(ValueError):
        layer(randn(3, 7))
