"""Multi-head attention and cross-attention on top of my scaled_dot_product_attention.

Plan: project the queries from x and the keys/values from x (self-attention) or from a context
(cross-attention) with three nn.Linear layers, split the width d into H heads of size d_h = d // H,
run attention on all heads at once, merge the heads back and apply the output projection. A KV cache
gets the new keys/values appended; RoPE rotates q and k before that.

Subtle point: the causal mask with a cache. The new queries are the last T_q positions of T_k, so I
pass causal_mask(T_q, T_k), which is aligned bottom-right.

Shapes: x (B, T_q, d), context (B, T_k, d_c), heads (B, H, T, d_h), output (B, T_q, d), weights
(B, H, T_q, T_k).

Trade-off: separate q/k/v projections instead of one fused in_proj, because cross-attention needs
keys and values from a context of another width.

What I would test: against nn.MultiheadAttention with copied weights, causality, and that
merge_heads(split_heads(x)) gives x back.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from canon_refs.transformer.attention import scaled_dot_product_attention
from canon_refs.transformer.masks import causal_mask, key_padding_to_attention


class MultiHeadAttention(nn.Module):
    """Multi-head attention; self-attention unless a context is passed. ValueError on bad sizes."""

    def __init__(self, d_model: int, n_heads: int, *, d_context: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope=None) -> None:
        """q/k/v/out projections; k and v read d_context features (default d_model)."""
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.d_model = d_model
        self.d_context = d_context or d_model
        self.dropout = dropout
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.v_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.last_maps: Tensor | None = None

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, d) -> (B, H, T, d_h)."""
        B, T, _ = x.shape
        heads = x.view(B, T, self.n_heads, self.head_dim)               # (B, T, H, d_h)
        return heads.transpose(1, 2)                                    # (B, T, H, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, T, d_h) -> (B, T, d)."""
        B, H, T, d_h = x.shape
        return x.transpose(1, 2).reshape(B, T, H * d_h)

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache=None, positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """x (B, T_q, d), context (B, T_k, d_c) or None -> (B, T_q, d) [, weights (B, H, T_q, T_k)].

        Raises ValueError for wrong shapes, a batch mismatch, kv_cache/rope with a context, or a bad mask.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T_q, _ = x.shape
        if context is not None:
            if kv_cache is not None:
                raise ValueError("kv_cache only works for self-attention")
            if self.rope is not None:
                raise ValueError("rope only works for self-attention")
            if context.dim() != 3 or context.shape[-1] != self.d_context or context.shape[0] != B:
                raise ValueError(f"context must be ({B}, T_k, {self.d_context}), got {tuple(context.shape)}")
            src = context
        else:
            src = x
        past = 0 if kv_cache is None else kv_cache.length
        T_k = past + src.shape[1]
        if positions is None:
            positions = torch.arange(past, past + T_q)                  # (T_q,)
        elif positions.shape[-1] != T_q:
            raise ValueError(f"positions must end in T_q={T_q}, got {tuple(positions.shape)}")

        if mask is not None:
            if mask.dim() == 2:
                mask = mask[None, None]                                 # (1, 1, T_q, T_k)
            elif mask.dim() == 3:
                mask = mask[:, None]                                    # (B, 1, T_q, T_k)
            if (mask.dim() != 4 or mask.shape[0] not in (1, B) or mask.shape[1] not in (1, self.n_heads)
                    or mask.shape[2] not in (1, T_q) or mask.shape[3] != T_k):
                raise ValueError(f"mask has shape {tuple(mask.shape)}, which does not fit T_q={T_q}, T_k={T_k}")
        if is_causal:
            causal = causal_mask(T_q, T_k)                              # (T_q, T_k)
            if mask is None:
                mask = causal
            elif mask.dtype == torch.bool:
                mask = mask & causal
            else:
                mask = mask.masked_fill(~causal, torch.finfo(mask.dtype).min)

        q = self.split_heads(self.q_proj(x))                            # (B, H, T_q, d_h)
        k = self.split_heads(self.k_proj(src))                          # (B, H, T_s, d_h)
        v = self.split_heads(self.v_proj(src))                          # (B, H, T_s, d_h)
        if self.rope is not None:
            q = self.rope(q, positions)
            k = self.rope(k, positions)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p, return_weights=True)
        out = self.out_proj(self.merge_heads(out))                      # (B, T_q, d)
        if return_weights:
            maps = weights[0].detach()                                  # (H, T_q, T_k)
            self.last_maps = maps.T                                     # (H, T_k, T_q)  keys first, for plotting
            return out, weights
        return out


class CrossAttention(MultiHeadAttention):
    """Queries from x, keys/values from a context, optional context padding mask."""

    def __init__(self, d_model: int, n_heads: int, d_context: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0) -> None:
        """Same as MultiHeadAttention with k/v reading d_context features."""
        super().__init__(d_model, n_heads, d_context=d_context, bias=bias, dropout=dropout)

    def forward(self, x: Tensor, context: Tensor, context_mask: Tensor | None = None, *,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """x (B, T_q, d), context (B, T_k, d_c), context_mask (B, T_k) -> (B, T_q, d). ValueError on bad input."""
        if context is None:
            raise ValueError("context is required")
        if context_mask is not None:
            if context.dim() != 3 or tuple(context_mask.shape) != tuple(context.shape[:2]):
                raise ValueError(f"context_mask must be (B, T_k), got {tuple(context_mask.shape)}")
            context_mask = key_padding_to_attention(context_mask)       # (B, 1, 1, T_k)
        return super().forward(x, context, context_mask, return_weights=return_weights)
