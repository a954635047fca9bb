"""Canon #27: causal and padding masks, and the one place bool masks become additive biases.

Plan: every mask is a bool allow-mask (True = may attend) until the very end; masks combine with a
broadcasting logical AND, and only then become a float bias (0 / finfo.min, never -inf because an
all -inf row softmaxes to NaN). The causal mask is bottom-right aligned (query i sits at absolute
position T_k - T_q + i), which is what decoding with a KV cache needs.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "causal_mask",
    "causal_padding_mask",
    "combine_masks",
    "key_padding_to_attention",
    "mask_to_bias",
    "padding_mask",
    "positions_from_mask",
]


def causal_mask(T_q: int, T_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Bottom-right aligned causal allow-mask, ``(T_q, T_k)`` bool."""
    if T_k is None:
        T_k = T_q
    i = torch.arange(T_q, device=device)[:, None] + (T_k - T_q)  # (T_q, 1) absolute positions
    j = torch.arange(T_k, device=device)[None, :]  # (1, T_k)
    return j <= i  # (T_q, T_k)


def padding_mask(lengths: Tensor, T: int | None = None, *,
                 side: Literal["right", "left"] = "right") -> Tensor:
    """Real-token mask from sequence lengths: ``(B,)`` int -> ``(B, T)`` bool, ``True`` = real token."""
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    if T is None:
        T = int(lengths.max()) if lengths.numel() > 0 else 0
    pos = torch.arange(T, device=lengths.device)[None, :]  # (1, T)
    if side == "right":
        return pos < lengths[:, None]  # (B, T)
    return pos >= (T - lengths)[:, None]  # (B, T)


def key_padding_to_attention(valid: Tensor) -> Tensor:
    """Key-padding mask ``(B, T_k)`` bool|int (``True``/1 = real key) -> allow-mask ``(B, 1, 1, T_k)``."""
    return valid.bool()[:, None, None, :]  # (B, 1, 1, T_k)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Broadcasting logical AND of bool|int allow-masks; ``None`` entries are ignored."""
    out = None
    for m in masks:
        if m is None:
            continue
        m = m.bool()
        out = m if out is None else out & m
    return out


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool allow-mask -> additive bias of the same shape: 0.0 where True, ``finfo(dtype).min`` where False."""
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    """Causal AND key-padding allow-mask: ``(B, T)`` bool|int -> ``(B, 1, T, T)`` bool."""
    T = attention_mask.shape[1]
    causal = causal_mask(T, device=attention_mask.device)  # (T, T)
    return causal[None, None] & key_padding_to_attention(attention_mask)  # (B, 1, T, T)


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """Position ids that skip padding: ``(B, T)`` bool|int -> ``(B, T)`` long, ``cumsum - 1`` clamped at 0."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)
