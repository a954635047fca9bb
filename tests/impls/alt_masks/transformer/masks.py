"""Alternative correct #27: ``tril`` with a diagonal offset for the causal mask, flipped masks for
left padding, ``functools.reduce(torch.logical_and)`` to combine, ``torch.where`` for the bias and
a running count compared against zero for positions.

Written differently from the reference on purpose (tests/impls); it must pass every test of
``transformer/masks``.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch
from torch import Tensor


def _bool2d(m: Tensor, name: str) -> Tensor:
    if m.ndim != 2 or m.dtype.is_floating_point:
        raise ValueError(f"{name}: expected a 2-D bool/int mask, got {m.dtype} {tuple(m.shape)}")
    return m.bool()


def causal_mask(T_q: int, T_k: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """(T_q, T_k) bool, bottom-right aligned."""
    T_k = T_q if T_k is None else T_k
    if T_q < 1:
        raise ValueError("T_q must be positive")
    if T_k < T_q:
        raise ValueError("T_k smaller than T_q")
    ones = torch.ones(T_q, T_k, dtype=torch.bool, device=device)         # (T_q, T_k)
    return torch.tril(ones, diagonal=T_k - T_q)                          # (T_q, T_k)


def padding_mask(lengths: Tensor, T: int | None = None, *,
                 side: Literal["right", "left"] = "right") -> Tensor:
    """(B,) -> (B, T) bool."""
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError("lengths must be 1-D integers")
    if side != "right" and side != "left":
        raise ValueError("side must be right or left")
    T = (int(lengths.max().item()) if len(lengths) else 0) if T is None else T
    if len(lengths) and (int(lengths.min()) < 0 or int(lengths.max()) > T):
        raise ValueError(f"lengths out of [0, {T}]")
    cols = torch.arange(T).expand(len(lengths), T)                       # (B, T)
    right = cols < lengths.unsqueeze(1)                                  # (B, T)
    return right if side == "right" else right.flip(1)


def key_padding_to_attention(valid: Tensor) -> Tensor:
    """(B, T_k) -> (B, 1, 1, T_k)."""
    return _bool2d(valid, "valid").reshape(valid.shape[0], 1, 1, valid.shape[1])  # (B, 1, 1, T_k)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Broadcasting AND."""
    ms = [m.bool() for m in masks if m is not None]
    if not ms:
        return None
    if any(m.dtype.is_floating_point for m in masks if m is not None):
        raise ValueError("masks must be bool/int")
    try:
        return functools.reduce(torch.logical_and, ms, torch.ones((), dtype=torch.bool))
    except RuntimeError as err:
        raise ValueError("masks do not broadcast") from err


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """0 where True, finfo.min where False."""
    if mask.dtype is not torch.bool:
        raise ValueError("mask must be bool")
    if not dtype.is_floating_point:
        raise ValueError("dtype must be floating")
    low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)              # ()
    zero = torch.tensor(0.0, dtype=dtype)                                # ()
    return torch.where(mask, zero, low)


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    """(B, T) -> (B, 1, T, T)."""
    valid = _bool2d(attention_mask, "attention_mask")
    T = valid.shape[1]
    tri = torch.ones(T, T, dtype=torch.bool).tril()                      # (T, T)
    return torch.logical_and(tri.unsqueeze(0), valid.unsqueeze(1)).unsqueeze(1)  # (B, 1, T, T)


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """(B, T) -> (B, T) long."""
    valid = _bool2d(attention_mask, "attention_mask").to(torch.int64)
    seen = torch.cumsum(valid, 1)                                        # (B, T)
    return torch.where(seen > 0, seen - 1, torch.zeros_like(seen))
