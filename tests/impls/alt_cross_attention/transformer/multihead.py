"""Alternative correct #28 (and #26): heads folded into the batch, ``(B*H, T, d_h)``, attention by
``torch.bmm`` through #25 on 3-D tensors; ``CrossAttention.forward`` is self-contained (it does not
call the parent's ``forward``) and expands the key-padding mask to ``(B*H, 1, T_k)`` itself.

Written differently from the reference on purpose (tests/impls); it must pass every test of
``transformer/cross_attention`` and ``transformer/multihead``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from canon_refs.transformer.attention import scaled_dot_product_attention
from canon_refs.transformer.masks import causal_mask


class MultiHeadAttention(nn.Module):
    """See canon_refs/transformer/multihead.py for the contract."""

    def __init__(self, d_model: int, n_heads: int, *, d_context: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope: Any = None) -> None:
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"n_heads {n_heads} must divide d_model {d_model}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout {dropout} not in [0, 1)")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.d_context = d_model if d_context is None else d_context
        self.p = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.v_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.rope = rope

    def split_heads(self, x: Tensor) -> Tensor:
        if x.dim() != 3 or x.shape[2] != self.d_model:
            raise ValueError("x must be (B, T, d_model)")
        n, t, _ = x.shape
        return x.view(n, t, self.n_heads, self.head_dim).permute(0, 2, 1, 3)  # (B, H, T, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        n, _, t, _ = x.shape
        return x.permute(0, 2, 1, 3).reshape(n, t, self.d_model)         # (B, T, d)

    def _fold(self, x: Tensor) -> Tensor:
        return self.split_heads(x).flatten(0, 1)                         # (B*H, T, d_h)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, n: int,
                return_weights: bool) -> Tensor | tuple[Tensor, Tensor]:
        """q (B*H, T_q, d_h), k/v (B*H, T_k, d_h), mask broadcastable to (B*H, T_q, T_k)."""
        p = self.p if self.training else 0.0
        o, w = scaled_dot_product_attention(q, k, v, mask, dropout_p=p, return_weights=True)  # (B*H, T_q, d_h), (B*H, T_q, T_k)
        o = o.unflatten(0, (n, self.n_heads))                            # (B, H, T_q, d_h)
        out = self.out_proj(self.merge_heads(o))                         # (B, T_q, d)
        return (out, w.unflatten(0, (n, self.n_heads))) if return_weights else out

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache: Any = None, positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        if x.dim() != 3 or x.shape[2] != self.d_model:
            raise ValueError("x must be (B, T_q, d_model)")
        n, t_q, _ = x.shape
        if context is not None and (kv_cache is not None or self.rope is not None):
            raise ValueError("kv_cache / rope cannot be used with a context")
        if context is not None and (context.dim() != 3 or context.shape[0] != n or context.shape[2] != self.d_context):
            raise ValueError("context must be (B, T_k, d_context)")
        if self.rope is not None and positions is not None and positions.shape not in ((t_q,), (n, t_q)):
            raise ValueError("positions must be (T_q,) or (B, T_q)")
        past = kv_cache.length if kv_cache is not None else 0
        t_k = past + t_q if context is None else context.shape[1]
        full = (n, self.n_heads, t_q, t_k)
        if mask is not None:
            if mask.dim() == 3:
                mask = mask[:, None]                                     # (M_b, 1, M_q, M_k)
            if mask.dim() not in (2, 4) or any(a not in (1, b) for a, b in zip(mask.shape[::-1], full[::-1])):
                raise ValueError(f"mask shape {tuple(mask.shape)} does not fit {full}")
        if is_causal:
            c = causal_mask(t_q, t_k, device=x.device)                   # (T_q, T_k)
            if mask is None:
                mask = c
            elif mask.dtype == torch.bool:
                mask = mask & c
            else:
                mask = mask.masked_fill(~c, torch.finfo(mask.dtype).min)
        src = x if context is None else context
        q, k, v = (self.split_heads(f(s)) for f, s in ((self.q_proj, x), (self.k_proj, src), (self.v_proj, src)))
        if self.rope is not None:
            pos = torch.arange(past, past + t_q) if positions is None else positions  # (T_q,) | (B, T_q)
            q, k = self.rope(q, pos), self.rope(k, pos)                  # (B, H, T_q, d_h), (B, H, T_q, d_h)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)                                 # (B, H, T_k, d_h), (B, H, T_k, d_h)
        if mask is not None and mask.dim() == 4:
            mask = mask.expand(full).flatten(0, 1)                       # (B*H, T_q, T_k)
        return self._attend(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), mask, n, return_weights)


class CrossAttention(MultiHeadAttention):
    """See canon_refs/transformer/multihead.py for the contract."""

    def __init__(self, d_model: int, n_heads: int, d_context: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_context=d_context, bias=bias, dropout=dropout)

    def forward(self, x: Tensor, context: Tensor, context_mask: Tensor | None = None, *,  # type: ignore[override]
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        if context is None:
            raise ValueError("context must be given")
        if x.dim() != 3 or x.shape[2] != self.d_model:
            raise ValueError("x must be (B, T_q, d_model)")
        if context.dim() != 3 or context.shape[0] != x.shape[0] or context.shape[2] != self.d_context:
            raise ValueError("context must be (B, T_k, d_context)")
        n, t_k = context.shape[:2]
        mask = None
        if context_mask is not None:
            if context_mask.shape != (n, t_k):
                raise ValueError("context_mask must be (B, T_k)")
            allowed = context_mask.bool()
            mask = allowed.repeat_interleave(self.n_heads, dim=0)[:, None, :]  # (B*H, 1, T_k)
        q = self._fold(self.q_proj(x))                                   # (B*H, T_q, d_h)
        k = self._fold(self.k_proj(context))                             # (B*H, T_k, d_h)
        v = self._fold(self.v_proj(context))                             # (B*H, T_k, d_h)
        return self._attend(q, k, v, mask, n, return_weights)
