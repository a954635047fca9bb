"""Canon #27: causal and padding masks, and the one place bool masks ...

TODO: your plan (not implemented yet).
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

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
    raise NotImplementedError("causal_mask: not implemented yet")


def padding_mask(lengths: Tensor, T: int | None = None, *,
                 side: Literal["right", "left"] = "right") -> Tensor:
    """Real-token mask from sequence lengths: ``(B,)`` int -> ``(B, T)`` bool, ``True`` = real token.

    ``side="right"`` puts the real tokens first (``[1, 1, 0, 0]``), ``"left"`` last (``[0, 0, 1, 1]``, the
    layout batched generation uses). ``T`` defaults to ``max(lengths)`` (0 for an empty batch). A list
    of ints is accepted. Raises ValueError for non-integer or non-1-D ``lengths``, negative lengths,
    lengths greater than ``T``, negative ``T`` and an unknown ``side``.
    """
    raise NotImplementedError("padding_mask: not implemented yet")


def key_padding_to_attention(valid: Tensor) -> Tensor:
    """Key-padding mask ``(B, T_k)`` bool|int (``True``/1 = real key) -> allow-mask ``(B, 1, 1, T_k)``.

    The two singleton dims broadcast over heads and queries in ``(B, H, T_q, T_k)`` scores.
    Raises ValueError if ``valid`` is not 2-D or is floating.
    """
    raise NotImplementedError("key_padding_to_attention: not implemented yet")


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Broadcasting logical AND of bool|int allow-masks; ``None`` entries are ignored.

    Returns the broadcast shape, e.g. ``(T, T)`` and ``(B, 1, 1, T)`` -> ``(B, 1, T, T)``; ``None`` when
    every entry is ``None``. Raises ValueError when a mask is floating (biases are not ANDed; convert
    once with ``mask_to_bias`` after combining) or when the shapes do not broadcast.
    """
    raise NotImplementedError("combine_masks: not implemented yet")


def mask_to_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool allow-mask -> additive bias of the same shape: 0.0 where True, ``finfo(dtype).min`` where False.

    ``finfo(float16).min == -65504``; the bias never contains ``-inf``, so even a fully masked row
    softmaxes to finite values. Raises ValueError if ``mask`` is not bool or ``dtype`` is not floating.
    """
    raise NotImplementedError("mask_to_bias: not implemented yet")


def causal_padding_mask(attention_mask: Tensor) -> Tensor:
    """Causal AND key-padding allow-mask: ``(B, T)`` bool|int -> ``(B, 1, T, T)`` bool.

    ``out[b, 0, i, j] = (j <= i) and attention_mask[b, j]``. Only keys are masked: a padded query row
    still gets a row (its output is ignored downstream); with left padding the leading padded queries
    have no permitted key and attention returns zeros for them. Raises ValueError if ``attention_mask``
    is not 2-D or is floating.
    """
    raise NotImplementedError("causal_padding_mask: not implemented yet")


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """Position ids that skip padding: ``(B, T)`` bool|int -> ``(B, T)`` long, ``cumsum - 1`` clamped at 0.

    ``[[0, 0, 1, 1]] -> [[0, 0, 0, 1]]``: with left padding the first real token gets position 0, as it
    would unpadded (HF's convention for batched generation). Raises ValueError if ``attention_mask`` is
    not 2-D or is floating.
    """
    raise NotImplementedError("positions_from_mask: not implemented yet")
