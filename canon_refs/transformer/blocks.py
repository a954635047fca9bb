"""Canon #29 and #30: the transformer encoder block and decoder block, pre-norm or post-norm.

An encoder block is two residual sublayers, bidirectional self-attention then a feed-forward network.
A decoder block has causal self-attention (with an optional KV cache, RoPE and grouped-query heads),
optional cross-attention to an encoder's output (``memory``), then the feed-forward network. Both are
assembled from the items they build on: ``MultiHeadAttention``/``CrossAttention`` (#26, #28),
``GroupedQueryAttention`` (#35), ``FeedForward``/``SwiGLU`` (#36) and ``RMSNorm`` (#15).

The subtle point is where the norm sits relative to the residual. Pre-norm (GPT-2, Llama) normalises
the *input* of each sublayer and adds the sublayer's output to the un-normalised stream:
``x = x + f(norm(x))``. Post-norm (the 2017 paper, BERT) normalises the *sum*: ``x = norm(x + f(x))``.
Writing ``h = norm(x); x = h + f(h)`` mixes the two and is neither; with pre-norm a block whose
sublayer outputs are zero is exactly the identity, which is the check that catches it. Each sublayer
owns its norm (``norm_attn``, ``norm_cross``, ``norm_ffn``); sharing one is another silent mistake that
only shows once the norms' weights differ, so the tests randomise them.

Shape letters: ``B`` batch, ``T`` tokens in this call, ``T_m`` memory tokens, ``T_total`` keys seen by
the decoder's self-attention (cached + new), ``d`` model width.

Trade-off: pre-norm is the default (``norm_first=True``) rather than post-norm because the residual
stream then carries an identity path from the embeddings to the output, so gradients reach early
layers unscaled and deep stacks train without the learning-rate warm-up post-norm needs (Xiong et al.
2020); the price is that the stream's scale grows with depth, hence the final norm in GPT (#31). The
decoder takes a key-padding ``attention_mask`` over *all* keys ``(B, T_total)`` instead of a full
``(B, T, T_total)`` mask, because with a cache the block builds the causal part itself from the cache
length (``is_causal``, aligned bottom-right).

What to test: agreement with ``nn.TransformerEncoderLayer``/``nn.TransformerDecoderLayer`` with copied
weights and randomised norms (pre- and post-norm, with padding), token-permutation equivariance of the
encoder, padded tokens having no effect on real ones, the identity with zeroed sublayer outputs,
causality of the decoder, memory-permutation invariance, and token-by-token decoding with a KV cache
(also with GQA and RoPE) equal to the full forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from torch import Tensor, nn

from canon_refs.llm.gqa import GroupedQueryAttention
from canon_refs.nn.normalization_torch import RMSNorm
from canon_refs.transformer.ffn import FeedForward, SwiGLU
from canon_refs.transformer.masks import key_padding_to_attention
from canon_refs.transformer.multihead import CrossAttention, MultiHeadAttention

if TYPE_CHECKING:
    from canon_refs.transformer.kv_cache import KVCache
    from canon_refs.transformer.positional import RotaryEmbedding

__all__ = ["DecoderBlock", "EncoderBlock"]

_FFNS = ("gelu", "swiglu")
_NORMS = ("layernorm", "rmsnorm")


class EncoderBlock(nn.Module):
    """Bidirectional transformer block: self-attention and feed-forward, each in a residual branch.

    Args:
        d_model, n_heads: width ``d`` and heads ``H`` (``H`` divides ``d``).
        d_ff: feed-forward hidden width; None = the FFN's default (4d for GELU, ``swiglu_hidden_dim`` for SwiGLU).
        dropout: on attention weights, inside the FFN and on each sublayer output (training mode only).
        ffn: ``"gelu"`` (``FeedForward``) or ``"swiglu"`` (``SwiGLU``).
        norm: ``"layernorm"`` (``nn.LayerNorm(d, eps=eps, bias=bias)``) or ``"rmsnorm"`` (``RMSNorm(d, eps=eps)``
            of #15, ``canon_refs.nn.normalization_torch``); two separate norms, one per sublayer.
        norm_first: pre-norm (True) or post-norm (False).
        eps: the norms' eps. bias: biases in attention, FFN and LayerNorm.

    Attributes: ``norm_attn``, ``self_attn`` (``MultiHeadAttention``), ``norm_ffn``, ``ffn``, ``drop``.
    Raises ValueError for an unknown ``ffn`` or ``norm``, ``dropout`` outside [0, 1) and invalid sizes.
    Source: Vaswani et al. 2017, section 3.1; pre-norm as in Xiong et al. 2020 and GPT-2.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 ffn: Literal["gelu", "swiglu"] = "gelu", norm: Literal["layernorm", "rmsnorm"] = "layernorm",
                 norm_first: bool = True, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        _check_options(ffn, norm, dropout)
        self.d_model = d_model
        self.norm_first = norm_first
        self.norm_attn = _make_norm(norm, d_model, eps, bias)
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout)
        self.norm_ffn = _make_norm(norm, d_model, eps, bias)
        self.ffn = _make_ffn(ffn, d_model, d_ff, dropout, bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """``x (B, T, d)``, ``key_padding_mask (B, T)`` bool|int (True/1 = real token) -> ``(B, T, d)``.

        Padded keys are never attended to; padded positions still get an output, which callers ignore.
        Raises ValueError if ``x`` is not ``(B, T, d_model)`` or the mask is not a ``(B, T)`` bool|int mask.
        """
        _check_x(x, self.d_model)
        _check_padding(key_padding_mask, tuple(x.shape[:2]), "key_padding_mask")
        mask = None
        if key_padding_mask is not None:
            mask = key_padding_to_attention(key_padding_mask)            # (B, 1, 1, T)
        if self.norm_first:
            h = self.norm_attn(x)                                        # (B, T, d)
            x = x + self.drop(self.self_attn(h, mask=mask))              # (B, T, d)
            h = self.norm_ffn(x)                                         # (B, T, d)
            return x + self.drop(self.ffn(h))                            # (B, T, d)
        attn = self.self_attn(x, mask=mask)                              # (B, T, d)
        x = self.norm_attn(x + self.drop(attn))                          # (B, T, d)
        return self.norm_ffn(x + self.drop(self.ffn(x)))                 # (B, T, d)


class DecoderBlock(nn.Module):
    """Causal transformer block: self-attention, optional cross-attention, feed-forward; residual each.

    Args:
        d_model, n_heads, d_ff, dropout, ffn, norm, norm_first, eps, bias: as in ``EncoderBlock``.
        cross_attention: add a ``CrossAttention`` sublayer over ``memory`` (encoder-decoder); False for GPT.
        n_kv_heads: use ``GroupedQueryAttention`` with this many key/value heads (must divide ``n_heads``)
            instead of ``MultiHeadAttention``.
        rope: a ``RotaryEmbedding`` (#34) for the self-attention (may be shared between blocks).

    Attributes: ``norm_attn``, ``self_attn``, ``norm_cross`` and ``cross_attn`` (None without
    cross-attention), ``norm_ffn``, ``ffn``, ``drop``.
    Raises ValueError for an unknown ``ffn``/``norm``, ``n_kv_heads`` not dividing ``n_heads``, ``dropout``
    outside [0, 1) and invalid sizes. Source: Vaswani et al. 2017, section 3.1 (decoder); Radford et al.
    2019 (GPT-2, pre-norm, no cross-attention); Touvron et al. 2023 (RMSNorm, SwiGLU, RoPE, GQA).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 cross_attention: bool = False, n_kv_heads: int | None = None,
                 rope: RotaryEmbedding | None = None, ffn: Literal["gelu", "swiglu"] = "gelu",
                 norm: Literal["layernorm", "rmsnorm"] = "layernorm", norm_first: bool = True,
                 eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        _check_options(ffn, norm, dropout)
        _check_kv_heads(n_heads, n_kv_heads)
        self.d_model = d_model
        self.norm_first = norm_first
        self.norm_attn = _make_norm(norm, d_model, eps, bias)
        self.self_attn: nn.Module
        if n_kv_heads is None:
            self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout, rope=rope)
        else:
            self.self_attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, bias=bias, dropout=dropout,
                                                   rope=rope)
        self.norm_cross = _make_norm(norm, d_model, eps, bias) if cross_attention else None
        self.cross_attn = CrossAttention(d_model, n_heads, bias=bias, dropout=dropout) if cross_attention else None
        self.norm_ffn = _make_norm(norm, d_model, eps, bias)
        self.ffn = _make_ffn(ffn, d_model, d_ff, dropout, bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor | None = None, *, attention_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, kv_cache: KVCache | None = None,
                positions: Tensor | None = None) -> Tensor:
        """``x (B, T, d)`` -> ``(B, T, d)``; the self-attention is always causal.

        Args:
            x: ``(B, T, d)`` new tokens.
            memory: ``(B, T_m, d)`` encoder output, required iff the block has cross-attention.
            attention_mask: ``(B, T_total)`` bool|int over *all* keys of the self-attention, cached + new
                (``T_total = kv_cache.length + T``); True/1 = real token.
            memory_mask: ``(B, T_m)`` bool|int, True/1 = real memory token.
            kv_cache: a ``KVCache`` (#33) for this block's self-attention.
            positions: ``(T,)`` or ``(B, T)`` RoPE positions; default continues after the cache.

        Raises ValueError, before the cache is touched, for a bad ``x``, ``memory`` given without
        cross-attention or missing with it, and masks whose shapes do not match.
        """
        past = 0 if kv_cache is None else int(kv_cache.length)
        self._check_inputs(x, memory, attention_mask, memory_mask, past)
        self_mask = None
        if attention_mask is not None:
            self_mask = key_padding_to_attention(attention_mask)         # (B, 1, 1, T_total)
        if self.norm_first:
            h = self.norm_attn(x)                                        # (B, T, d)
            x = x + self.drop(self.self_attn(h, mask=self_mask, is_causal=True,  # (B, T, d)
                                             kv_cache=kv_cache, positions=positions))
            if self.cross_attn is not None:
                h = self.norm_cross(x)                                   # (B, T, d)
                x = x + self.drop(self.cross_attn(h, memory, memory_mask))  # (B, T, d)
            h = self.norm_ffn(x)                                         # (B, T, d)
            return x + self.drop(self.ffn(h))                            # (B, T, d)
        attn = self.self_attn(x, mask=self_mask, is_causal=True,         # (B, T, d)
                              kv_cache=kv_cache, positions=positions)
        x = self.norm_attn(x + self.drop(attn))                          # (B, T, d)
        if self.cross_attn is not None:
            cross = self.cross_attn(x, memory, memory_mask)              # (B, T, d)
            x = self.norm_cross(x + self.drop(cross))                    # (B, T, d)
        return self.norm_ffn(x + self.drop(self.ffn(x)))                 # (B, T, d)

    def _check_inputs(self, x: Tensor, memory: Tensor | None, attention_mask: Tensor | None,
                      memory_mask: Tensor | None, past: int) -> None:
        """Every ValueError of ``forward``, raised before the cache is written."""
        _check_x(x, self.d_model)
        B, T, _ = x.shape
        if self.cross_attn is None and (memory is not None or memory_mask is not None):
            raise ValueError("memory was given but the block has no cross-attention (cross_attention=False)")
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("memory is required: the block was built with cross_attention=True")
            if memory.dim() != 3 or memory.shape[0] != B or memory.shape[-1] != self.d_model:
                raise ValueError(f"memory must be (B={B}, T_m, d_model={self.d_model}), got {tuple(memory.shape)}")
            _check_padding(memory_mask, (B, memory.shape[1]), "memory_mask")
        _check_padding(attention_mask, (B, past + T), "attention_mask (over cached + new keys)")


def _make_norm(norm: str, d_model: int, eps: float, bias: bool) -> nn.Module:
    """``nn.LayerNorm(d, eps)`` (with a bias iff ``bias``) or ``RMSNorm(d, eps)``."""
    if norm == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    return RMSNorm(d_model, eps=eps)


def _make_ffn(ffn: str, d_model: int, d_ff: int | None, dropout: float, bias: bool) -> nn.Module:
    """``FeedForward`` (default width 4d) or ``SwiGLU`` (default width ``swiglu_hidden_dim(d)``)."""
    if ffn == "gelu":
        return FeedForward(d_model, d_ff, dropout, bias)
    return SwiGLU(d_model, d_ff, bias=bias, dropout=dropout)


def _check_options(ffn: str, norm: str, dropout: float) -> None:
    if ffn not in _FFNS:
        raise ValueError(f"ffn must be one of {_FFNS}, got {ffn!r}")
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def _check_x(x: Tensor, d_model: int) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (B, T, d_model={d_model}), got shape {tuple(x.shape)}")


def _check_padding(mask: Tensor | None, shape: tuple[int, int], name: str) -> None:
    """A ``(B, T)`` bool|int key-padding mask of exactly ``shape``, or None."""
    if mask is None:
        return
    if mask.is_floating_point() or tuple(mask.shape) != shape:
        raise ValueError(f"{name} must be a bool|int (B, T) = {shape} mask, got {mask.dtype} {tuple(mask.shape)}")


def _check_kv_heads(n_heads: int, n_kv_heads: int | None) -> None:
    """ValueError unless ``n_kv_heads`` is None or a positive divisor of ``n_heads``."""
    if n_kv_heads is not None and (n_kv_heads < 1 or n_heads % n_kv_heads != 0):
        raise ValueError(f"n_kv_heads={n_kv_heads} must be >= 1 and divide n_heads={n_heads}")
