"""Canon #35: grouped-query attention (GQA), with multi-query attention (MQA) as its H_kv = 1 case.

Plan: project queries to H heads but keys/values to only H_kv heads (that is the point: the KV cache
shrinks by H / H_kv). RoPE rotates q and k, the new k, v go into the cache with H_kv heads, and only
then each kv head is repeated n_rep = H / H_kv times (query head h reads kv head h // n_rep) so the
ordinary attention kernel runs. H_kv = H is plain MHA, H_kv = 1 is MQA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from canon_refs.transformer.attention import scaled_dot_product_attention
from canon_refs.transformer.masks import causal_mask, combine_masks

if TYPE_CHECKING:
    from canon_refs.transformer.kv_cache import KVCache
    from canon_refs.transformer.positional import RotaryEmbedding

__all__ = ["GroupedQueryAttention", "repeat_kv"]


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Repeat each key/value head ``n_rep`` times: ``(B, H_kv, T, d_h) -> (B, H_kv·n_rep, T, d_h)``."""
    if n_rep == 1:
        return x
    B, H_kv, T, d_h = x.shape
    x = x[:, :, None].expand(B, H_kv, n_rep, T, d_h)  # (B, H_kv, n_rep, T, d_h)
    return x.reshape(B, H_kv * n_rep, T, d_h)  # (B, H, T, d_h)


class GroupedQueryAttention(nn.Module):
    """Causal-capable self-attention with ``n_heads`` query heads sharing ``n_kv_heads`` key/value heads."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, *, bias: bool = False,
                 dropout: float = 0.0, rope: RotaryEmbedding | None = None) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = d_model // n_heads
        self.dropout_p = dropout
        self.rope = rope
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, *, is_causal: bool = False,
                kv_cache: KVCache | None = None, positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention of ``x (B, T_q, d)``; returns ``(B, T_q, d)`` [, weights ``(B, H, T_q, T_k)``]."""
        B, T_q, _ = x.shape
        d_h = self.head_dim
        q = self.q_proj(x).view(B, T_q, self.n_heads, d_h).transpose(1, 2)  # (B, H, T_q, d_h)
        k = self.k_proj(x).view(B, T_q, self.n_kv_heads, d_h).transpose(1, 2)  # (B, H_kv, T_q, d_h)
        v = self.v_proj(x).view(B, T_q, self.n_kv_heads, d_h).transpose(1, 2)  # (B, H_kv, T_q, d_h)

        past = kv_cache.length if kv_cache is not None else 0
        if self.rope is not None:
            if positions is None:
                positions = torch.arange(past, past + T_q, device=x.device)
            q = self.rope(q, positions)
            k = self.rope(k, positions)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H_kv, T_k, d_h)
        T_k = k.shape[2]
        k = repeat_kv(k, self.n_rep)  # (B, H, T_k, d_h)
        v = repeat_kv(v, self.n_rep)  # (B, H, T_k, d_h)

        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]  # (B, 1, T_q, T_k)
        if is_causal:
            causal = causal_mask(T_q, T_k, device=x.device)  # (T_q, T_k)
            if mask is None or mask.dtype == torch.bool:
                mask = combine_masks(mask, causal)
            else:
                mask = mask.masked_fill(~causal, torch.finfo(mask.dtype).min)

        dropout_p = self.dropout_p if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout_p, return_weights=True)
        out = self.out_proj(out.transpose(1, 2).reshape(B, T_q, self.n_heads * d_h))  # (B, T_q, d)
        if return_weights:
            return out, weights
        return out
