"""Canon #27: causal and padding masks, and the one place bool masks become additive biases.

Convention (docs/contract.md C10): a bool mask is an *allow* mask, ``True`` = may attend / real token, the
meaning of ``F.scaled_dot_product_attention``'s bool ``attn_mask`` and of HF's ``attention_mask``
(and the opposite of ``nn.MultiheadAttention``'s bool masks). Masks are combined with logical AND
and turned into a bias once, with ``torch.finfo(dtype).min``.

The subtle point is where query ``i`` sits when there are more keys than queries. With a KV cache
the ``T_q`` new queries are the *last* ``T_q`` of ``T_k`` positions, so query ``i`` is at absolute
position ``T_k - T_q + i`` and the causal mask is aligned bottom-right: ``causal_mask(1, T_k)`` is
all True (one decode step sees everything so far). A top-left ``tril`` hides the whole cache.

Shape letters: ``B`` batch, ``T`` sequence length, ``T_q`` queries, ``T_k`` keys.

Trade-off: ``mask_to_bias`` uses ``finfo(dtype).min`` rather than ``-inf`` because an all-``-inf``
row softmaxes to NaN, and rather than a fixed ``-1e9`` because float16 ends at 65504, so ``-1e9``
itself becomes ``-inf`` there. Adding two such biases also overflows to ``-inf``
(``2 · finfo.min``), which is why masks are ANDed as bools first and converted once.

What to test: the triangular and offset causal masks, left/right padding, ``finfo.min`` bias values
(``-65504`` in float16) with no ``-inf``, broadcasting in ``combine_masks``, ``causal_padding_mask``
against an explicit loop, ``positions_from_mask`` on left padding, and, with #25, that future tokens
and padded keys do not change the outputs they must not change.
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
    """Bottom-right aligned causal allow-mask, ``(T_q, T_k)`` bool.

    Query ``i`` sits at absolute position ``T_k - T_q + i`` and may see keys ``j`` up to that position,
    so ``causal_mask(T)`` is lower-triangular and ``causal_mask(1, T_k)`` is all True. ``T_k`` defaults
    to ``T_q``. Raises ValueError if ``T_q < 1`` or ``T_k < T_q``. Source: docs/contract.md #27; the
    bottom-right alignment is the one a KV cache needs (FlashAttention 2 uses the same).
    """
    if T_k is None:
        T_k = T_q
    _check_causal_sizes(T_q, T_k)
    query_pos = torch.arange(T_k - T_q, T_k, device=device)[:, None]     # (T_q, 1)
    key_pos = torch.arange(T_k, device=device)[None, :]                  # (1, T_k)
    return key_pos <= query_pos                                          # (T_q, T_k)


def padding_mask(lengths: Tensor, T: int | None = None, *,
                 side: Literal["right", "left"] = "right") -> Tensor:
    """Real-token mask from sequence lengths: ``(B,)`` int -> ``(B, T)`` bool, ``True`` = real token.

    ``side="right"`` puts the real tokens first (``[1, 1, 0, 0]``), ``"left"`` last (``[0, 0, 1, 1]``, the
    layout batched generation uses). ``T`` defaults to ``max(lengths)`` (0 for an empty batch). A list
    of ints is accepted. Raises ValueError for non-integer or non-1-D ``lengths``, negative lengths,
    lengths greater than ``T``, negative ``T`` and an unknown ``side``.
    """
    lengths = torch.as_tensor(lengths)                                   # (B,)
    _check_lengths(lengths, side)
    if T is None:
        T = int(lengths.max()) if lengths.numel() else 0
    _check_padded_length(lengths, T)
    idx = torch.arange(T, device=lengths.device)[None, :]                # (1, T)
    if side == "right":
        return idx < lengths[:, None]                                    # (B, T)
    return idx >= (T - lengths)[:, None]                                 # (B, T)


def key_padding_to_attention(valid: Tensor) -> Tensor:
    """Key-padding mask ``(B, T_k)`` bool|int (``True``/1 = real key) -> allow-mask ``(B, 1, 1, T_k)``.

    The two singleton dims broadcast over heads and queries in ``(B, H, T_q, T_k)`` scores.
    Raises ValueError if ``valid`` is not 2-D or is floating.
    """
    valid = _as_bool_2d(valid, "valid")
    return valid[:, None, None, :]                                       # (B, 1, 1, T_k)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Broadcasting logical AND of bool|int allow-masks; ``None`` entries are ignored.

    Returns the broadcast shape, e.g. ``(T, T)`` and ``(B, 1, 1, T)`` -> ``(B, 1, T, T)``; ``None`` when
    every entry is ``None``. Raises ValueError when a mask is floating (biases are not ANDed; convert
    once with ``mask_to_bias`` after combining) or when the shapes do not broadcast.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    _check_allow_masks(present)
    shape = torch.broadcast_shapes(*(m.shape for m in present))
    out = torch.ones(shape, dtype=torch.bool, device=present[0].device)  # (...,)
    for m in present:
        out = out & (m != 0)
    return out


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool allow-mask -> additive bias of the same shape: 0.0 where True, ``finfo(dtype).min`` where False.

    ``finfo(float16).min == -65504``; the bias never contains ``-inf``, so even a fully masked row
    softmaxes to finite values. Raises ValueError if ``mask`` is not bool or ``dtype`` is not floating.
    """
    _check_bias_args(mask, dtype)
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)      # (...,)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)               # (...,)


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    """Causal AND key-padding allow-mask: ``(B, T)`` bool|int -> ``(B, 1, T, T)`` bool.

    ``out[b, 0, i, j] = (j <= i) and attention_mask[b, j]``. Only keys are masked: a padded query row
    still gets a row (its output is ignored downstream); with left padding the leading padded queries
    have no permitted key and attention returns zeros for them. Raises ValueError if ``attention_mask``
    is not 2-D or is floating.
    """
    valid = _as_bool_2d(attention_mask, "attention_mask")
    B, T = valid.shape
    if T == 0:
        return torch.zeros(B, 1, 0, 0, dtype=torch.bool,                 # (B, 1, T, T)
                           device=valid.device)
    causal = causal_mask(T, device=valid.device)                         # (T, T)
    return causal & key_padding_to_attention(valid)                      # (B, 1, T, T)


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """Position ids that skip padding: ``(B, T)`` bool|int -> ``(B, T)`` long, ``cumsum - 1`` clamped at 0.

    ``[[0, 0, 1, 1]] -> [[0, 0, 0, 1]]``: with left padding the first real token gets position 0, as it
    would unpadded (HF's convention for batched generation). Raises ValueError if ``attention_mask`` is
    not 2-D or is floating.
    """
    valid = _as_bool_2d(attention_mask, "attention_mask")
    counts = valid.long().cumsum(dim=1)                                  # (B, T)
    return (counts - 1).clamp(min=0)                                     # (B, T)


def _check_causal_sizes(T_q: int, T_k: int) -> None:
    """ValueError unless ``1 <= T_q <= T_k``."""
    if T_q < 1:
        raise ValueError(f"T_q must be >= 1, got {T_q}")
    if T_k < T_q:
        raise ValueError(f"T_k must be >= T_q (queries are the last T_q of T_k positions), got T_k={T_k}, T_q={T_q}")


def _check_lengths(lengths: Tensor, side: str) -> None:
    """ValueError unless ``lengths`` is a 1-D non-negative integer tensor and ``side`` is known."""
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor (B,), got {lengths.dtype} {tuple(lengths.shape)}")
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")


def _check_padded_length(lengths: Tensor, T: int) -> None:
    """ValueError unless ``0 <= lengths <= T``."""
    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    if (lengths > T).any():
        raise ValueError(f"lengths must be <= T={T}, got {lengths.tolist()}")


def _check_allow_masks(present: list[Tensor]) -> None:
    """ValueError unless every mask is bool or integer and their shapes broadcast."""
    for i, m in enumerate(present):
        if m.is_floating_point() or m.is_complex():
            raise ValueError(f"masks must be bool or integer allow-masks, got {m.dtype} for mask #{i}")
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError as err:
        raise ValueError(f"masks of shapes {[tuple(m.shape) for m in present]} do not broadcast") from err


def _check_bias_args(mask: Tensor, dtype: torch.dtype) -> None:
    """ValueError unless ``mask`` is bool and ``dtype`` floating."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool allow-mask, got {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")


def _as_bool_2d(mask: Tensor, name: str) -> Tensor:
    """A ``(B, T)`` bool|int mask as bool (``mask != 0``); ValueError naming ``name`` otherwise."""
    if mask.dim() != 2:
        raise ValueError(f"{name} must be 2-D (B, T), got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point() or mask.is_complex():
        raise ValueError(f"{name} must be bool or integer 0/1, got {mask.dtype}")
    return mask != 0
