"""Scaled dot-product attention written out in torch, plus the softmax it rests on.

Plan: scores = q k^T * scale with scale = 1/sqrt(d_k) by default, computed as one einsum over any
leading batch/head axes; a mask either adds a float bias or, as a bool allow-mask, fills the banned
scores with the dtype's most negative finite number; a max-subtracted softmax turns each row into
weights; optional dropout zeroes weights and rescales the survivors by 1/(1-p); the output is the
weighted sum of the values, another einsum.

Subtle point: a query whose every key is masked. Filling with -inf makes that row exp(-inf - (-inf))
= NaN, and the NaN then leaks into every gradient. I fill with torch.finfo(dtype).min, which keeps
the row finite, and then multiply the weights by "this row has at least one allowed key", so a fully
masked query gets exactly zero weights and a zero output, with zero gradient through that row.
float16 and bfloat16 inputs are computed in float32 and cast back, because a score of -20 plus the
float16 bias -65504 rounds to -inf in float16 arithmetic.

Shapes: q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v); scores and weights
(..., T_q, T_k); output (..., T_q, d_v). Typically ... is (B, H).

Trade-off: einsum instead of ``q @ k.transpose(-2, -1)`` because the index string states the
contraction over d_k and the broadcast over the leading axes in one place; the cost is the same
batched matmul underneath. The upcast costs 2x memory for half inputs rather than risking overflow.

What I would test: the two-key closed form [0.6698, 0.3302], agreement with
F.scaled_dot_product_attention with and without masks, rows summing to 1 with masked weights exactly
0, key/value permutation invariance, a fully masked row giving zeros and finite gradients, scores of
+-1e4, the fp16 probe, gradcheck in float64, and 2-D unbatched inputs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16 inputs, the dtype itself otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along ``dim`` after subtracting the maximum, so exp never overflows.

    Any shape; float16/bfloat16 inputs return float32 probabilities (the subtraction and the sum
    need the range). A row of equal very negative values still gives a uniform row.
    """
    z = x.to(_work_dtype(x.dtype))
    peak = z.amax(dim=dim, keepdim=True)                                    # (...,)
    e = torch.exp(z - peak)
    return e / e.sum(dim=dim, keepdim=True)                                 # (...,)


def _validate(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
              scale: float | None) -> tuple[int, ...]:
    """Check ranks, widths, lengths, broadcasting and hyperparameters; return the scores' shape."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have rank >= 2 (..., T, d), got shape {tuple(t.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k has width d_k = {k.shape[-1]} but q has {q.shape[-1]}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v has T_k = {v.shape[-2]} rows but k has {k.shape[-2]}")
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(f"leading dims of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         "do not broadcast") from err
    score_shape = (*lead, q.shape[-2], k.shape[-2])
    if mask is not None:
        try:
            joined = torch.broadcast_shapes(mask.shape, score_shape)
        except RuntimeError as err:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                             f"{score_shape}") from err
        if tuple(joined) != score_shape:
            raise ValueError(f"mask of shape {tuple(mask.shape)} would enlarge the scores {score_shape}")
    if not (0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    return score_shape


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 return_weights: bool = False,
                                 generator: torch.Generator | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v  (Vaswani et al., 2017, eq. 1).

    q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v) -> out (..., T_q, d_v), and the weights
    (..., T_q, T_k) when ``return_weights``. ``mask`` is a bool allow-mask (True = may attend) or an
    additive float bias, broadcastable to (..., T_q, T_k). A query with no allowed key gets zeros.
    The output has the dtype of q. Raises ValueError for rank < 2, a d_k or T_k mismatch, leading
    dims that do not broadcast, a mask that does not fit, dropout_p outside [0, 1) or scale <= 0.
    """
    _validate(q, k, v, mask, dropout_p, scale)
    out_dtype = q.dtype
    work = _work_dtype(q.dtype)
    qw, kw, vw = q.to(work), k.to(work), v.to(work)
    step = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("...qd,...kd->...qk", qw, kw) * step              # (..., T_q, T_k)
    live = None
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, torch.finfo(work).min)           # (..., T_q, T_k)
        live = mask.any(dim=-1, keepdim=True)                               # (..., 1)  False: no key
    elif mask is not None:
        scores = scores + mask.to(work)
    weights = stable_softmax(scores, dim=-1)                                # (..., T_q, T_k)
    if live is not None:
        weights = weights * live
    if dropout_p > 0.0:
        draws = torch.rand(weights.shape, generator=generator, dtype=work)  # (..., T_q, T_k)
        weights = weights * (draws >= dropout_p) / (1.0 - dropout_p)
    out = torch.einsum("...qk,...kd->...qd", weights, vw)                   # (..., T_q, d_v)
    if return_weights:
        return out.to(out_dtype), weights.to(out_dtype)                     # (..., T_q, d_v), (..., T_q, T_k)
    return out.to(out_dtype)                                                # (..., T_q, d_v)
