"""Grouped-query attention by grouping the *queries* instead of repeating the keys and values.

Queries are reshaped to ``(B, H_kv, n_rep, T_q, d_h)`` and keys/values get a singleton group axis
``(B, H_kv, 1, T_k, d_h)``, so the attention call broadcasts one key/value head over its ``n_rep`` query
heads without copying it. ``repeat_kv`` is ``repeat_interleave``. The causal mask is built with
``tril(diagonal=T_k - T_q)`` rather than #27's ``causal_mask``.
Shape letters: ``B`` batch, ``G`` = ``H_kv`` groups, ``R`` = ``n_rep``, ``T_q``/``T_k`` queries/keys, ``d_h``.
Trade-off: no ``(B, H, T_k, d_h)`` copy of the keys, instead of the simpler repeated layout, because the
copy grows with the context; masks must then be regrouped too. Test: H_kv = H against multi-head
attention, MQA against an explicit repeat_interleave, and cached decoding against the full forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from canon_refs.transformer.attention import scaled_dot_product_attention

if TYPE_CHECKING:
    from canon_refs.transformer.kv_cache import KVCache
    from canon_refs.transformer.positional import RotaryEmbedding

__all__ = ["GroupedQueryAttention", "repeat_kv"]


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """``(B, G, T, d_h) -> (B, G*n_rep, T, d_h)`` via ``repeat_interleave``; ValueError for bad input."""
    if isinstance(n_rep, bool) or not isinstance(n_rep, int) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive int, got {n_rep!r}")
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (B, H_kv, T, d_h), got {tuple(x.shape)}")
    return torch.repeat_interleave(x, n_rep, dim=1)                      # (B, G*n_rep, T, d_h)


class GroupedQueryAttention(nn.Module):
    """GQA with grouped queries; same API and errors as the reference."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, *, bias: bool = False,
                 dropout: float = 0.0, rope: RotaryEmbedding | None = None) -> None:
        super().__init__()
        if n_heads < 1 or d_model < 1 or d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
        if n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads={n_kv_heads} must be positive and divide n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.n_rep = n_heads // n_kv_heads
        self.dropout_p = dropout
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _grouped_mask(self, mask: Tensor | None, is_causal: bool, B: int, T_q: int, T_k: int) -> Tensor | None:
        """Mask broadcastable to ``(B, G, R, T_q, T_k)``."""
        H = self.n_heads
        if mask is not None:
            if mask.dtype != torch.bool and not mask.is_floating_point():
                raise ValueError(f"mask must be bool or float, got {mask.dtype}")
            if mask.dim() not in (2, 3, 4):
                raise ValueError(f"mask must be 2-D, 3-D or 4-D, got {tuple(mask.shape)}")
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)                                 # (B, 1, T_q, T_k)
            while mask.dim() < 4:
                mask = mask.unsqueeze(0)                                 # (1, ..., T_q, T_k)
            for size, want in zip(mask.shape, (B, H, T_q, T_k)):
                if size not in (1, want):
                    raise ValueError(f"mask shape {tuple(mask.shape)} does not fit {(B, H, T_q, T_k)}")
        if is_causal:
            causal = torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)  # (T_q, T_k)
            if mask is None:
                mask = causal[None, None]                                # (1, 1, T_q, T_k)
            elif mask.dtype == torch.bool:
                mask = mask & causal
            else:
                mask = mask.masked_fill(~causal, torch.finfo(mask.dtype).min)
        if mask is None:
            return None
        if mask.dim() == 4 and mask.shape[1] == H and H > 1:
            Bm, _, Qm, Km = mask.shape
            return mask.reshape(Bm, self.n_kv_heads, self.n_rep, Qm, Km)  # (B, G, R, T_q, T_k)
        return mask.unsqueeze(2)                                         # (B, 1, 1, T_q, T_k)

    def forward(self, x: Tensor, mask: Tensor | None = None, *, is_causal: bool = False,
                kv_cache: KVCache | None = None, positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``(B, T_q, d) -> (B, T_q, d)`` [, weights ``(B, H, T_q, T_k)``]; ValueError before any cache write."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T_q, _ = x.shape
        past = kv_cache.length if kv_cache is not None else 0
        grouped_mask = self._grouped_mask(mask, is_causal, B, T_q, past + T_q)
        G, R, d_h = self.n_kv_heads, self.n_rep, self.head_dim
        q = self.q_proj(x).reshape(B, T_q, self.n_heads, d_h).permute(0, 2, 1, 3)  # (B, H, T_q, d_h)
        k = self.k_proj(x).reshape(B, T_q, G, d_h).permute(0, 2, 1, 3)  # (B, G, T_q, d_h)
        v = self.v_proj(x).reshape(B, T_q, G, d_h).permute(0, 2, 1, 3)  # (B, G, T_q, d_h)
        if self.rope is not None:
            pos = positions if positions is not None else torch.arange(T_q) + past
            q, k = self.rope(q, pos), self.rope(k, pos)                  # (B, H, T_q, d_h), (B, G, T_q, d_h)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)                                 # (B, G, T_k, d_h), (B, G, T_k, d_h)
        qg = q.reshape(B, G, R, T_q, d_h)                                # (B, G, R, T_q, d_h)
        out, w = scaled_dot_product_attention(                           # (B, G, R, T_q, d_h), (B, G, R, T_q, T_k)
            qg, k.unsqueeze(2), v.unsqueeze(2), grouped_mask,
            dropout_p=self.dropout_p if self.training else 0.0, return_weights=True)
        merged = out.permute(0, 3, 1, 2, 4).reshape(B, T_q, self.d_model)  # (B, T_q, d)
        y = self.out_proj(merged)                                        # (B, T_q, d)
        if return_weights:
            return y, w.reshape(B, self.n_heads, T_q, w.shape[-1])
        return y
