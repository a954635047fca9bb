from __future__ import annotations

import math

import torch
from torch import Tensor


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    z = x.to(_work_dtype(x.dtype))
    peak = z.amax(dim=dim, keepdim=True)                                    # (...,)
    e = torch.exp(z - peak)
    return e / e.sum(dim=dim, keepdim=True)                                 # (...,)


def _validate(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
              scale: float | None) -> tuple[int, ...]:
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
