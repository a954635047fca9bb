"""Alternative correct #26 / #28: per-head projections by einsum on the reshaped ``nn.Linear`` weights
(no split/merge on the hot path), masks normalised to 4-D with ``&`` for the causal AND, and a
``CrossAttention.forward`` that builds its own mask and calls the parent's forward.

Written differently from the reference on purpose (tests/impls); it must pass every test of
``transformer/multihead`` and ``transformer/cross_attention``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from canon_refs.transformer import attention as sdpa_module
from canon_refs.transformer import masks as mask_module


class MultiHeadAttention(nn.Module):
    """See canon_refs/transformer/multihead.py for the contract."""

    def __init__(self, d_model: int, n_heads: int, *, d_context: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope: Any = None) -> None:
        super().__init__()
        if n_heads <= 0 or d_model <= 0 or d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
        if dropout < 0 or dropout >= 1:
            raise ValueError("dropout must be in [0, 1)")
        self.n_heads, self.head_dim, self.d_model = n_heads, d_model // n_heads, d_model
        self.d_context = d_context or d_model
        self.attn_dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.v_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.rope = rope

    def split_heads(self, x: Tensor) -> Tensor:
        if x.ndim != 3 or x.size(-1) != self.d_model:
            raise ValueError("x must be (B, T, d_model)")
        return x.unflatten(-1, (self.n_heads, self.head_dim)).movedim(2, 1)  # (B, H, T, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        return x.movedim(1, 2).flatten(2)                                # (B, T, d)

    def _heads(self, proj: nn.Linear, x: Tensor) -> Tensor:
        """(B, T, d_in) -> (B, H, T, d_h) by einsum on the (H, d_h, d_in) view of the weight."""
        w = proj.weight.reshape(self.n_heads, self.head_dim, -1)         # (H, d_h, d_in)
        y = torch.einsum("btc,hec->bhte", x, w)                          # (B, H, T, d_h)
        if proj.bias is not None:
            y = y + proj.bias.reshape(self.n_heads, 1, self.head_dim)
        return y

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache: Any = None, positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        if x.ndim != 3 or x.size(-1) != self.d_model:
            raise ValueError("x has the wrong shape")
        n_b, t_q = x.shape[:2]
        if context is not None:
            if kv_cache is not None or self.rope is not None:
                raise ValueError("kv_cache and rope need self-attention, not a context")
            if context.ndim != 3 or context.size(-1) != self.d_context or context.size(0) != n_b:
                raise ValueError("context has the wrong shape")
        past = kv_cache.length if kv_cache is not None else 0
        t_k = context.size(1) if context is not None else past + t_q
        if positions is not None and self.rope is not None and tuple(positions.shape) not in ((t_q,), (n_b, t_q)):
            raise ValueError("positions has the wrong shape")
        if mask is not None:
            if mask.ndim == 2:
                mask = mask.reshape(1, 1, *mask.shape)                   # (1, 1, M_q, M_k)
            elif mask.ndim == 3:
                mask = mask.unsqueeze(1)                                 # (M_b, 1, M_q, M_k)
            if mask.ndim != 4 or not all(s in (1, f) for s, f in zip(mask.shape, (n_b, self.n_heads, t_q, t_k))):
                raise ValueError(f"mask shape {tuple(mask.shape)} is wrong")
        if is_causal:
            tri = mask_module.causal_mask(t_q, t_k, device=x.device)     # (T_q, T_k)
            if mask is None:
                mask = tri
            elif mask.dtype == torch.bool:
                mask = mask & tri
            else:
                mask = torch.where(tri, mask, torch.finfo(mask.dtype).min)
        src = x if context is None else context
        q = self._heads(self.q_proj, x)                                  # (B, H, T_q, d_h)
        k = self._heads(self.k_proj, src)                                # (B, H, T_s, d_h)
        v = self._heads(self.v_proj, src)                                # (B, H, T_s, d_h)
        if self.rope is not None:
            pos = positions if positions is not None else torch.arange(t_q) + past  # (T_q,)
            q, k = self.rope(q, pos), self.rope(k, pos)                  # (B, H, T_q, d_h), (B, H, T_s, d_h)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)                                 # (B, H, T_k, d_h), (B, H, T_k, d_h)
        p = self.attn_dropout if self.training else 0.0
        o, w = sdpa_module.scaled_dot_product_attention(q, k, v, mask, dropout_p=p, return_weights=True)  # (B, H, T_q, d_h), (B, H, T_q, T_k)
        w_o = self.out_proj.weight.reshape(self.d_model, self.n_heads, self.head_dim)  # (d, H, d_h)
        y = torch.einsum("bhte,dhe->btd", o, w_o)                        # (B, T_q, d)
        if self.out_proj.bias is not None:
            y = y + self.out_proj.bias
        return (y, w) if return_weights else y


class CrossAttention(MultiHeadAttention):
    """See canon_refs/transformer/multihead.py for the contract."""

    def __init__(self, d_model: int, n_heads: int, d_context: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_context=d_context, bias=bias, dropout=dropout)

    def forward(self, x: Tensor, context: Tensor, context_mask: Tensor | None = None, *,  # type: ignore[override]
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        if context is None:
            raise ValueError("context missing")
        if context.ndim != 3 or context.size(0) != x.size(0) or context.size(-1) != self.d_context:
            raise ValueError("context has the wrong shape")
        m = None
        if context_mask is not None:
            if tuple(context_mask.shape) != tuple(context.shape[:2]):
                raise ValueError("context_mask must be (B, T_k)")
            m = (context_mask != 0)[:, None, None, :]                    # (B, 1, 1, T_k)
        return super().forward(x, context, m, return_weights=return_weights)
