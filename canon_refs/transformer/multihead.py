"""Canon #26 multi-head attention and #28 cross-attention, on top of #25's attention and #27's masks.

``MultiHeadAttention`` projects the input to queries, keys and values of width ``d``, splits them into
``H`` heads of width ``d_h = d // H``, runs scaled dot-product attention in every head at once, merges
the heads back and applies an output projection. With ``context`` it attends to another sequence
(cross-attention); ``CrossAttention`` is that use with a key-padding mask over the context.

The subtle point is the head split. ``(B, T, d) -> (B, T, H, d_h) -> (B, H, T, d_h)`` keeps each
head's ``d_h`` features contiguous inside ``d``; ``view(B, H, T, d_h)`` straight away gives the same
shape but mixes tokens into heads, and the merge must undo the split exactly
(``transpose(1, 2).reshape``, never ``.view`` after the transpose). The second one is the offset with
a KV cache: the ``T_q`` new queries are the last of ``T_k = past + T_q`` keys, so the causal mask is
``causal_mask(T_q, T_k)`` (bottom-right) and the default RoPE positions are ``arange(past, past + T_q)``.

Shape letters: ``B`` batch, ``T_q`` queries, ``T_k`` keys attended to (context tokens, or cached +
new tokens), ``T_s`` new source tokens projected in this call, ``d`` model width, ``d_c`` context
width, ``H`` heads, ``d_h`` head width.

Trade-off: three ``d x d`` projections instead of one fused ``d x 3d`` (``nn.MultiheadAttention``'s
``in_proj_weight``), because cross-attention needs keys and values from a ``d_c``-wide context that the
queries do not see, and LoRA (#38) wraps ``q_proj``/``v_proj`` by name. The cost is three matmul
launches instead of one, the same ``4·d²`` weights either way (``+ 4·d`` biases).

What to test: agreement with ``nn.MultiheadAttention`` (fused ``in_proj_weight`` for self-attention,
separate ``q/k/v_proj_weight`` with ``kdim``/``vdim`` for cross-attention; torch's bool masks are
inverted), causality with ``is_causal``, ``H = 1`` against #25 on the projections, the split/merge round
trip, token permutation equivariance, ``gradcheck``, masked context tokens having no effect, and an
all-masked context row giving ``out_proj.bias``.
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
        _check_sizes(d_model, n_heads, d_context, dropout)
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.d_context = d_model if d_context is None else d_context
        self.dropout_p = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.v_proj = nn.Linear(self.d_context, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.rope = rope

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, d) -> (B, H, T, d_h)``; head ``h`` holds features ``[h·d_h, (h+1)·d_h)`` of every token.

        Raises ValueError if ``x`` is not 3-D with last dim ``d_model``.
        """
        _check_shape(x, "x", (None, None, self.d_model), "(B, T, d_model)")
        B, T, _ = x.shape
        heads = x.reshape(B, T, self.n_heads, self.head_dim)             # (B, T, H, d_h)
        return heads.transpose(1, 2)                                     # (B, H, T, d_h)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(B, H, T, d_h) -> (B, T, d)``, the exact inverse of ``split_heads``.

        Raises ValueError if ``x`` is not ``(B, n_heads, T, head_dim)``.
        """
        _check_shape(x, "x", (None, self.n_heads, None, self.head_dim), "(B, H, T, d_h)")
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)             # (B, T, d)

    def _attention_mask(self, mask: Tensor | None, is_causal: bool, T_q: int, T_k: int,
                        device: torch.device) -> Tensor | None:
        """``mask`` (3-D read as ``(B, 1, T_q, T_k)``) ANDed with the causal mask when ``is_causal``; the
        result broadcasts to ``(B, H, T_q, T_k)`` (bool allow-mask or float bias) or is None."""
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)                                     # (B, 1, T_q, T_k)
        if not is_causal:
            return mask
        causal = causal_mask(T_q, T_k, device=device)                    # (T_q, T_k)
        if mask is None or mask.dtype == torch.bool:
            return combine_masks(mask, causal)                           # (..., T_q, T_k)
        return mask.masked_fill(~causal, torch.finfo(mask.dtype).min)    # (..., T_q, T_k)

    @staticmethod
    def _rotate(rope: RotaryEmbedding, q: Tensor, k: Tensor, positions: Tensor | None,
                past: int) -> tuple[Tensor, Tensor]:
        """RoPE (#34) on self-attention's new queries and keys ``(B, H, T_q, d_h)``, before they enter the
        cache; ``positions`` defaults to ``arange(past, past + T_q)``, after the cached tokens."""
        if positions is None:
            positions = torch.arange(past, past + q.shape[2],            # (T_q,)
                                     device=q.device)
        return rope(q, positions), rope(k, positions)                    # (B, H, T_q, d_h), (B, H, T_q, d_h)

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, kv_cache: KVCache | None = None,
                positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``x`` to itself (``context=None``) or to ``context``.

        Args:
            x: ``(B, T_q, d)`` queries (and keys/values for self-attention).
            context: ``(B, T_k, d_c)`` keys/values source for cross-attention, or None.
            mask: ``(T_q, T_k)``, ``(B, T_q, T_k)`` (the same for every head) or ``(B, 1|H, 1|T_q, T_k)``
                (size-1 dims broadcast), bool allow-mask or float bias. ``T_k`` counts cached + new keys.
                Key padding ``(B, T_k)`` must go through ``key_padding_to_attention`` (#27) first. A query
                with no allowed key gets a zero attention output, so its result is ``out_proj.bias``.
            is_causal: AND ``causal_mask(T_q, T_k)`` (#27), offset by the cache length.
            kv_cache: a ``KVCache`` (#33), used duck-typed (``length``, ``update(k, v)``): the new keys
                and values are appended and attention runs over all cached keys.
            positions: ``(T_q,)`` or ``(B, T_q)`` long positions for RoPE; default
                ``arange(past, past + T_q)``. Ignored when the module has no ``rope``.
            return_weights: also return the attention weights ``(B, H, T_q, T_k)``.

        Returns ``(B, T_q, d)`` or ``(out, weights)``.

        Raises ValueError for a bad ``x`` or ``context`` shape, a batch mismatch, ``kv_cache`` or ``rope``
        together with ``context``, a bad ``positions`` shape or a mask that does not fit
        ``(B, H, T_q, T_k)``; a call that raises leaves ``kv_cache`` unchanged.
        """
        self._check_inputs(x, context, mask, kv_cache, positions)
        B, T_q, _ = x.shape
        past = 0 if kv_cache is None else int(kv_cache.length)
        T_k = past + T_q if context is None else context.shape[1]
        attn_mask = self._attention_mask(mask, is_causal, T_q, T_k, x.device)
        source = x if context is None else context
        q = self.split_heads(self.q_proj(x))                             # (B, H, T_q, d_h)
        k = self.split_heads(self.k_proj(source))                        # (B, H, T_s, d_h)
        v = self.split_heads(self.v_proj(source))                        # (B, H, T_s, d_h)
        if self.rope is not None:
            q, k = self._rotate(self.rope, q, k, positions, past)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)                                 # (B, H, T_k, d_h), (B, H, T_k, d_h)
        dropout_p = self.dropout_p if self.training else 0.0
        heads, weights = scaled_dot_product_attention(                   # (B, H, T_q, d_h), (B, H, T_q, T_k)
            q, k, v, attn_mask, dropout_p=dropout_p, return_weights=True)
        out = self.out_proj(self.merge_heads(heads))                     # (B, T_q, d)
        if return_weights:
            return out, weights
        return out

    def _check_inputs(self, x: Tensor, context: Tensor | None, mask: Tensor | None, kv_cache: KVCache | None,
                      positions: Tensor | None) -> None:
        """ValueError for every input problem of ``forward``, raised before the cache is touched."""
        _check_shape(x, "x", (None, None, self.d_model), "(B, T_q, d_model)")
        if context is not None:
            if kv_cache is not None:
                raise ValueError("kv_cache is for self-attention only; it cannot be combined with context")
            if self.rope is not None:
                raise ValueError("rope is for self-attention only; it cannot be combined with context")
            if context.dim() != 3 or context.shape[-1] != self.d_context:
                raise ValueError(
                    f"context must be (B, T_k, d_context={self.d_context}), got shape {tuple(context.shape)}")
            if context.shape[0] != x.shape[0]:
                raise ValueError(f"context batch size {context.shape[0]} differs from x batch size {x.shape[0]}")
        if self.rope is not None and positions is not None:
            B, T_q, _ = x.shape
            if positions.shape not in ((T_q,), (B, T_q)):
                raise ValueError(f"positions must be (T_q,) or (B, T_q) = ({B}, {T_q}), got {tuple(positions.shape)}")
        if mask is not None:
            past = 0 if kv_cache is None else int(kv_cache.length)
            T_k = past + x.shape[1] if context is None else context.shape[1]
            self._check_mask(mask, x.shape[0], x.shape[1], T_k)

    def _check_mask(self, mask: Tensor, B: int, T_q: int, T_k: int) -> None:
        """ValueError unless ``mask`` is bool or float and fits ``(B, H, T_q, T_k)`` as documented."""
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise ValueError(f"mask must be bool (allow-mask) or floating (bias), got {mask.dtype}")
        if mask.dim() not in (2, 3, 4):
            raise ValueError(f"mask must be (T_q, T_k), (B, T_q, T_k) or (B, 1|H, 1|T_q, T_k), got {tuple(mask.shape)}")
        shape = mask.shape if mask.dim() != 3 else (mask.shape[0], 1, *mask.shape[1:])
        target = (B, self.n_heads, T_q, T_k)[-len(shape):]
        if any(m not in (1, t) for m, t in zip(shape, target)):
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not fit (B, H, T_q, T_k) = "
                             f"{(B, self.n_heads, T_q, T_k)}; 2-D masks are (T_q, T_k), convert key "
                             f"padding (B, T_k) with key_padding_to_attention")


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
        _check_context(context, context_mask)
        mask = None
        if context_mask is not None:
            mask = key_padding_to_attention(context_mask)                # (B, 1, 1, T_k)
        return super().forward(x, context, mask, return_weights=return_weights)


def _check_sizes(d_model: int, n_heads: int, d_context: int | None, dropout: float) -> None:
    """ValueError for the constructor arguments ``MultiHeadAttention`` rejects."""
    if d_model < 1:
        raise ValueError(f"d_model must be >= 1, got {d_model}")
    if n_heads < 1 or d_model % n_heads != 0:
        raise ValueError(f"n_heads must be >= 1 and divide d_model={d_model}, got n_heads={n_heads}")
    if d_context is not None and d_context < 1:
        raise ValueError(f"d_context must be >= 1 or None, got {d_context}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def _check_shape(x: Tensor, name: str, sizes: tuple[int | None, ...], layout: str) -> None:
    """ValueError unless ``x`` has ``len(sizes)`` dims and every non-None size matches."""
    if x.dim() != len(sizes) or any(s is not None and s != n for s, n in zip(sizes, x.shape)):
        raise ValueError(f"{name} must be {layout} = {sizes}, got shape {tuple(x.shape)}")


def _check_context(context: Tensor | None, context_mask: Tensor | None) -> None:
    """ValueError if ``context`` is missing or ``context_mask`` is not ``(B, T_k)``."""
    if context is None:
        raise ValueError("context is required for cross-attention, got None")
    if context_mask is not None and context_mask.shape != context.shape[:2]:
        raise ValueError(f"context_mask must be (B, T_k) = {tuple(context.shape[:2])}, got {tuple(context_mask.shape)}")
