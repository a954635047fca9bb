"""Causal and padding masks as bool allow-masks (True = may attend), and the one place they become
an additive bias.

Plan: every mask here is built by comparing an index grid with a threshold, never by a loop:
causal is "key index <= the query's absolute position", right padding is "index < length", left
padding is "index >= T - length". Masks meet only by logical AND under broadcasting, and a mask is
turned into a float bias once, at the end, with 0 where allowed and the dtype's most negative finite
value where not. Positions for left-padded rows come from a running count of real tokens.

Subtle point: with a KV cache the queries are the last T_q of T_k positions, so query i sits at
absolute position T_k - T_q + i; the causal mask is aligned to the bottom-right corner of the square
one, not to the top-left (a decode step with T_q = 1 sees every key). The bias uses
torch.finfo(dtype).min instead of -inf, because a fully masked row of -inf softmaxes to NaN, and
bool masks are ANDed before that conversion rather than added as biases, because two finfo.min
values add up to -inf.

Shapes: causal (T_q, T_k) from index grids (T_q, 1) and (1, T_k); lengths (B,) -> padding (B, T);
key padding (B, T_k) -> (B, 1, 1, T_k); causal padding (B, 1, T, T); positions (B, T).

Trade-off: I return bool masks and let the attention decide how to apply them, rather than returning
biases everywhere, because a bool mask can still be ANDed with another one and converted for any
dtype later (float16 needs -65504, float32 -3.4e38).

What I would test: causal_mask(2, 4) == [[1,1,1,0],[1,1,1,1]], padding [2, 3] on T = 4 right and
left, combining (T, T) with (B, 1, 1, T) into (B, 1, T, T), no -inf in any bias and -65504 for
float16, a fully masked row staying finite after softmax, positions [[0,0,1,1]] -> [[0,0,0,1]], and
with attention: future tokens and padded keys do not change earlier outputs.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor


def causal_mask(T_q: int, T_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Bool (T_q, T_k) mask: query i (absolute position T_k - T_q + i) may see keys j <= that position.

    T_k defaults to T_q (the square lower-triangular mask). Raises ValueError for T_q < 1 or T_k < T_q.
    """
    if T_q < 1:
        raise ValueError(f"T_q must be >= 1, got {T_q}")
    keys = T_q if T_k is None else T_k
    if keys < T_q:
        raise ValueError(f"T_k must be >= T_q = {T_q}, got {keys}")
    query_pos = torch.arange(keys - T_q, keys, device=device)[:, None]           # (T_q, 1)
    key_pos = torch.arange(keys, device=device)[None, :]                         # (1, T_k)
    return key_pos <= query_pos                                                  # (T_q, T_k)


def padding_mask(lengths: Tensor, T: int | None = None, *,
                 side: Literal["right", "left"] = "right") -> Tensor:
    """Bool (B, T) mask, True on the first (right padding) or last (left padding) lengths[b] slots.

    ``lengths`` is a (B,) integer tensor or list; T defaults to max(lengths). Raises ValueError for
    non-integer, negative or too large lengths, and for an unknown side.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    lens = torch.as_tensor(lengths)                                              # (B,)
    if lens.dim() != 1 or lens.dtype.is_floating_point or lens.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor, "
                         f"got {lens.dtype} of shape {tuple(lens.shape)}")
    if lens.numel() and int(lens.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lens.tolist()}")
    width = (int(lens.max()) if lens.numel() else 0) if T is None else int(T)
    if lens.numel() and int(lens.max()) > width:
        raise ValueError(f"lengths must be <= T = {width}, got {lens.tolist()}")
    slots = torch.arange(width, device=lens.device)[None, :]                     # (1, T)
    if side == "right":
        return slots < lens[:, None]                                             # (B, T)
    return slots >= (width - lens)[:, None]                                      # (B, T)


def key_padding_to_attention(valid: Tensor) -> Tensor:
    """Key padding (B, T_k), bool or 0/1 int, as a (B, 1, 1, T_k) bool mask for (B, H, T_q, T_k) scores.

    Raises ValueError when valid is not 2-D.
    """
    if valid.dim() != 2:
        raise ValueError(f"valid must be (B, T_k), got shape {tuple(valid.shape)}")
    return (valid != 0)[:, None, None, :]                                        # (B, 1, 1, T_k)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of bool (or 0/1 integer) masks under broadcasting; None entries are skipped.

    Returns None when every entry is None. Raises ValueError when the shapes do not broadcast or an
    entry is a float bias (biases cannot be ANDed).
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for m in present:
        if m.dtype.is_floating_point:
            raise ValueError("mask entries must be bool allow-masks, not float biases")
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError as err:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"mask shapes {shapes} do not broadcast") from err
    joined = present[0] != 0
    for m in present[1:]:
        joined = joined & (m != 0)
    return joined


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Additive bias with the mask's shape: 0.0 where True, torch.finfo(dtype).min where False.

    Never -inf, so a fully masked row stays finite after softmax. Raises ValueError for a non-bool
    mask or a non-floating dtype.
    """
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool allow-mask, got {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)              # (...,)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    """Causal AND key padding for an HF-style attention_mask (B, T), bool or 0/1: (B, 1, T, T) bool.

    The causal part compares index grids directly, so an empty sequence (T = 0) gives an empty
    (B, 1, 0, 0) mask. Raises ValueError when attention_mask is not 2-D.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T), got shape {tuple(attention_mask.shape)}")
    slots = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # (T,)
    causal = slots[None, None, None, :] <= slots[None, None, :, None]            # (1, 1, T, T)
    keys = key_padding_to_attention(attention_mask)                              # (B, 1, 1, T)
    return causal & keys                                                         # (B, 1, T, T)


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """Position ids (B, T) long for left-padded rows: running count of real tokens minus 1, floored at 0.

    Raises ValueError when attention_mask is not 2-D.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T), got shape {tuple(attention_mask.shape)}")
    seen = torch.cumsum((attention_mask != 0).long(), dim=1)
    return (seen - 1).clamp(min=0)                                               # (B, T)
