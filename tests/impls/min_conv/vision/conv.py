"""Canon #16: 2-D convolution through im2col, forward and backward, in NumPy.

Plan: im2col copies every kh x kw window into a column with one strided slice per kernel offset
(kh*kw slices instead of a Python loop over output pixels, because that is far faster), so the
convolution is one matmul (C_out, C*kh*kw) @ (C*kh*kw, H_out*W_out) per image. Backward: dw from
dy @ cols^T, dcols = w^T @ dy, and col2im (the adjoint, summing overlaps) gives dx. Tests: match
torch conv2d with stride/padding, finite-difference gradients, <im2col(x), c> == <x, col2im(c)>.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length along one axis: ``(size + 2*padding - kernel) // stride + 1``."""
    return (size + 2 * padding - kernel) // stride + 1


def im2col(x: np.ndarray, kh: int, kw: int, stride: int = 1, padding: int = 0) -> np.ndarray:
    """Unfold every ``kh x kw`` window into a column: ``(N, C*kh*kw, H_out*W_out)``."""
    x = np.asarray(x, dtype=np.float64)
    N, C, H, W = x.shape
    Ho = conv_output_size(H, kh, stride, padding)
    Wo = conv_output_size(W, kw, stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.empty((N, C, kh, kw, Ho, Wo))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i : i + stride * Ho : stride, j : j + stride * Wo : stride]
    return cols.reshape(N, C * kh * kw, Ho * Wo)


def col2im(
    cols: np.ndarray, x_shape: tuple[int, int, int, int], kh: int, kw: int, stride: int = 1, padding: int = 0
) -> np.ndarray:
    """Adjoint of :func:`im2col`: scatter-add columns back into ``(N, C, H_in, W_in)``."""
    N, C, H, W = x_shape
    Ho = conv_output_size(H, kh, stride, padding)
    Wo = conv_output_size(W, kw, stride, padding)
    c6 = np.asarray(cols, dtype=np.float64).reshape(N, C, kh, kw, Ho, Wo)
    xp = np.zeros((N, C, H + 2 * padding, W + 2 * padding))
    for i in range(kh):
        for j in range(kw):
            xp[:, :, i : i + stride * Ho : stride, j : j + stride * Wo : stride] += c6[:, :, i, j]
    return xp[:, :, padding : padding + H, padding : padding + W]


def conv2d_forward(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: int = 1, padding: int = 0
) -> tuple[np.ndarray, dict]:
    """Cross-correlation by im2col + one matmul; returns ``(y (N, C_out, H_out, W_out), cache)``."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    N, C, H, W = x.shape
    Co, _, kh, kw = w.shape
    Ho = conv_output_size(H, kh, stride, padding)
    Wo = conv_output_size(W, kw, stride, padding)
    cols = im2col(x, kh, kw, stride, padding)  # (N, C*kh*kw, Ho*Wo)
    w_mat = w.reshape(Co, -1)  # (Co, C*kh*kw)
    y = w_mat @ cols  # (N, Co, Ho*Wo)
    if b is not None:
        y = y + np.asarray(b, dtype=np.float64)[None, :, None]
    cache = {"cols": cols, "w": w, "x_shape": x.shape, "stride": stride, "padding": padding,
             "has_bias": b is not None}
    return y.reshape(N, Co, Ho, Wo), cache


def conv2d_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dx, dw, db)`` of :func:`conv2d_forward`; ``db`` is None without a bias."""
    cols, w = cache["cols"], cache["w"]
    Co, C, kh, kw = w.shape
    dy = np.asarray(dy, dtype=np.float64)
    N = dy.shape[0]
    dy_mat = dy.reshape(N, Co, -1)  # (N, Co, Ho*Wo)
    dw = np.einsum("nol,nkl->ok", dy_mat, cols).reshape(w.shape)  # (Co, C, kh, kw)
    dcols = w.reshape(Co, -1).T @ dy_mat  # (N, C*kh*kw, Ho*Wo)
    dx = col2im(dcols, cache["x_shape"], kh, kw, cache["stride"], cache["padding"])
    db = dy.sum(axis=(0, 2, 3)) if cache["has_bias"] else None
    return dx, dw, db


def conv2d_flops(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int = 1, padding: int = 0) -> int:
    """``2 * N * C_out * H_out * W_out * C * kh * kw`` (one multiply and one add per term)."""
    N, C, H, W = x_shape
    Co, _, kh, kw = w_shape
    Ho = conv_output_size(H, kh, stride, padding)
    Wo = conv_output_size(W, kw, stride, padding)
    return 2 * N * Co * Ho * Wo * C * kh * kw


def receptive_field(layers: Sequence[tuple[int, int]]) -> int:
    """``1 + sum_l (k_l - 1) * prod_{j<l} s_j`` for a stack of ``(kernel, stride)`` layers."""
    rf, jump = 1, 1
    for k, s in layers:
        rf += (k - 1) * jump
        jump *= s
    return rf
