"""Reference tests for canon #16, convolution via im2col (NumPy; checked against torch float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from canon_refs.vision import conv
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged


def _close(got, want, what: str, terms: int) -> None:
    """A sum of ``terms`` products against a trusted value: a few ulps of the largest output, times the
    number of terms (BLAS and a loop add them in different orders)."""
    assert_close(got, want, magnitude=float(np.abs(want).max()) + 1.0, cond=terms, what=what)

pytestmark = pytest.mark.canon("vision/conv")

STRIDE_PADDING = [(1, 0), (1, 1), (2, 1), (2, 0)]


def _inputs(seed=0, shape=(2, 3, 7, 6), w_shape=(4, 3, 3, 2)):
    g = np.random.default_rng(seed)
    x = g.standard_normal(shape)
    w = g.standard_normal(w_shape)
    b = g.standard_normal(w_shape[0])
    return x, w, b


def _torch_conv(x, w, b, stride, padding, dy=None):
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    y = F.conv2d(xt, wt, bt, stride=stride, padding=padding)
    if dy is None:
        return y.detach().numpy()
    (y * torch.tensor(dy)).sum().backward()
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), None if bt is None else bt.grad.numpy()


@pytest.mark.parametrize("stride, padding", STRIDE_PADDING)
def test_forward_matches_torch(stride, padding):
    x, w, b = _inputs(seed=1)
    want = _torch_conv(x, w, b, stride, padding)
    y, _ = call_leaves_inputs_unchanged(conv.conv2d_forward, x, w, b, stride=stride, padding=padding)
    assert y.shape == want.shape and y.dtype == np.float64
    _close(y, want, "y", terms=48)
    y_nb, _ = conv.conv2d_forward(x, w, None, stride=stride, padding=padding)
    _close(y_nb, _torch_conv(x, w, None, stride, padding), "y_nb", terms=48)


@pytest.mark.parametrize("stride, padding", STRIDE_PADDING)
def test_backward_matches_torch(stride, padding):
    x, w, b = _inputs(seed=2)
    y, cache = conv.conv2d_forward(x, w, b, stride=stride, padding=padding)
    dy = np.random.default_rng(3).standard_normal(y.shape)
    _, dx_t, dw_t, db_t = _torch_conv(x, w, b, stride, padding, dy)
    dx, dw, db = call_leaves_inputs_unchanged(conv.conv2d_backward, dy, cache)
    assert dx.shape == x.shape and dw.shape == w.shape and db.shape == b.shape
    _close(dx, dx_t, "dx", terms=48)
    _close(dw, dw_t, "dw", terms=48)
    _close(db, db_t, "db", terms=48)


def test_backward_without_bias_returns_none():
    x, w, _ = _inputs(seed=4)
    y, cache = conv.conv2d_forward(x, w, stride=1, padding=1)
    dy = np.random.default_rng(5).standard_normal(y.shape)
    dx, dw, db = conv.conv2d_backward(dy, cache)
    assert db is None
    _, dx_t, dw_t, _ = _torch_conv(x, w, None, 1, 1, dy)
    _close(dx, dx_t, "dx", terms=48)
    _close(dw, dw_t, "dw", terms=48)


@pytest.mark.parametrize(
    "kh, kw, stride, padding", [(3, 2, 1, 0), (3, 3, 1, 1), (3, 2, 2, 1), (2, 2, 3, 0), (1, 1, 2, 0)]
)
def test_adjoint_identity(kh, kw, stride, padding):
    g = np.random.default_rng(6)
    x = g.standard_normal((2, 3, 7, 6))
    cols = conv.im2col(x, kh, kw, stride=stride, padding=padding)
    H_out = (7 + 2 * padding - kh) // stride + 1
    W_out = (6 + 2 * padding - kw) // stride + 1
    assert cols.shape == (2, 3 * kh * kw, H_out * W_out)
    c = g.standard_normal(cols.shape)
    back = conv.col2im(c, x.shape, kh, kw, stride=stride, padding=padding)
    assert back.shape == x.shape
    lhs = float(np.sum(cols * c))
    rhs = float(np.sum(x * back))
    # two sums of ~500 products each: a few ulps of the sum of their absolute values
    assert_close(rhs, lhs, magnitude=float(np.sum(np.abs(cols * c))), cond=4, what="<im2col(x), c> vs <x, col2im(c)>")


def test_im2col_layout():
    # Row c*kh*kw + i*kw + j, column oh*W_out + ow holds x[n, c, s*oh + i - p, s*ow + j - p] (0 in the pad).
    x = np.arange(2 * 2 * 4 * 5, dtype=np.float64).reshape(2, 2, 4, 5) + 1.0
    kh, kw, s, p = 2, 3, 2, 1
    cols = conv.im2col(x, kh, kw, stride=s, padding=p)
    H_out, W_out = (4 + 2 - 2) // 2 + 1, (5 + 2 - 3) // 2 + 1
    assert cols.shape == (2, 2 * kh * kw, H_out * W_out)
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    n, c, i, j, oh, ow = np.meshgrid(
        np.arange(2),
        np.arange(2),
        np.arange(kh),
        np.arange(kw),
        np.arange(H_out),
        np.arange(W_out),
        indexing="ij",
    )
    want = np.zeros_like(cols)
    want[n, c * kh * kw + i * kw + j, oh * W_out + ow] = xp[n, c, s * oh + i, s * ow + j]
    np.testing.assert_array_equal(cols, want)
    # The matmul with w.reshape(C_out, -1) is the convolution: same layout as the filters.
    w = np.random.default_rng(7).standard_normal((3, 2, kh, kw))
    y = (w.reshape(3, -1) @ cols).reshape(2, 3, H_out, W_out)
    _close(y, _torch_conv(x, w, None, s, p), "w.reshape(C_out, -1) @ im2col(x)", terms=12)


def test_col2im_sums_overlaps():
    # With a 3x3 kernel, stride 1 and padding 1 on a 4x4 image, col2im(ones) counts the windows
    # covering each pixel: 4 at the corners, 6 on the edges, 9 inside.
    cols = np.ones((1, 9, 16))
    counts = conv.col2im(cols, (1, 1, 4, 4), 3, 3, stride=1, padding=1)
    want = np.array([[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]], dtype=np.float64)
    np.testing.assert_array_equal(counts[0, 0], want)


def test_conv_output_size():
    assert conv.conv_output_size(32, 3, 1, 1) == 32
    assert conv.conv_output_size(7, 3, 2, 0) == 3
    assert conv.conv_output_size(6, 3, 2, 1) == 3
    assert conv.conv_output_size(5, 5) == 1


def test_conv2d_flops():
    assert conv.conv2d_flops((1, 3, 32, 32), (16, 3, 3, 3), 1, 1) == 884736
    x, w, _ = _inputs(seed=8)
    y, _ = conv.conv2d_forward(x, w, stride=2, padding=1)
    N, C_out, H_out, W_out = y.shape
    assert conv.conv2d_flops(x.shape, w.shape, 2, 1) == 2 * N * C_out * H_out * W_out * 3 * 3 * 2


def test_receptive_field():
    assert conv.receptive_field([(3, 1)] * 3) == 7
    assert conv.receptive_field([(7, 2), (3, 2)]) == 11
    assert conv.receptive_field([(3, 2), (3, 2), (3, 2)]) == 15


def test_one_by_one_convolution_is_a_channel_matmul():
    g = np.random.default_rng(9)
    x = g.standard_normal((2, 5, 4, 3))
    w = g.standard_normal((6, 5, 1, 1))
    b = g.standard_normal(6)
    y, _ = conv.conv2d_forward(x, w, b)
    want = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x) + b[None, :, None, None]
    _close(y, want, "1x1 convolution", terms=6)


@pytest.mark.edge_case
def test_batch_of_one():
    x, w, b = _inputs(seed=10, shape=(1, 3, 5, 5))
    y, cache = conv.conv2d_forward(x, w, b, stride=1, padding=1)
    dy = np.random.default_rng(11).standard_normal(y.shape)
    _, dx_t, dw_t, db_t = _torch_conv(x, w, b, 1, 1, dy)
    assert y.shape == (1, 4, 5, 6)
    dx, dw, db = conv.conv2d_backward(dy, cache)
    _close(y, _torch_conv(x, w, b, 1, 1), "y", terms=48)
    _close(dx, dx_t, "dx", terms=48)
    _close(dw, dw_t, "dw", terms=48)


@pytest.mark.edge_case
def test_kernel_covering_the_whole_padded_input():
    x, w, b = _inputs(seed=12, shape=(2, 3, 2, 2), w_shape=(4, 3, 4, 4))
    y, cache = conv.conv2d_forward(x, w, b, padding=1)
    assert y.shape == (2, 4, 1, 1)
    _close(y, _torch_conv(x, w, b, 1, 1), "y", terms=48)
    dx, _, _ = conv.conv2d_backward(np.ones(y.shape), cache)
    assert dx.shape == x.shape


@pytest.mark.numerics_probe
def test_integer_image_is_not_wrapped():
    # A uint8 image times a weight of 2 sums to ~9*255*2 = 4590: far past uint8's 255 unless cast.
    x = np.full((1, 1, 4, 4), 255, dtype=np.uint8)
    w = np.full((1, 1, 3, 3), 2, dtype=np.int64)
    y, cache = conv.conv2d_forward(x, w, padding=1)
    assert y.dtype == np.float64
    want = _torch_conv(x.astype(np.float64), w.astype(np.float64), None, 1, 1)
    np.testing.assert_array_equal(y, want)  # integer sums below 2**53 are exact in float64
    assert y[0, 0, 1, 1] == 9 * 255 * 2
    cols = conv.im2col(x, 3, 3, padding=1)
    assert cols.dtype == np.float64 and cols.max() == 255.0


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
@pytest.mark.parametrize(
    "kwargs",
    [
        {"x": np.ones((3, 7, 6))},
        {"w": np.ones((4, 2, 3, 2))},
        {"w": np.ones((4, 3, 9, 2))},
        {"stride": 0},
        {"padding": -1},
        {"b": np.ones(3)},
        {"b": np.ones((4, 1))},
    ],
    ids=["x-3d", "channels", "kernel", "stride", "padding", "b-short", "b-2d"],
)
def test_forward_errors(kwargs):
    x, w, b = _inputs(seed=13)
    args = {"x": x, "w": w, "b": b, "stride": 1, "padding": 0, **kwargs}
    with pytest.raises(ValueError):
        conv.conv2d_forward(args["x"], args["w"], args["b"], stride=args["stride"], padding=args["padding"])


@pytest.mark.contract
def test_im2col_and_size_errors():
    x = np.ones((1, 2, 4, 4))
    for kwargs in ({"x": np.ones((2, 4, 4))}, {"stride": 0}, {"padding": -1}, {"kh": 5}):
        args = {"x": x, "kh": 3, "kw": 3, "stride": 1, "padding": 0, **kwargs}
        with pytest.raises(ValueError):
            conv.im2col(args["x"], args["kh"], args["kw"], stride=args["stride"], padding=args["padding"])
    for size_args in ((4, 7, 1, 1), (4, 3, 0, 0), (4, 3, 1, -1)):
        with pytest.raises(ValueError):
            conv.conv_output_size(*size_args)


@pytest.mark.contract
def test_backward_rejects_wrong_dy_shape():
    x, w, b = _inputs(seed=14)
    y, cache = conv.conv2d_forward(x, w, b)
    with pytest.raises(ValueError):
        conv.conv2d_backward(np.ones(y.shape[:-1] + (y.shape[-1] + 1,)), cache)
