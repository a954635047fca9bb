from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor


def causal_mask(T_q: int, T_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
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
    if valid.dim() != 2:
        raise ValueError(f"valid must be (B, T_k), got shape {tuple(valid.shape)}")
    return (valid != 0)[:, None, None, :]                                        # (B, 1, 1, T_k)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
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
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool allow-mask, got {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)              # (...,)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T), got shape {tuple(attention_mask.shape)}")
    slots = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # (T,)
    causal = slots[None, None, None, :] <= slots[None, None, :, None]            # (1, 1, T, T)
    keys = key_padding_to_attention(attention_mask)                              # (B, 1, 1, T)
    return causal & keys                                                         # (B, 1, T, T)


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T), got shape {tuple(attention_mask.shape)}")
    seen = torch.cumsum((attention_mask != 0).long(), dim=1)
    return (seen - 1).clamp(min=0)                                               # (B, T)
