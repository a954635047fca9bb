"""Multi-head attention (self and cross) built on my scaled dot-product attention and masks.

Plan: project x to queries and the source (x itself, or a context sequence) to keys and values with
three linear maps; cut the model width into H heads of width d_h = d / H and move the head axis in
front of time; optionally rotate queries and keys (RoPE) and append the new keys and values to a KV
cache; run attention once over all heads; glue the heads back together and apply the output map.
Masks are normalised to four dims (B or 1, 1 or H, T_q or 1, T_k) and the causal mask is ANDed in
(or filled into a float bias), never added, so the attention sees a single mask.

Subtle point: the layout. The width axis of a projection is head-major (head h owns columns
h*d_h .. (h+1)*d_h), so splitting is unflatten(-1, (H, d_h)) followed by swapping time and heads,
and merging is the exact inverse; swapping before unflattening would mix tokens across heads. With
a cache of length P the T_q new queries sit at absolute positions P .. P + T_q - 1, so the causal
mask is causal_mask(T_q, P + T_q) (bottom-right aligned) and RoPE gets those positions.

Shapes: x (B, T_q, d); context (B, T_k, d_c); projections (B, T, d); heads (B, H, T, d_h) with
d_h = d / H; weights (B, H, T_q, T_k); output (B, T_q, d). A key padding mask (B, T_k) becomes
(B, 1, 1, T_k) through key_padding_to_attention first.

Trade-off: three separate nn.Linear maps instead of one fused (3d, d) in_proj, because cross
attention needs keys and values from a different width d_c and the separate maps make that free;
the fused version saves two small kernel launches, which does not matter at these sizes.

What I would test: agreement with nn.MultiheadAttention holding the same weights (no mask, causal,
key padding, separate kdim/vdim), causality (changing the future leaves the past), H = 1 equal to
plain attention on the projections, merge(split(x)) == x, token permutation equivariance, gradcheck,
cached decoding equal to the full forward, and fully masked queries giving out_proj.bias.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from canon_refs.transformer.attention import scaled_dot_product_attention
from canon_refs.transformer.masks import causal_mask, key_padding_to_attention

if TYPE_CHECKING:
    from canon_refs.transformer.kv_cache import KVCache
    from canon_refs.transformer.positional import RotaryEmbedding


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017, section 3.2.2).

    Self-attention by default; pass ``context`` (B, T_k, d_context) for cross-attention. Raises
    ValueError when d_model is not divisible by n_heads, or dropout is outside [0, 1).
    """

    def __init__(self, d_model: int, n_heads: int, *, d_context: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope: RotaryEmbedding | None = None) -> None:
        """Create q/k/v/out projections; k and v read d_context features (default d_model)."""
        super().__init__()
        if d_model < 1:
            raise ValueError(f"d_model must be >= 1, got {d_model}")
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"n_heads must be >= 1 and divide d_model = {d_model}, got {n_heads}")
        if d_context is not None and d_context < 1:
            raise ValueError(f"d_context must be >= 1, got {d_context}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        source_width = d_model if d_context is None else d_context
        self.d_model = d_model
        self.d_context = source_width
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(source_width, d_model, bias=bias)
        self.v_proj = nn.Linear(source_width, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.rope = rope

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, d) -> (B, H, T, d_h): head h takes columns h*d_h to (h+1)*d_h."""
        return x.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)  # (B, H, T, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, T, d_h) -> (B, T, d), the exact inverse of ``split_heads``."""
        return x.transpose(1, 2).flatten(2)                                    # (B, T, d)

    def _mask4d(self, mask: Tensor, batch: int, T_q: int, T_k: int) -> Tensor:
        """A (T_q, T_k), (B, 1|T_q, T_k) or (B, 1|H, 1|T_q, T_k) bool/float mask as a 4-D mask."""
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            raise ValueError(f"mask must be a bool allow-mask or a float bias, got {mask.dtype}")
        if mask.dim() == 2:
            ok = tuple(mask.shape) == (T_q, T_k)
            full = mask[None, None]                                            # (1, 1, T_q, T_k)
        elif mask.dim() == 3:
            ok = mask.shape[0] in (1, batch) and mask.shape[1] in (1, T_q) and mask.shape[2] == T_k
            full = mask[:, None]                                               # (B, 1, T_m, T_k)
        elif mask.dim() == 4:
            ok = (mask.shape[0] in (1, batch) and mask.shape[1] in (1, self.n_heads)
                  and mask.shape[2] in (1, T_q) and mask.shape[3] == T_k)
            full = mask
        else:
            ok, full = False, mask
        if not ok:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not fit (T_q, T_k) = ({T_q}, {T_k}), "
                             f"(B, T_q, T_k) or (B, 1|H, T_q, T_k) with B = {batch}, H = {self.n_heads}; "
                             "convert key padding (B, T_k) with key_padding_to_attention")
        return full

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache: KVCache | None = None,
                positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from x (B, T_q, d) to itself or to ``context`` (B, T_k, d_context) -> (B, T_q, d).

        ``mask`` is (T_q, T_k), (B, T_q, T_k) or (B, 1|H, T_q, T_k) (a size-1 query axis broadcasts,
        as in key padding (B, 1, 1, T_k)), bool allow-mask or float bias;
        ``is_causal`` ANDs a bottom-right causal mask in. ``kv_cache`` (self-attention only) receives
        the new keys and values and attention runs over everything cached. ``positions`` (T_q,) or
        (B, T_q) feed RoPE, default P .. P + T_q - 1 with P the cache length. Returns the weights
        (B, H, T_q, T_k) too when ``return_weights``. Raises ValueError for a wrong x or context
        shape, a batch mismatch, kv_cache or rope with a context, bad positions or a bad mask,
        always before the cache is touched.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got shape {tuple(x.shape)}")
        batch, T_q = x.shape[0], x.shape[1]
        if context is not None:
            if kv_cache is not None:
                raise ValueError("kv_cache is for self-attention only; it cannot be used with a context")
            if self.rope is not None:
                raise ValueError("rope is for self-attention only; it cannot be used with a context")
            if context.dim() != 3 or context.shape[-1] != self.d_context:
                raise ValueError(f"context must be (B, T_k, {self.d_context}), got {tuple(context.shape)}")
            if context.shape[0] != batch:
                raise ValueError(f"context has batch {context.shape[0]} but x has {batch}")
            source = context
        else:
            if self.d_context != self.d_model:
                raise ValueError(f"context (B, T_k, {self.d_context}) is required: d_context != d_model")
            source = x
        past = kv_cache.length if kv_cache is not None else 0
        T_k = past + source.shape[1]
        if self.rope is not None:
            if positions is None:
                positions = torch.arange(past, past + T_q, device=x.device)    # (T_q,)
            if tuple(positions.shape) not in ((T_q,), (batch, T_q)):
                raise ValueError(f"positions must be ({T_q},) or ({batch}, {T_q}), "
                                 f"got {tuple(positions.shape)}")
        if mask is not None:
            mask = self._mask4d(mask, batch, T_q, T_k)
        if is_causal:
            allowed = causal_mask(T_q, T_k, device=x.device)                   # (T_q, T_k)
            if mask is None:
                mask = allowed
            elif mask.dtype == torch.bool:
                mask = mask & allowed
            else:
                mask = mask.masked_fill(~allowed, torch.finfo(mask.dtype).min)

        q = self.split_heads(self.q_proj(x))                                   # (B, H, T_q, d_h)
        k = self.split_heads(self.k_proj(source))                              # (B, H, T_s, d_h)
        v = self.split_heads(self.v_proj(source))                              # (B, H, T_s, d_h)
        if self.rope is not None:
            q = self.rope(q, positions)                                        # (B, H, T_q, d_h)
            k = self.rope(k, positions)                                        # (B, H, T_s, d_h)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)                                       # (B, H, T_k, d_h), (B, H, T_k, d_h)
        heads, weights = scaled_dot_product_attention(                         # (B, H, T_q, d_h), (B, H, T_q, T_k)
            q, k, v, mask, dropout_p=self.dropout if self.training else 0.0, return_weights=True)
        out = self.out_proj(self.merge_heads(heads))                           # (B, T_q, d)
        if return_weights:
            return out, weights
        return out


class CrossAttention(MultiHeadAttention):
    """Queries from x (B, T_q, d), keys and values from a context (B, T_k, d_context), with an
    optional key padding mask over the context. Raises ValueError like ``MultiHeadAttention``."""

    def __init__(self, d_model: int, n_heads: int, d_context: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0) -> None:
        """Same projections as MultiHeadAttention, with k/v reading d_context features."""
        super().__init__(d_model, n_heads, d_context=d_context, bias=bias, dropout=dropout)

    def forward(self, x: Tensor, context: Tensor, context_mask: Tensor | None = None, *,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """(B, T_q, d) attending to context (B, T_k, d_context) -> (B, T_q, d) [, weights (B, H, T_q, T_k)].

        ``context_mask`` (B, T_k), bool or 0/1, marks real context tokens. A row whose context is fully
        masked gets zeros before out_proj, so its output is out_proj.bias. Raises ValueError for a
        missing context, a batch or width mismatch, or a context_mask that is not (B, T_k).
        """
        if context is None:
            raise ValueError("context is required for cross-attention")
        if context.dim() != 3 or context.shape[-1] != self.d_context or context.shape[0] != x.shape[0]:
            raise ValueError(f"context must be ({x.shape[0]}, T_k, {self.d_context}), "
                             f"got {tuple(context.shape)}")
        mask = None
        if context_mask is not None:
            if tuple(context_mask.shape) != (context.shape[0], context.shape[1]):
                raise ValueError(f"context_mask must be ({context.shape[0]}, {context.shape[1]}), "
                                 f"got {tuple(context_mask.shape)}")
            mask = key_padding_to_attention(context_mask)                      # (B, 1, 1, T_k)
        return super().forward(x, context, mask, return_weights=return_weights)
