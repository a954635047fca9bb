"""Alternative correct #25: einsum contractions, a log-domain softmax ``exp(s - log Σ exp s)`` on the
max-shifted scores ``s``, ``torch.where``
masking and a 0/1 multiplier that zeroes disallowed weights.

Written differently from the reference on purpose (canon CONTRIBUTING, tests/impls); it must pass
every test of ``transformer/attention``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _wide(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """softmax in the log domain after the max shift.

    Shifting first matters even here: ``exp(x - logsumexp(x))`` without it loses float32 precision at
    |x| ~ 1e4 (the ulp of 1e4 is ~1e-3), and the probabilities then sum to 1 only within ~1e-4.
    """
    z = x.to(_wide(x.dtype))
    s = z - torch.amax(z, dim=dim, keepdim=True)                         # (...,)
    log_norm = torch.log(torch.exp(s).sum(dim=dim, keepdim=True))        # (...,)
    return torch.exp(s - log_norm).to(x.dtype)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 return_weights: bool = False,
                                 generator: torch.Generator | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """Same contract as the reference; see canon_refs/transformer/attention.py."""
    named = {"q": q, "k": k, "v": v}
    for name, t in named.items():
        if t.ndim < 2 or not t.dtype.is_floating_point:
            raise ValueError(f"{name}: need a floating tensor of rank >= 2, got {t.dtype} {tuple(t.shape)}")
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        raise ValueError("q, k, v dtypes differ")
    if q.size(-1) != k.size(-1):
        raise ValueError("d_k of q and k differ")
    if k.size(-2) != v.size(-2):
        raise ValueError("T_k of k and v differ")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError("q, k, v leading dims are not broadcastable") from None
    full = torch.Size([*batch, q.size(-2), k.size(-2)])
    if mask is not None:
        if not (mask.dtype == torch.bool or mask.dtype.is_floating_point):
            raise ValueError("mask dtype must be bool or float")
        if mask.ndim > len(full) or any(m not in (1, f) for m, f in zip(mask.shape[::-1], full[::-1])):
            raise ValueError(f"mask {tuple(mask.shape)} cannot broadcast to {tuple(full)}")
    if dropout_p < 0.0 or dropout_p >= 1.0:
        raise ValueError("dropout_p outside [0, 1)")
    if scale is not None and (scale <= 0 or math.isnan(scale) or math.isinf(scale)):
        raise ValueError("scale must be positive")

    wide = _wide(q.dtype)
    s = (q.size(-1) ** -0.5) if scale is None else scale
    logits = torch.einsum("...qd,...kd->...qk", q.to(wide), k.to(wide)) * s   # (..., T_q, T_k)
    keep = None
    if mask is not None and mask.dtype == torch.bool:
        keep = mask
        floor = torch.tensor(torch.finfo(wide).min, dtype=wide)          # ()
        logits = torch.where(keep, logits, floor)                        # (..., T_q, T_k)
    elif mask is not None:
        logits = logits + mask.to(wide)                                  # (..., T_q, T_k)
    probs = stable_softmax(logits, dim=-1)                               # (..., T_q, T_k)
    if keep is not None:
        probs = probs * keep.to(wide)                                    # (..., T_q, T_k)
    if dropout_p:
        u = torch.rand(probs.shape, generator=generator, dtype=wide)     # (..., T_q, T_k)
        probs = torch.where(u < dropout_p, torch.zeros_like(probs), probs / (1.0 - dropout_p))
    probs = probs.to(q.dtype)
    out = torch.einsum("...qk,...kd->...qd", probs, v)                   # (..., T_q, d_v)
    return (out, probs) if return_weights else out
