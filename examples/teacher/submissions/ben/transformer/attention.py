"""Scaled dot-product attention, the way I write it in an interview.

Plan: scores = q @ k^T / sqrt(d_k), then the mask (a bool allow-mask, or a float bias that is just
added), then softmax over the keys, optional dropout on the weights, and finally weights @ v. The
whole thing is batched over any leading axes because matmul broadcasts them.

Subtle point: the scale. Without dividing by sqrt(d_k) the dot products grow like sqrt(d_k) and the
softmax saturates, so the gradients vanish. Masked keys get a score of minus infinity so that exp
gives exactly 0 for them.

Shapes: q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v) -> out (..., T_q, d_v), with weights
(..., T_q, T_k). In a transformer ... is (B, H).

Trade-off: I use torch.softmax rather than writing exp / sum myself, because torch already subtracts
the row maximum. float16 inputs are computed in float32 because of the limited range.

What I would test: the two-key example from the notes, agreement with
F.scaled_dot_product_attention, rows of the weights summing to 1, masked weights being 0, and that
permuting keys and values together changes nothing.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along dim with the max subtracted first; float16/bfloat16 come back as float32."""
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    shifted = x - x.max(dim=dim, keepdim=True).values              # (...,)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)                        # (...,)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 return_weights: bool = False,
                                 generator: torch.Generator | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v.

    q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v) -> (..., T_q, d_v) [, weights (..., T_q, T_k)].
    mask: bool (True = attend) or float bias. Raises ValueError for bad ranks, sizes, mask shape,
    dropout_p outside [0, 1) or scale <= 0.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() < 2:
            raise ValueError(f"{name} needs at least 2 dims, got {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same T_k, got {k.shape[-2]} and {v.shape[-2]}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as e:
        raise ValueError(f"batch dims of q, k, v do not broadcast: {e}") from e
    target = (*batch, q.shape[-2], k.shape[-2])
    if mask is not None:
        try:
            ok = torch.broadcast_shapes(mask.shape, target) == target
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {target}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if scale is not None and scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")

    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale                       # (..., T_q, T_k)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))      # (..., T_q, T_k)
        else:
            scores = scores + mask.to(scores.dtype)
    weights = torch.softmax(scores, dim=-1)                        # (..., T_q, T_k)
    if dropout_p > 0:
        keep = torch.rand(weights.shape, generator=generator, dtype=weights.dtype) >= dropout_p  # (..., T_q, T_k)
        weights = weights * keep / (1 - dropout_p)
    out = weights @ v                                              # (..., T_q, d_v)
    if return_weights:
        return out.to(dtype), weights.to(dtype)
    return out.to(dtype)
