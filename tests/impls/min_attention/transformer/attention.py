"""Canon #25: scaled dot-product attention, ``softmax(q kᵀ · scale + mask) v``.

Plan: scores = q @ k^T * scale (default 1/sqrt(d_k) so the logits keep unit variance); a bool
allow-mask is applied with masked_fill(finfo.min) rather than -inf, because a fully masked row of -inf
would softmax to NaN; those rows are zeroed after the softmax. A float mask is added as a bias. The
softmax subtracts the row max and runs in float32 for half inputs. Inverted dropout on the weights.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["scaled_dot_product_attention", "stable_softmax"]


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along ``dim`` with the row max subtracted before ``exp``."""
    orig = x.dtype
    if orig in (torch.float16, torch.bfloat16):
        x = x.float()
    z = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(z)
    return (e / e.sum(dim=dim, keepdim=True)).to(orig)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 return_weights: bool = False,
                                 generator: torch.Generator | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """Attention ``softmax(q kᵀ · scale + mask) v`` over the last two dims."""
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()  # a finfo.min bias added in half precision would round to -inf
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask.to(scores.dtype)
    weights = stable_softmax(scores, dim=-1).to(q.dtype)  # (..., T_q, T_k)
    if mask is not None and mask.dtype == torch.bool:
        weights = weights.masked_fill(~mask, 0.0)
    if dropout_p > 0.0:
        keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= dropout_p
        weights = weights * keep.to(weights.dtype) / (1.0 - dropout_p)
    out = torch.matmul(weights, v)  # (..., T_q, d_v)
    if return_weights:
        return out, weights
    return out
