"""Canon #26 multi-head attention and #28 cross-attention, on top of #25's attention.

Plan: project x (and the context for cross-attention) to q, k, v with four linear maps, split the
width d into H heads of d_h = d / H, run scaled dot-product attention per head in one batched call,
merge the heads back and apply the output projection. Self-attention optionally rotates q and k
with RoPE (before they enter the cache, so cached keys are already rotated) and appends k, v to a KV
cache; the causal mask is bottom-right aligned so it stays correct with cached keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from canon_refs.transformer.attention import scaled_dot_product_attention
from canon_refs.transformer.masks import causal_mask, combine_masks, key_padding_to_attention

if TYPE_CHECKING:
    from canon_refs.transformer.kv_cache import KVCache
    from canon_refs.transformer.positional import RotaryEmbedding

__all__ = ["CrossAttention", "MultiHeadAttention"]


class MultiHeadAttention(nn.Module):
    """Multi-head (self- or cross-) attention with optional causal mask, KV cache and RoPE."""

    def __init__(self, d_model: int, n_heads: int, *, d_context: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope: RotaryEmbedding | None = None) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.d_context = d_model if d_context is None else d_context
        self.dropout_p = dropout
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.v_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, d) -> (B, H, T, d_h)``."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(B, H, T, d_h) -> (B, T, d)``, the exact inverse of ``split_heads``."""
        B, H, T, d_h = x.shape
        return x.transpose(1, 2).reshape(B, T, H * d_h)  # (B, T, d)

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache: KVCache | None = None,
                positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``x (B, T_q, d)`` to itself or to ``context (B, T_k, d_c)``; returns ``(B, T_q, d)``."""
        T_q = x.shape[1]
        src = x if context is None else context
        q = self.split_heads(self.q_proj(x))  # (B, H, T_q, d_h)
        k = self.split_heads(self.k_proj(src))  # (B, H, T_s, d_h)
        v = self.split_heads(self.v_proj(src))  # (B, H, T_s, d_h)

        past = kv_cache.length if kv_cache is not None else 0
        if self.rope is not None and context is None:
            if positions is None:
                positions = torch.arange(past, past + T_q, device=x.device)
            q = self.rope(q, positions)
            k = self.rope(k, positions)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H, T_k, d_h)
        T_k = k.shape[2]

        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]  # (B, 1, T_q, T_k)
        if is_causal:
            causal = causal_mask(T_q, T_k, device=x.device)  # (T_q, T_k)
            if mask is None or mask.dtype == torch.bool:
                mask = combine_masks(mask, causal)
            else:
                mask = mask.masked_fill(~causal, torch.finfo(mask.dtype).min)

        dropout_p = self.dropout_p if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout_p,
                                                    return_weights=True)
        out = self.out_proj(self.merge_heads(out))  # (B, T_q, d)
        if return_weights:
            return out, weights
        return out


class CrossAttention(MultiHeadAttention):
    """Cross-attention (#28): queries from ``x``, keys and values from ``context``, key-padding mask."""

    def __init__(self, d_model: int, n_heads: int, d_context: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_context=d_context, bias=bias, dropout=dropout)

    def forward(self, x: Tensor, context: Tensor, context_mask: Tensor | None = None, *,  # type: ignore[override]
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``x (B, T_q, d)`` attends to ``context (B, T_k, d_c)``; returns ``(B, T_q, d)`` [, weights]."""
        mask = None if context_mask is None else key_padding_to_attention(context_mask)  # (B, 1, 1, T_k)
        return super().forward(x, context, mask, return_weights=return_weights)
