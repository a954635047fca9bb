"""Causal and padding masks for attention, all as bool allow-masks (True = may attend).

Plan: build each mask from index comparisons: causal compares key positions with query positions,
padding compares positions with the lengths. Masks are combined with & and turned into an additive
bias only at the very end, with the most negative finite value of the dtype.

Subtle point: with a KV cache the T_q queries are the last T_q of the T_k positions, so query i is at
position T_k - T_q + i and the causal mask is aligned bottom-right, not top-left.

Shapes: causal (T_q, T_k); lengths (B,) -> padding (B, T); key padding (B, T_k) -> (B, 1, 1, T_k) so
it broadcasts over heads and queries; causal padding (B, 1, T, T); positions (B, T).

Trade-off: masks stay bool instead of float because bool masks can be ANDed safely; adding two
biases of finfo.min would overflow to -inf.

What I would test: causal_mask(2, 4), padding with both sides, combining a (T, T) with a
(B, 1, 1, T) mask, and that the bias has no -inf in it.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor


def causal_mask(T_q: int, T_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """(T_q, T_k) bool, bottom-right aligned lower triangle. Raises ValueError if T_q < 1 or T_k < T_q."""
    if T_k is None:
        T_k = T_q
    if T_q < 1:
        raise ValueError(f"T_q must be >= 1, got {T_q}")
    if T_k < T_q:
        raise ValueError(f"T_k must be >= T_q, got T_k={T_k}, T_q={T_q}")
    ones = torch.ones(T_q, T_k, dtype=torch.bool, device=device)   # (T_q, T_k)
    return ones.tril(diagonal=T_k - T_q)                           # (T_q, T_k)


def padding_mask(lengths: Tensor, T: int | None = None, *,
                 side: Literal["right", "left"] = "right") -> Tensor:
    """(B,) lengths -> (B, T) bool with True on real tokens. Raises ValueError on bad lengths or side."""
    lengths = torch.as_tensor(lengths)                             # (B,)
    if lengths.dtype.is_floating_point or lengths.dim() != 1:
        raise ValueError("lengths must be a 1-D integer tensor")
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side}")
    if T is None:
        T = int(lengths.max())
    if (lengths < 0).any() or (lengths > T).any():
        raise ValueError(f"lengths must be in [0, {T}], got {lengths.tolist()}")
    pos = torch.arange(T)[None, :]                                 # (1, T)
    if side == "right":
        return pos < lengths[:, None]                              # (B, T)
    return pos >= (T - lengths)[:, None]                           # (B, T)


def key_padding_to_attention(valid: Tensor) -> Tensor:
    """(B, T_k) bool or 0/1 -> (B, 1, 1, T_k) bool. Raises ValueError if valid is not 2-D."""
    if valid.dim() != 2:
        raise ValueError(f"valid must be (B, T_k), got {tuple(valid.shape)}")
    return valid.bool()[:, None, None, :]                          # (B, 1, 1, T_k)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """AND of all non-None masks (broadcasting); None if there are none. ValueError if they do not broadcast."""
    out = None
    for m in masks:
        if m is None:
            continue
        if out is None:
            out = m.bool()
            continue
        try:
            torch.broadcast_shapes(out.shape, m.shape)
        except RuntimeError as e:
            raise ValueError(f"mask shapes {tuple(out.shape)} and {tuple(m.shape)} do not broadcast") from e
        out = out & m.bool()
    return out


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """0.0 where mask is True, finfo(dtype).min where False. ValueError for a non-bool mask or int dtype."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool, got {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be floating, got {dtype}")
    bias = torch.zeros(mask.shape, dtype=dtype)                    # (...,)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    """(B, T) bool or 0/1 -> (B, 1, T, T): causal AND key padding. ValueError if not 2-D."""
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T), got {tuple(attention_mask.shape)}")
    T = attention_mask.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()             # (T, T)
    return causal[None, None] & key_padding_to_attention(attention_mask)   # (B, 1, T, T)


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T), got {tuple(attention_mask.shape)}")
    counts = attention_mask.long().cumsum(dim=1)
    return (counts - 1).clamp(min=0)                               # (B, T)
