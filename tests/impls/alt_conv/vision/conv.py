"""Alternative correct im2col convolution (canon #16): gather/scatter with precomputed index arrays
instead of a loop over kernel offsets (``np.add.at`` does the overlapping sums of col2im), and
einsum for the forward and backward contractions instead of matmul/tensordot.

Shapes: N batch, C / C_out channels, H_in, W_in input, H_p, W_p padded, kh, kw kernel,
H_out, W_out output, K = C*kh*kw rows, L = H_out*W_out columns. Test: every vision/conv test
must pass.
"""

from __future__ import annotations

import numpy as np


def _positive(name, v, lo):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
        raise ValueError(f"{name}: expected an integer >= {lo}, got {v!r}")


def conv_output_size(size, kernel, stride=1, padding=0):
    """floor((size + 2p - k) / s) + 1."""
    _positive("size", size, 1)
    _positive("kernel", kernel, 1)
    _positive("stride", stride, 1)
    _positive("padding", padding, 0)
    span = size + 2 * padding - kernel
    if span < 0:
        raise ValueError(f"kernel {kernel} does not fit in the padded size {size + 2 * padding}")
    return span // stride + 1


def _indices(C, H_in, W_in, kh, kw, stride, padding):
    """Index arrays (K, L) into the padded image: channel, row, column of every cols entry."""
    H_out = conv_output_size(H_in, kh, stride, padding)
    W_out = conv_output_size(W_in, kw, stride, padding)
    c, i, j = np.meshgrid(np.arange(C), np.arange(kh), np.arange(kw), indexing="ij")  # (C, kh, kw), (C, kh, kw), (C, kh, kw)
    oh, ow = np.meshgrid(np.arange(H_out), np.arange(W_out), indexing="ij")  # (H_out, W_out), (H_out, W_out)
    rows = i.reshape(-1, 1) + stride * oh.reshape(1, -1)             # (C*kh*kw, H_out*W_out)
    cols = j.reshape(-1, 1) + stride * ow.reshape(1, -1)             # (C*kh*kw, H_out*W_out)
    chan = np.broadcast_to(c.reshape(-1, 1), rows.shape)             # (C*kh*kw, H_out*W_out)
    return chan, rows, cols, H_out, W_out


def im2col(x, kh, kw, stride=1, padding=0):
    """(N, C, H_in, W_in) -> (N, C*kh*kw, H_out*W_out) by one fancy-index gather."""
    x = np.asarray(x, dtype=np.float64)                              # (N, C, H_in, W_in)
    if x.ndim != 4:
        raise ValueError(f"x: expected (N, C, H_in, W_in), got {x.shape}")
    _positive("kh", kh, 1)
    _positive("kw", kw, 1)
    N, C, H_in, W_in = x.shape
    chan, r, c, _, _ = _indices(C, H_in, W_in, kh, kw, stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (padding,) * 2, (padding,) * 2))  # (N, C, H_p, W_p)
    return xp[:, chan, r, c]                                         # (N, C*kh*kw, H_out*W_out)


def col2im(cols, x_shape, kh, kw, stride=1, padding=0):
    """Scatter-add columns back: the adjoint of im2col."""
    if len(x_shape) != 4:
        raise ValueError("x_shape: expected 4 entries")
    _positive("kh", kh, 1)
    _positive("kw", kw, 1)
    N, C, H_in, W_in = x_shape
    chan, r, c, H_out, W_out = _indices(C, H_in, W_in, kh, kw, stride, padding)
    cols = np.asarray(cols, dtype=np.float64)                        # (N, C*kh*kw, H_out*W_out)
    if cols.shape != (N, C * kh * kw, H_out * W_out):
        raise ValueError(f"cols: expected {(N, C * kh * kw, H_out * W_out)}, got {cols.shape}")
    xp = np.zeros((N, C, H_in + 2 * padding, W_in + 2 * padding))   # (N, C, H_p, W_p)
    np.add.at(xp, (slice(None), chan, r, c), cols)
    return xp[:, :, padding : padding + H_in, padding : padding + W_in]  # (N, C, H_in, W_in)


def conv2d_forward(x, w, b=None, stride=1, padding=0):
    """Cross-correlation as an einsum over im2col columns."""
    x = np.asarray(x, dtype=np.float64)                              # (N, C, H_in, W_in)
    w = np.asarray(w, dtype=np.float64)                              # (C_out, C, kh, kw)
    if x.ndim != 4:
        raise ValueError(f"x: expected 4-D, got {x.shape}")
    if w.ndim != 4:
        raise ValueError(f"w: expected 4-D, got {w.shape}")
    if w.shape[1] != x.shape[1]:
        raise ValueError(f"w: {w.shape[1]} input channels, x has {x.shape[1]}")
    if b is not None:
        b = np.asarray(b, dtype=np.float64)                          # (C_out,)
        if b.shape != (w.shape[0],):
            raise ValueError(f"b: expected shape ({w.shape[0]},), got {b.shape}")
    N = x.shape[0]
    C_out, _, kh, kw = w.shape
    cols = im2col(x, kh, kw, stride, padding)                        # (N, K, L)
    H_out = conv_output_size(x.shape[2], kh, stride, padding)
    W_out = conv_output_size(x.shape[3], kw, stride, padding)
    y = np.einsum("ok,nkl->nol", w.reshape(C_out, -1), cols)         # (N, C_out, L)
    if b is not None:
        y = y + b[:, None]                                           # (N, C_out, L)
    y = y.reshape(N, C_out, H_out, W_out)                            # (N, C_out, H_out, W_out)
    return y, {"x": x, "w": w, "cols": cols, "s": stride, "p": padding, "b": b is not None}


def conv2d_backward(dy, cache):
    """dx via col2im of w^T dy, dw via einsum with the cached columns."""
    x, w, cols = cache["x"], cache["w"], cache["cols"]
    C_out, C, kh, kw = w.shape
    N = x.shape[0]
    L = cols.shape[2]
    dy = np.asarray(dy, dtype=np.float64)                            # (N, C_out, H_out, W_out)
    if dy.ndim != 4 or dy.shape[:2] != (N, C_out) or dy.shape[2] * dy.shape[3] != L:
        raise ValueError(f"dy: shape {dy.shape} does not match the forward output")
    H_out = conv_output_size(x.shape[2], kh, cache["s"], cache["p"])
    if dy.shape[2] != H_out:
        raise ValueError(f"dy: shape {dy.shape} does not match the forward output")
    g = dy.reshape(N, C_out, L)                                      # (N, C_out, L)
    dw = np.einsum("nol,nkl->ok", g, cols).reshape(w.shape)          # (C_out, C, kh, kw)
    dcols = np.einsum("ok,nol->nkl", w.reshape(C_out, -1), g)        # (N, K, L)
    dx = col2im(dcols, x.shape, kh, kw, cache["s"], cache["p"])      # (N, C, H_in, W_in)
    db = np.einsum("nol->o", g) if cache["b"] else None              # (C_out,)
    return dx, dw, db


def conv2d_flops(x_shape, w_shape, stride=1, padding=0):
    """2 * (multiply-adds) = 2 * N * C_out * L * C * kh * kw."""
    N, C, H_in, W_in = x_shape
    C_out, C_w, kh, kw = w_shape
    if C != C_w:
        raise ValueError("w_shape: channel mismatch with x_shape")
    L = conv_output_size(H_in, kh, stride, padding) * conv_output_size(W_in, kw, stride, padding)
    return 2 * N * C_out * L * C * kh * kw


def receptive_field(layers):
    """Backwards recursion r_{l-1} = s_l * r_l + (k_l - s_l), starting from one output pixel."""
    r = 1
    for k, s in reversed(list(layers)):
        if k < 1 or s < 1:
            raise ValueError("layers: kernel and stride must be >= 1")
        r = s * r + (k - s)
    return r
