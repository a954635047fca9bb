"""Canon #25: scaled dot-product attention, ``softmax(q kᵀ · scale + mask) v``, and a stable softmax.

Every other attention item (multi-head, cross-attention, GQA, the KV cache) is this function called
with different shapes, so it takes any number of leading dims and broadcasts them.

The subtle point is the fully masked row. A query with no permitted key (left padding, an image
with every region dropped) softmaxes an all-``-inf`` row into ``0 / 0 = NaN``, and that NaN leaks into
the gradients of q, k and v for the whole batch. This module fills disallowed scores with
``torch.finfo(dtype).min``, which keeps every row finite, and then zeroes the weights where the bool
mask is False, so a masked weight is exactly 0 and a query with no permitted key returns exact zeros
rather than the uniform average of keys it may not see (docs/contract.md C9, C10).

Shape letters: ``...`` leading dims (batch, heads; broadcast between q, k, v), ``T_q`` queries,
``T_k`` keys, ``d_k`` query/key width, ``d_v`` value width.

Trade-off: scores and softmax run in float32 when the inputs are float16/bfloat16, instead of in the
input dtype, because float16 ends at 65504: the float16 bias ``-65504`` plus a score of only ``-16``
already rounds to ``-inf`` and brings the NaN back. The price is a float32 copy of the
``(..., T_q, T_k)`` scores, twice the memory of the float16 ones.

What to test: the closed-form two-key example, agreement with ``F.scaled_dot_product_attention``
(no mask, bool mask, float bias, causal), rows summing to 1 with masked weights exactly 0,
permutation of keys/values (invariance) and of queries (equivariance), a fully masked row giving
zeros with finite gradients, scores of ±1e4, the float16 probe, and ``gradcheck`` in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["scaled_dot_product_attention", "stable_softmax"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16 (the upcast of docs/contract.md C5), the dtype itself otherwise."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along ``dim`` that stays finite for any finite logits.

    ``x`` any shape ``(...,)``, floating; returns the same shape and dtype. float16/bfloat16 inputs are
    computed in float32 and cast back. Logits of ±1e4 give finite probabilities in [0, 1] that sum to 1
    (to the rounding of values of that size). Finite inputs only: a row that is entirely ``-inf`` is
    NaN, which is why masks in this package use ``finfo.min`` (C10).
    Source: the standard softmax; equals ``torch.softmax`` on finite input.
    """
    z = x.to(_compute_dtype(x.dtype))
    shifted = z - z.amax(dim=dim, keepdim=True)                          # (...,)
    e = shifted.exp()
    probs = e / e.sum(dim=dim, keepdim=True)                             # (...,)
    return probs.to(x.dtype)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 return_weights: bool = False,
                                 generator: torch.Generator | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """Attention ``softmax(q kᵀ · scale + mask) v`` over the last two dims.

    Args:
        q: ``(..., T_q, d_k)`` queries. k: ``(..., T_k, d_k)`` keys. v: ``(..., T_k, d_v)`` values.
            Leading dims broadcast; all three share one floating dtype, which the output keeps
            (float16/bfloat16: scores, mask and softmax are computed in float32, the result cast back).
        mask: broadcastable to ``(..., T_q, T_k)``. bool = allow-mask (``True`` may attend): a False
            entry gets weight exactly 0, and a query with no allowed key gets all-zero weights and a
            zero output (not NaN, not a uniform average); floating = additive bias.
        dropout_p: probability of zeroing a weight (inverted dropout, survivors scaled by
            ``1 / (1 - p)``), drawn from ``generator``; callers pass 0 in eval mode.
        scale: multiplies the scores; ``1 / sqrt(d_k)`` by default.
        return_weights: also return the weights actually applied to v (after dropout), ``(..., T_q, T_k)``.

    Returns ``out (..., T_q, d_v)`` or ``(out, weights)``.

    Raises ValueError for rank < 2, non-float or mixed dtypes, ``d_k`` or ``T_k`` mismatch, leading dims
    that do not broadcast, a mask that does not broadcast to ``(..., T_q, T_k)`` (or is neither bool nor
    float), ``dropout_p`` outside [0, 1) and ``scale <= 0``.
    Source: Vaswani et al. 2017, eq. 1; mask convention docs/contract.md C10.
    """
    _check_inputs(q, k, v, mask, dropout_p, scale)
    compute = _compute_dtype(q.dtype)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q.to(compute) @ k.to(compute).transpose(-2, -1)) * scale   # (..., T_q, T_k)
    allowed = None
    if mask is not None and mask.dtype == torch.bool:
        allowed = mask
        scores = scores.masked_fill(~allowed, torch.finfo(compute).min)  # (..., T_q, T_k)
    elif mask is not None:
        scores = scores + mask.to(compute)                               # (..., T_q, T_k)
    weights = stable_softmax(scores, dim=-1)                             # (..., T_q, T_k)
    if allowed is not None:
        weights = weights.masked_fill(~allowed, 0.0)                     # (..., T_q, T_k)  exact zeros
    if dropout_p > 0.0:
        draw = torch.rand(weights.shape, generator=generator,            # (..., T_q, T_k)
                          dtype=compute, device=weights.device)
        weights = weights * (draw >= dropout_p) / (1.0 - dropout_p)
    weights = weights.to(q.dtype)
    out = weights @ v                                                    # (..., T_q, d_v)
    if return_weights:
        return out, weights
    return out


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                  scale: float | None) -> None:
    """Raise ValueError (naming the argument) for every contract violation of #25."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have rank >= 2 (..., T, d), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor, got {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, k {k.dtype}, v {v.dtype}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k last dim (d_k) is {k.shape[-1]} but q's is {q.shape[-1]}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v has {v.shape[-2]} positions (T_k) but k has {k.shape[-2]}")
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"leading dims of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
            f"v {tuple(v.shape[:-2])} do not broadcast"
        ) from err
    if mask is not None:
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise ValueError(f"mask must be bool (allow-mask) or floating (additive bias), got {mask.dtype}")
        target = (*lead, q.shape[-2], k.shape[-2])
        try:
            fits = torch.broadcast_shapes(mask.shape, target) == torch.Size(target)
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (..., T_q, T_k) = {target}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
