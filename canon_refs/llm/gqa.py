"""Canon #35: grouped-query attention (GQA), with multi-query attention (MQA) as its ``H_kv = 1`` case.

``H`` query heads share ``H_kv`` key/value heads in groups of ``n_rep = H / H_kv``: query head ``h`` reads
key/value head ``h // n_rep``. Keys and values are projected to ``H_kv · d_h`` features only, cached with
``H_kv`` heads, and repeated to ``H`` heads just before the attention product. ``H_kv = H`` is ordinary
multi-head attention; ``H_kv = 1`` is MQA.

The subtle point is the repeat layout. ``repeat_kv`` must be ``repeat_interleave`` along the head dim,
``[k0, k0, k1, k1]`` for ``H = 4, H_kv = 2``, so that *consecutive* query heads form a group; tiling
with ``repeat`` gives ``[k0, k1, k0, k1]`` and pairs query head 1 with key head 1, the same shapes and a
different model (weights converted from Llama or Mistral would silently break). The second point is
where the repeat happens: after the cache update, so the cache holds ``H_kv`` heads. Repeating before
caching gives the right numbers and throws away the whole memory saving.

Shape letters: ``B`` batch, ``T_q`` new query tokens, ``T_k`` keys attended to (cached + new), ``d`` model
width, ``H`` query heads, ``H_kv`` key/value heads, ``n_rep = H / H_kv``, ``d_h`` head width.

Trade-off: ``repeat_kv`` materialises the repeated keys with ``expand(...).reshape`` instead of reshaping
the queries to ``(B, H_kv, n_rep, T_q, d_h)`` and broadcasting, because the repeated layout feeds the
same ``(B, H, T_q, T_k)`` attention call and masks as multi-head attention, and the copy is transient
(one layer's ``(B, H, T_k, d_h)`` at a time). The saving that matters is in the cache: ``H / H_kv`` times
fewer bytes, 8x for Llama-2-70B (64 query heads, 8 KV heads), which is why the KV cache formula of #33
has ``H_kv`` in it.

What to test: ``H_kv = H`` against multi-head attention with copied weights, MQA and ``H_kv = 2``
against an explicit ``repeat_interleave`` reference (and ``F.scaled_dot_product_attention(enable_gqa=True)``
where torch has it), ``repeat_kv`` against ``repeat_interleave``, the projection shapes, the cache holding
``H_kv`` heads (``H / H_kv`` times fewer bytes), causality, and cached decoding with and without RoPE
equal to the full causal forward.
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
    """Repeat each key/value head ``n_rep`` times in place: ``(B, H_kv, T, d_h) -> (B, H_kv·n_rep, T, d_h)``.

    Identical to ``torch.repeat_interleave(x, n_rep, dim=1)``: output head ``h`` is input head
    ``h // n_rep``. ``n_rep == 1`` returns ``x`` itself. Any dtype.
    Raises ValueError if ``x`` is not 4-D or ``n_rep < 1``.
    Source: the ``repeat_kv`` of HF Llama / Mistral (Ainslie et al. 2023, GQA).
    """
    _check_repeat(x, n_rep)
    if n_rep == 1:
        return x
    B, H_kv, T, d_h = x.shape
    grouped = x[:, :, None].expand(B, H_kv, n_rep, T, d_h)               # (B, H_kv, n_rep, T, d_h)
    return grouped.reshape(B, H_kv * n_rep, T, d_h)                      # (B, H_kv*n_rep, T, d_h)


class GroupedQueryAttention(nn.Module):
    """Causal-capable self-attention with ``n_heads`` query heads sharing ``n_kv_heads`` key/value heads.

    Args:
        d_model: model width ``d``.
        n_heads: query heads ``H``; must divide ``d_model`` (``head_dim = d_model // n_heads``).
        n_kv_heads: key/value heads ``H_kv >= 1``; must divide ``n_heads``.
        bias: biases in the four projections (Llama has none, hence the default).
        dropout: dropout on the attention weights, training mode only.
        rope: a ``RotaryEmbedding`` (#34), used duck-typed as ``rope(x (B, heads, T, d_h), positions)``,
            applied to queries and keys before the keys enter the cache.

    Attributes: ``q_proj (d -> H·d_h)``, ``k_proj``, ``v_proj (d -> H_kv·d_h)``, ``out_proj (H·d_h -> d)``,
    ``n_heads``, ``n_kv_heads``, ``n_rep``, ``head_dim``, ``rope``. Parameters are float32.

    Raises ValueError for ``d_model % n_heads != 0``, ``n_kv_heads < 1``, ``n_heads % n_kv_heads != 0`` and
    ``dropout`` outside [0, 1). Source: Ainslie et al. 2023, "GQA"; Shazeer 2019 for MQA.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, *, bias: bool = False,
                 dropout: float = 0.0, rope: RotaryEmbedding | None = None) -> None:
        super().__init__()
        _check_sizes(d_model, n_heads, n_kv_heads, dropout)
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = d_model // n_heads
        self.dropout_p = dropout
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        self.rope = rope

    def _split(self, x: Tensor, heads: int) -> Tensor:
        """``(B, T, heads·d_h) -> (B, heads, T, d_h)``."""
        B, T, _ = x.shape
        return x.reshape(B, T, heads, self.head_dim).transpose(1, 2)     # (B, heads, T, d_h)

    def _mask(self, mask: Tensor | None, is_causal: bool, T_q: int, T_k: int,
              device: torch.device) -> Tensor | None:
        """``mask`` (3-D read as ``(B, 1, T_q, T_k)``) ANDed with the bottom-right causal mask when ``is_causal``."""
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]                                         # (B, 1, T_q, T_k)
        if not is_causal:
            return mask
        causal = causal_mask(T_q, T_k, device=device)                    # (T_q, T_k)
        if mask is None or mask.dtype == torch.bool:
            return combine_masks(mask, causal)                           # (..., T_q, T_k)
        return mask.masked_fill(~causal, torch.finfo(mask.dtype).min)    # (..., T_q, T_k)

    def forward(self, x: Tensor, mask: Tensor | None = None, *, is_causal: bool = False,
                kv_cache: KVCache | None = None, positions: Tensor | None = None,
                return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention of ``x (B, T_q, d)``; returns ``(B, T_q, d)`` [, weights ``(B, H, T_q, T_k)``].

        Args:
            x: ``(B, T_q, d)``.
            mask: ``(T_q, T_k)``, ``(B, T_q, T_k)`` (the same for every head) or ``(B, 1|H, 1|T_q, T_k)``, bool
                allow-mask or float bias; ``T_k`` counts cached + new keys. Key padding goes through
                ``key_padding_to_attention`` first. A query with no allowed key gets a zero attention output
                (so ``out_proj`` sees zeros for it).
            is_causal: AND ``causal_mask(T_q, T_k)`` (#27), aligned bottom-right (offset by the cache).
            kv_cache: a ``KVCache`` with ``n_kv_heads`` heads (#33), duck-typed (``length``, ``update``):
                the new ``H_kv`` keys/values are appended and attention runs over all cached keys.
            positions: ``(T_q,)`` or ``(B, T_q)`` RoPE positions; default ``arange(past, past + T_q)``.
            return_weights: also return the attention weights.

        Raises ValueError, before the cache is touched, for an ``x`` that is not ``(B, T, d_model)``, a
        ``positions`` shape other than ``(T_q,)``/``(B, T_q)``, or a mask that does not fit.
        """
        past = 0 if kv_cache is None else int(kv_cache.length)
        self._check_inputs(x, mask, positions, past)
        B, T_q, _ = x.shape
        attn_mask = self._mask(mask, is_causal, T_q, past + T_q, x.device)
        q = self._split(self.q_proj(x), self.n_heads)                    # (B, H, T_q, d_h)
        k = self._split(self.k_proj(x), self.n_kv_heads)                 # (B, H_kv, T_q, d_h)
        v = self._split(self.v_proj(x), self.n_kv_heads)                 # (B, H_kv, T_q, d_h)
        if self.rope is not None:
            if positions is None:
                positions = torch.arange(past, past + T_q,               # (T_q,)
                                         device=x.device)
            q = self.rope(q, positions)                                  # (B, H, T_q, d_h)
            k = self.rope(k, positions)                                  # (B, H_kv, T_q, d_h)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)                                 # (B, H_kv, T_k, d_h), (B, H_kv, T_k, d_h)
        k = repeat_kv(k, self.n_rep)                                     # (B, H, T_k, d_h)
        v = repeat_kv(v, self.n_rep)                                     # (B, H, T_k, d_h)
        dropout_p = self.dropout_p if self.training else 0.0
        heads, weights = scaled_dot_product_attention(                   # (B, H, T_q, d_h), (B, H, T_q, T_k)
            q, k, v, attn_mask, dropout_p=dropout_p, return_weights=True)
        merged = heads.transpose(1, 2).reshape(B, T_q, self.n_heads * self.head_dim)  # (B, T_q, H*d_h)
        out = self.out_proj(merged)                                      # (B, T_q, d)
        if return_weights:
            return out, weights
        return out

    def _check_inputs(self, x: Tensor, mask: Tensor | None, positions: Tensor | None, past: int) -> None:
        """Every ValueError of ``forward``, raised before the cache is touched."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}), got shape {tuple(x.shape)}")
        B, T_q, _ = x.shape
        if positions is not None and positions.shape not in ((T_q,), (B, T_q)):
            raise ValueError(f"positions must be (T_q,) or (B, T_q) = ({B}, {T_q}), got {tuple(positions.shape)}")
        if mask is None:
            return
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise ValueError(f"mask must be bool (allow-mask) or floating (bias), got {mask.dtype}")
        if mask.dim() not in (2, 3, 4):
            raise ValueError(f"mask must be (T_q, T_k), (B, T_q, T_k) or (B, 1|H, 1|T_q, T_k), got {tuple(mask.shape)}")
        shape = mask.shape if mask.dim() != 3 else (mask.shape[0], 1, *mask.shape[1:])
        target = (B, self.n_heads, T_q, past + T_q)[-len(shape):]
        if any(m not in (1, t) for m, t in zip(shape, target)):
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not fit (B, H, T_q, T_k) = "
                             f"{(B, self.n_heads, T_q, past + T_q)}")


def _check_repeat(x: Tensor, n_rep: int) -> None:
    """ValueError unless ``x`` is 4-D and ``n_rep`` an int >= 1."""
    if isinstance(n_rep, bool) or not isinstance(n_rep, int) or n_rep < 1:
        raise ValueError(f"n_rep must be an int >= 1, got {n_rep!r}")
    if x.dim() != 4:
        raise ValueError(f"x must be (B, H_kv, T, d_h), got shape {tuple(x.shape)}")


def _check_sizes(d_model: int, n_heads: int, n_kv_heads: int, dropout: float) -> None:
    """ValueError for the constructor arguments ``GroupedQueryAttention`` rejects."""
    if d_model < 1:
        raise ValueError(f"d_model must be >= 1, got {d_model}")
    if n_heads < 1 or d_model % n_heads != 0:
        raise ValueError(f"n_heads must be >= 1 and divide d_model={d_model}, got n_heads={n_heads}")
    if n_kv_heads < 1:
        raise ValueError(f"n_kv_heads must be >= 1, got {n_kv_heads}")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
