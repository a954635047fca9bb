"""Canon #16: 2-D convolution through im2col, forward and backward, in NumPy.

``im2col`` copies every ``kh x kw`` window of the (zero-padded) input into one column, so a
convolution becomes a single matrix product: ``y = w.reshape(C_out, C*kh*kw) @ cols``. The backward
pass is the same bookkeeping run in reverse: ``dw = dy @ cols^T`` summed over the batch, and
``dx = col2im(w^T @ dy)``, where ``col2im`` is the adjoint of ``im2col``: it scatters every column
back to its window and *adds* where windows overlap.

The subtle points: (1) torch's "convolution" is a cross-correlation (no kernel flip), and the row
order of ``cols`` must be ``(c, i, j)``, the order of ``w.reshape(C_out, -1)``, with columns
row-major over output positions; (2) ``col2im`` must accumulate, because with stride 1 and a 3x3
kernel an interior pixel sits in 9 windows and receives 9 gradient contributions; (3) the output
size is ``(size + 2*padding - kernel) // stride + 1``, floor division, so a stride-2 window that
would hang over the edge is dropped (``conv_output_size(7, 3, 2, 0) = 3``).

Shapes: ``N`` batch, ``C`` input channels, ``C_out`` output channels (filters), ``H_in, W_in``
input size, ``H_p, W_p`` padded size (``H_in + 2*padding``), ``kh, kw`` kernel size,
``H_out, W_out`` output size, ``L = H_out * W_out`` output positions per image.

Trade-off: im2col spends memory to buy one large matmul instead of ``N * L`` small dot products:
``cols`` holds ``C*kh*kw * L`` floats per image, ``kh*kw`` times the input (9x for a 3x3 stride-1
kernel), because a BLAS matmul runs orders of magnitude faster than a Python loop over positions.
The copy loops over the ``kh*kw`` kernel offsets (9 iterations for 3x3), each one a strided slice
of the whole batch, rather than over the ``N * L`` output positions (65 536 for 64 images of 32x32).

What to test: forward and backward against ``torch.nn.functional.conv2d`` and autograd for several
(stride, padding) pairs and a non-square kernel; the adjoint identity
``<im2col(x), c> = <x, col2im(c)>``; the column layout on a hand-checkable input; the size, FLOP and
receptive-field formulas; a 1x1 convolution as a per-pixel matmul; integer images (no uint8
wraparound); and every ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length along one axis: ``(size + 2*padding - kernel) // stride + 1``.

    Raises:
        ValueError: ``size < 1``, ``kernel < 1``, ``stride < 1``, ``padding < 0``, or a kernel larger
        than the padded input (the result would be < 1).

    Source: Dumoulin & Visin (2016), "A guide to convolution arithmetic", relationship 6.
    """
    _check_geometry(size, kernel, stride, padding)
    return (size + 2 * padding - kernel) // stride + 1


def im2col(x: np.ndarray, kh: int, kw: int, stride: int = 1, padding: int = 0) -> np.ndarray:
    """Unfold every ``kh x kw`` window of ``x`` into a column.

    Args:
        x: ``(N, C, H_in, W_in)`` array (converted to float64).
        kh, kw: kernel height and width.
        stride, padding: as in ``torch.nn.functional.conv2d`` (zero padding on all four sides).

    Returns:
        ``(N, C*kh*kw, H_out*W_out)`` float64. Row ``c*kh*kw + i*kw + j`` holds input channel ``c`` at
        kernel offset ``(i, j)``, the order of ``w.reshape(C_out, -1)``; column ``oh*W_out + ow``
        is output position ``(oh, ow)``.

    Raises:
        ValueError: ``x`` not 4-D, ``kh``/``kw``/``stride`` < 1, ``padding`` < 0, or a kernel larger
        than the padded input.

    Source: Chellapilla, Puri & Simard (2006), "High performance convolutional neural networks
    for document processing" (the unfolding trick).
    """
    x = _check_x(x)
    _check_int("kh", kh, 1)
    _check_int("kw", kw, 1)
    N, C, H_in, W_in = x.shape
    H_out = conv_output_size(H_in, kh, stride, padding)
    W_out = conv_output_size(W_in, kw, stride, padding)
    pads = ((0, 0), (0, 0), (padding, padding), (padding, padding))
    xp = np.pad(x, pads)                                                 # (N, C, H_p, W_p)
    cols = np.empty((N, C, kh, kw, H_out, W_out))                        # (N, C, kh, kw, H_out, W_out)
    for offset in range(kh * kw):  # kernel offsets only; each slice covers the whole batch
        i, j = divmod(offset, kw)
        cols[:, :, i, j] = xp[:, :, i : i + stride * H_out : stride, j : j + stride * W_out : stride]
    return cols.reshape(N, C * kh * kw, H_out * W_out)                   # (N, C*kh*kw, H_out*W_out)


def col2im(
    cols: np.ndarray, x_shape: tuple[int, int, int, int], kh: int, kw: int, stride: int = 1, padding: int = 0
) -> np.ndarray:
    """Adjoint of :func:`im2col`: scatter columns back to an image, summing overlapping windows.

    Args:
        cols: ``(N, C*kh*kw, H_out*W_out)`` array in :func:`im2col`'s layout.
        x_shape: ``(N, C, H_in, W_in)`` of the image to rebuild.
        kh, kw, stride, padding: as given to :func:`im2col`.

    Returns:
        ``(N, C, H_in, W_in)`` float64; the padding border is dropped.

    Raises:
        ValueError: ``x_shape`` not of length 4, ``cols`` shape inconsistent with it, or any
        invalid size argument (as in :func:`im2col`).

    Source: the transpose of the unfolding in Chellapilla et al. (2006); ``dx`` of a convolution.
    """
    cols = _check_cols(cols, x_shape, kh, kw, stride, padding)           # (N, C*kh*kw, H_out*W_out)
    N, C, H_in, W_in = (int(s) for s in x_shape)
    H_out = conv_output_size(H_in, kh, stride, padding)
    W_out = conv_output_size(W_in, kw, stride, padding)
    cols6 = cols.reshape(N, C, kh, kw, H_out, W_out)                     # (N, C, kh, kw, H_out, W_out)
    H_p, W_p = H_in + 2 * padding, W_in + 2 * padding
    xp = np.zeros((N, C, H_p, W_p))                                      # (N, C, H_p, W_p)
    for offset in range(kh * kw):
        i, j = divmod(offset, kw)
        xp[:, :, i : i + stride * H_out : stride, j : j + stride * W_out : stride] += cols6[:, :, i, j]
    return xp[:, :, padding : padding + H_in, padding : padding + W_in]  # (N, C, H_in, W_in)


def conv2d_forward(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: int = 1, padding: int = 0
) -> tuple[np.ndarray, dict]:
    """Cross-correlation ``y[n, o] = sum_{c,i,j} w[o, c, i, j] * x_pad[n, c, s*oh + i, s*ow + j] + b[o]``.

    Args:
        x: ``(N, C, H_in, W_in)`` input (converted to float64; integer images are safe).
        w: ``(C_out, C, kh, kw)`` filters.
        b: optional ``(C_out,)`` bias.
        stride, padding: as in ``torch.nn.functional.conv2d``.

    Returns:
        ``(y, cache)``: ``y`` ``(N, C_out, H_out, W_out)`` float64; ``cache`` for
        :func:`conv2d_backward`.

    Raises:
        ValueError: ``x`` or ``w`` not 4-D, channel mismatch, ``b`` shape not ``(C_out,)``,
        ``stride < 1``, ``padding < 0``, or a kernel larger than the padded input.

    Source: torch.nn.functional.conv2d semantics, computed by im2col + one matmul.
    """
    x, w, b = _check_conv_args(x, w, b, stride, padding)                 # (N, C, H_in, W_in), (C_out, C, kh, kw), (C_out,) or None
    N, C, H_in, W_in = x.shape
    C_out, _, kh, kw = w.shape
    H_out = conv_output_size(H_in, kh, stride, padding)
    W_out = conv_output_size(W_in, kw, stride, padding)

    cols = im2col(x, kh, kw, stride, padding)                            # (N, C*kh*kw, H_out*W_out)
    w_mat = w.reshape(C_out, C * kh * kw)                                # (C_out, C*kh*kw)
    y = w_mat @ cols                                                     # (N, C_out, H_out*W_out)
    if b is not None:
        y += b[None, :, None]                                            # (N, C_out, H_out*W_out)
    y = y.reshape(N, C_out, H_out, W_out)                                # (N, C_out, H_out, W_out)
    cache = {"cols": cols, "w": w, "x_shape": x.shape, "stride": stride, "padding": padding, "has_bias": b is not None}
    return y, cache


def conv2d_backward(dy: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Gradients of :func:`conv2d_forward`.

    Args:
        dy: ``(N, C_out, H_out, W_out)`` upstream gradient.
        cache: the dict returned by the forward call.

    Returns:
        ``(dx (N, C, H_in, W_in), dw (C_out, C, kh, kw), db (C_out,) or None)`` in float64; ``db`` is
        None when the forward had no bias.

    Raises:
        ValueError: ``dy`` shape differs from the forward output's, or ``cache`` is not a forward cache.

    Source: the chain rule through the forward's im2col matmul (Chellapilla et al., 2006).
    """
    _check_cache(cache)
    cols, w = cache["cols"], cache["w"]
    stride, padding = cache["stride"], cache["padding"]
    N, C, H_in, W_in = cache["x_shape"]
    C_out, _, kh, kw = w.shape
    H_out = conv_output_size(H_in, kh, stride, padding)
    W_out = conv_output_size(W_in, kw, stride, padding)
    dy = _check_dy(dy, (N, C_out, H_out, W_out))                         # (N, C_out, H_out, W_out)

    dy_mat = dy.reshape(N, C_out, H_out * W_out)                         # (N, C_out, H_out*W_out)
    db = dy.sum(axis=(0, 2, 3)) if cache["has_bias"] else None           # (C_out,)
    dw_mat = np.tensordot(dy_mat, cols, axes=([0, 2], [0, 2]))           # (C_out, C*kh*kw)
    dw = dw_mat.reshape(C_out, C, kh, kw)                                # (C_out, C, kh, kw)
    w_mat = w.reshape(C_out, C * kh * kw)                                # (C_out, C*kh*kw)
    dcols = w_mat.transpose(1, 0) @ dy_mat                               # (N, C*kh*kw, H_out*W_out)
    dx = col2im(dcols, (N, C, H_in, W_in), kh, kw, stride, padding)      # (N, C, H_in, W_in)
    return dx, dw, db


def conv2d_flops(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int = 1, padding: int = 0) -> int:
    """Floating-point operations of one forward convolution, bias excluded.

    ``2 * N * C_out * H_out * W_out * C * kh * kw``: each output element is a dot product of length
    ``C*kh*kw``, counted as one multiply and one add per term.

    Raises:
        ValueError: shapes not of length 4, channel mismatch, or invalid stride/padding/kernel.

    Source: the usual multiply-add convention (2 FLOPs per MAC), e.g. the seed canon's item #16.
    """
    _check_shapes(x_shape, w_shape)
    N, C, H_in, W_in = x_shape
    C_out, _, kh, kw = w_shape
    H_out = conv_output_size(H_in, kh, stride, padding)
    W_out = conv_output_size(W_in, kw, stride, padding)
    return int(2 * N * C_out * H_out * W_out * C * kh * kw)


def receptive_field(layers: Sequence[tuple[int, int]]) -> int:
    """Receptive field of a stack of ``(kernel, stride)`` layers, in input pixels along one axis.

    The number of input pixels one output pixel of the last layer depends on (three 3x3 stride-1
    layers see 7). Padding does not matter.

    Raises:
        ValueError: an entry of ``layers`` is not a pair with kernel >= 1 and stride >= 1.

    Source: Araujo, Norris & Sim (2019), "Computing receptive fields of convolutional neural
    networks", eq. 2.
    """
    _check_layers(layers)
    field, jump = 1, 1
    for k, s in layers:
        field += (k - 1) * jump  # layer l widens the field by k - 1 steps of its input grid
        jump *= s
    return field

# ---------------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------------


def _check_int(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_geometry(size: int, kernel: int, stride: int, padding: int) -> None:
    _check_int("size", size, 1)
    _check_int("kernel", kernel, 1)
    _check_int("stride", stride, 1)
    _check_int("padding", padding, 0)
    if kernel > size + 2 * padding:
        raise ValueError(f"kernel {kernel} is larger than the padded input {size} + 2*{padding}")


def _check_x(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)                                  # (N, C, H_in, W_in)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D (N, C, H_in, W_in), got shape {x.shape}")
    return x


def _check_cols(
    cols: np.ndarray, x_shape: tuple[int, int, int, int], kh: int, kw: int, stride: int, padding: int
) -> np.ndarray:
    if len(x_shape) != 4:
        raise ValueError(f"x_shape must be (N, C, H_in, W_in), got {x_shape}")
    _check_int("kh", kh, 1)
    _check_int("kw", kw, 1)
    N, C, H_in, W_in = (int(s) for s in x_shape)
    L = conv_output_size(H_in, kh, stride, padding) * conv_output_size(W_in, kw, stride, padding)
    cols = np.asarray(cols, dtype=np.float64)                            # (N, C*kh*kw, H_out*W_out)
    if cols.shape != (N, C * kh * kw, L):
        raise ValueError(f"cols must have shape {(N, C * kh * kw, L)}, got {cols.shape}")
    return cols


def _check_conv_args(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``x``, ``w`` (and ``b``) as float64 with consistent shapes; ``stride >= 1``, ``padding >= 0``."""
    x = _check_x(x)                                                      # (N, C, H_in, W_in)
    w = np.asarray(w, dtype=np.float64)                                  # (C_out, C, kh, kw)
    if w.ndim != 4:
        raise ValueError(f"w must be 4-D (C_out, C, kh, kw), got shape {w.shape}")
    if w.shape[1] != x.shape[1]:
        raise ValueError(f"w has {w.shape[1]} input channels but x has C = {x.shape[1]}")
    if b is not None:
        b = np.asarray(b, dtype=np.float64)                              # (C_out,)
        if b.shape != (w.shape[0],):
            raise ValueError(f"b must have shape (C_out,) = ({w.shape[0]},), got {b.shape}")
    _check_int("stride", stride, 1)
    _check_int("padding", padding, 0)
    return x, w, b


def _check_cache(cache: dict) -> None:
    if not isinstance(cache, dict) or "cols" not in cache:
        raise ValueError("cache must be the dict returned by conv2d_forward")


def _check_dy(dy: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    dy = np.asarray(dy, dtype=np.float64)                                # (N, C_out, H_out, W_out)
    if dy.shape != shape:
        raise ValueError(f"dy must have the forward output's shape {shape}, got {dy.shape}")
    return dy


def _check_shapes(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> None:
    if len(x_shape) != 4:
        raise ValueError(f"x_shape must be (N, C, H_in, W_in), got {x_shape}")
    if len(w_shape) != 4:
        raise ValueError(f"w_shape must be (C_out, C, kh, kw), got {w_shape}")
    if w_shape[1] != x_shape[1]:
        raise ValueError(f"w_shape has {w_shape[1]} input channels but x_shape has C = {x_shape[1]}")


def _check_layers(layers: Sequence[tuple[int, int]]) -> None:
    for layer in layers:
        if len(layer) != 2:
            raise ValueError(f"layers must hold (kernel, stride) pairs, got {layer!r}")
        if layer[0] < 1 or layer[1] < 1:
            raise ValueError(f"layers entries need kernel >= 1 and stride >= 1, got {layer!r}")
