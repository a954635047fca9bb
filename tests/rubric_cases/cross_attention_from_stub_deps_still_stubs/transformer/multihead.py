"""Multi-head attention (#26) and cross-attention (#28), built on scaled dot-product attention (#25).

Plan: project x (B, T_q, d) to queries and the context (B, T_k, d_c) to keys and values, split the
width into H heads of d_h = d / H, (B, T, d) -> (B, H, T, d_h), run attention per head, merge the
heads back, (B, H, T_q, d_h) -> (B, T_q, d), and project out. Self-attention uses x as its own
context, may be causal (a bottom-right aligned mask, offset by the cache length), may rotate queries
and keys with RoPE before they enter the KV cache, and appends the new keys to the cache.

Trade-off: one (d, d) projection per role, split by reshape, instead of H small projections, because
one matmul per role is faster and the split is free; merge_heads needs .reshape rather than .view
since the transposed tensor is not contiguous.

What I would test: split then merge is the identity; H = 1 equals plain attention; a causal row never
sees later keys; the cached, one-token-at-a-time output equals the full forward; cross-attention with
a padded context ignores the padding, and a row with no real context token outputs out_proj.bias.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

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
    """Multi-head (self- or cross-) attention with optional causal mask, KV cache and RoPE.

    Args:
        d_model: model width ``d``; queries, keys, values and the output all have width ``d``.
        n_heads: ``H``; must divide ``d_model`` (``head_dim = d_model // n_heads``).
        d_context: width ``d_c`` of a ``context`` sequence for cross-attention (``k_proj``/``v_proj`` map
            ``d_c -> d``); ``None`` means ``d_model``.
        bias: biases in the four projections.
        dropout: dropout probability on the attention weights, applied in training mode only.
        rope: a ``RotaryEmbedding`` (#34), used duck-typed as ``rope(x (B, H, T, d_h), positions)``;
            applied to queries and keys of self-attention before they enter the cache.

    Attributes: ``q_proj (d -> d)``, ``k_proj``, ``v_proj (d_c -> d)``, ``out_proj (d -> d)``, ``n_heads``,
    ``head_dim``, ``d_model``, ``d_context``, ``dropout_p``, ``rope``. Parameters are float32.

    Raises ValueError for ``d_model % n_heads != 0``, non-positive sizes and ``dropout`` outside [0, 1).
    Source: Vaswani et al. 2017, section 3.2.2.
    """

    def __init__(self, d_model: int, n_heads: int, *, d_context: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope: RotaryEmbedding | None = None) -> None:
        super().__init__()
        if d_model <= 0 or n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a positive multiple of n_heads ({n_heads})")
        if d_context is not None and d_context <= 0:
            raise ValueError(f"d_context must be positive, got {d_context}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = d_model // n_heads
        self.d_context = d_model if d_context is None else d_context
        self.dropout_p = dropout
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.v_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, d) -> (B, H, T, d_h)``; head ``h`` holds features ``[h·d_h, (h+1)·d_h)`` of every token.

        Raises ValueError if ``x`` is not 3-D with last dim ``d_model``.
        """
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        return x.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(B, H, T, d_h) -> (B, T, d)``, the exact inverse of ``split_heads``.

        Raises ValueError if ``x`` is not ``(B, n_heads, T, head_dim)``.
        """
        if x.ndim != 4 or x.shape[1] != self.n_heads or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must be (B, {self.n_heads}, T, {self.head_dim}), got {tuple(x.shape)}")
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, d)

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache: KVCache | None = None,
                positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``x`` to itself (``context=None``) or to ``context``.

        Args:
            x: ``(B, T_q, d)`` queries (and keys/values for self-attention).
            context: ``(B, T_k, d_c)`` keys/values source for cross-attention, or None.
            mask: ``(T_q, T_k)``, ``(B, T_q, T_k)`` or ``(B, 1|H, T_q, T_k)`` (size-1 dims broadcast), bool
                allow-mask or float bias. ``T_k`` counts cached + new keys. Key padding ``(B, T_k)`` must
                go through ``key_padding_to_attention`` (#27) first.
            is_causal: AND ``causal_mask(T_q, T_k)`` (#27), offset by the cache length.
            kv_cache: a ``KVCache`` (#33), used duck-typed (``length``, ``update(k, v)``): the new keys
                and values are appended and attention runs over all cached keys.
            positions: ``(T_q,)`` or ``(B, T_q)`` long positions for RoPE; default
                ``arange(past, past + T_q)``. Ignored when the module has no ``rope``.
            return_weights: also return the attention weights ``(B, H, T_q, T_k)``.

        Returns ``(B, T_q, d)`` or ``(out, weights)``.

        Raises ValueError (before the cache is touched) for a bad ``x`` or ``context`` shape, a batch
        mismatch, ``kv_cache`` or ``rope`` together with ``context``, a bad ``positions`` shape or a mask
        that does not fit ``(B, H, T_q, T_k)``.
        """
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T_q, {self.d_model}), got {tuple(x.shape)}")
        cross = context is not None
        if cross:
            if context.ndim != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != self.d_context:
                raise ValueError(f"context must be (B, T_k, {self.d_context}), got {tuple(context.shape)}")
            if kv_cache is not None or self.rope is not None:
                raise ValueError("kv_cache and rope are for self-attention only, not with a context")
        B, T_q, _ = x.shape
        past = kv_cache.length if kv_cache is not None else 0
        source = context if cross else x
        q = self.split_heads(self.q_proj(x))  # (B, H, T_q, d_h)
        k = self.split_heads(self.k_proj(source))  # (B, H, T_new, d_h)
        v = self.split_heads(self.v_proj(source))  # (B, H, T_new, d_h)
        if self.rope is not None:
            if positions is None:
                positions = torch.arange(past, past + T_q, device=x.device)  # (T_q,)
            elif positions.shape not in ((T_q,), (B, T_q)):
                raise ValueError(f"positions must be ({T_q},) or ({B}, {T_q}), got {tuple(positions.shape)}")
            q = self.rope(q, positions)  # (B, H, T_q, d_h)
            k = self.rope(k, positions)  # (B, H, T_new, d_h)
        T_k = past + k.shape[2]
        if mask is not None and mask.ndim == 3:
            mask = mask[:, None]  # (B, 1, T_q, T_k)
        if mask is not None:
            try:
                torch.broadcast_shapes(mask.shape, (B, self.n_heads, T_q, T_k))
            except RuntimeError:
                raise ValueError(f"mask {tuple(mask.shape)} does not fit (B, H, T_q, T_k)") from None
            if mask.ndim > 4:
                raise ValueError(f"mask {tuple(mask.shape)} does not fit (B, H, T_q, T_k)")
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H, T_k, d_h), (B, H, T_k, d_h)
        if is_causal:
            causal = causal_mask(T_q, T_k, device=x.device)  # (T_q, T_k)
            mask = causal if mask is None else (combine_masks(mask, causal) if mask.dtype == torch.bool
                                                 else mask.masked_fill(~causal, torch.finfo(mask.dtype).min))
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=self.dropout_p if self.training else 0.0,
                                                    return_weights=True)  # (B, H, T_q, d_h), (B, H, T_q, T_k)
        out = self.out_proj(self.merge_heads(out))  # (B, T_q, d)
        return (out, weights) if return_weights else out


class CrossAttention(MultiHeadAttention):
    """Cross-attention (#28): queries from ``x``, keys and values from ``context``, key-padding mask.

    Args: ``d_model`` (query and output width), ``n_heads``, ``d_context`` (context width ``d_c``, default
    ``d_model``), ``bias``, ``dropout`` as in ``MultiHeadAttention``; no RoPE, no cache, never causal.
    Raises ValueError for invalid sizes (see ``MultiHeadAttention``).
    Source: the encoder-decoder attention of Vaswani et al. 2017; Flamingo / Q-Former resamplers.
    """

    def __init__(self, d_model: int, n_heads: int, d_context: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, d_context=d_context, bias=bias, dropout=dropout)

    def forward(self, x: Tensor, context: Tensor, context_mask: Tensor | None = None, *,  # type: ignore[override]
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``x (B, T_q, d)`` attends to ``context (B, T_k, d_c)``; returns ``(B, T_q, d)`` [, weights].

        ``context_mask`` is ``(B, T_k)`` bool|int, ``True``/1 = real context token. A batch row with no real
        context token gets zero attention output, so its result is ``out_proj.bias``.
        Raises ValueError if ``context`` is None, for a batch mismatch, a context width other than
        ``d_context`` or a ``context_mask`` that is not ``(B, T_k)``.
        """
        if context is None:
            raise ValueError("CrossAttention needs a context")
        mask = None
        if context_mask is not None:
            if context_mask.shape != context.shape[:2]:
                raise ValueError(f"context_mask must be (B, T_k) = {tuple(context.shape[:2])}, got "
                                 f"{tuple(context_mask.shape)}")
            mask = key_padding_to_attention(context_mask != 0)  # (B, 1, 1, T_k)
        return super().forward(x, context, mask, return_weights=return_weights)
