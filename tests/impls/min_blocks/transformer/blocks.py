"""Canon #29 and #30: the transformer encoder block and decoder block, pre-norm or post-norm.

Plan: each sublayer (self-attention, optional cross-attention, feed-forward) sits in a residual
branch. Pre-norm (x + drop(f(norm(x)))) is the default because the residual stream is then an
identity path and deep stacks train without warm-up; post-norm (norm(x + drop(f(x)))) is the 2017
original. The encoder attends bidirectionally with a key-padding mask; the decoder's self-attention
is always causal (bottom-right aligned, so it also works with a KV cache) and may use GQA and RoPE.
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


def _make_norm(norm: str, d: int, eps: float, bias: bool) -> nn.Module:
    if norm == "layernorm":
        return nn.LayerNorm(d, eps=eps, bias=bias)
    if norm == "rmsnorm":
        return RMSNorm(d, eps=eps)
    raise ValueError(f"unknown norm {norm!r}")


def _make_ffn(ffn: str, d: int, d_ff: int | None, dropout: float, bias: bool) -> nn.Module:
    if ffn == "gelu":
        return FeedForward(d, d_ff, dropout=dropout, bias=bias)
    if ffn == "swiglu":
        return SwiGLU(d, d_ff, bias=bias, dropout=dropout)
    raise ValueError(f"unknown ffn {ffn!r}")


class EncoderBlock(nn.Module):
    """Bidirectional transformer block: self-attention and feed-forward, each in a residual branch."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 ffn: Literal["gelu", "swiglu"] = "gelu", norm: Literal["layernorm", "rmsnorm"] = "layernorm",
                 norm_first: bool = True, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm_attn = _make_norm(norm, d_model, eps, bias)
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout)
        self.norm_ffn = _make_norm(norm, d_model, eps, bias)
        self.ffn = _make_ffn(ffn, d_model, d_ff, dropout, bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """``x (B, T, d)``, ``key_padding_mask (B, T)`` (True/1 = real token) -> ``(B, T, d)``."""
        mask = None if key_padding_mask is None else key_padding_to_attention(key_padding_mask)  # (B, 1, 1, T)
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm_attn(x), mask=mask))
            x = x + self.drop(self.ffn(self.norm_ffn(x)))
        else:
            x = self.norm_attn(x + self.drop(self.self_attn(x, mask=mask)))
            x = self.norm_ffn(x + self.drop(self.ffn(x)))
        return x


class DecoderBlock(nn.Module):
    """Causal transformer block: self-attention, optional cross-attention, feed-forward; residual each."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 cross_attention: bool = False, n_kv_heads: int | None = None,
                 rope: RotaryEmbedding | None = None, ffn: Literal["gelu", "swiglu"] = "gelu",
                 norm: Literal["layernorm", "rmsnorm"] = "layernorm", norm_first: bool = True,
                 eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm_attn = _make_norm(norm, d_model, eps, bias)
        if n_kv_heads is None:
            self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout, rope=rope)
        else:
            self.self_attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, bias=bias,
                                                   dropout=dropout, rope=rope)
        if cross_attention:
            self.norm_cross = _make_norm(norm, d_model, eps, bias)
            self.cross_attn = CrossAttention(d_model, n_heads, bias=bias, dropout=dropout)
        else:
            self.norm_cross = None
            self.cross_attn = None
        self.norm_ffn = _make_norm(norm, d_model, eps, bias)
        self.ffn = _make_ffn(ffn, d_model, d_ff, dropout, bias)
        self.drop = nn.Dropout(dropout)

    def _self_attn(self, h: Tensor, mask, kv_cache, positions) -> Tensor:
        return self.self_attn(h, mask=mask, is_causal=True, kv_cache=kv_cache, positions=positions)

    def forward(self, x: Tensor, memory: Tensor | None = None, *, attention_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, kv_cache: KVCache | None = None,
                positions: Tensor | None = None) -> Tensor:
        """``x (B, T, d)`` -> ``(B, T, d)``; the self-attention is always causal."""
        mask = None if attention_mask is None else key_padding_to_attention(attention_mask)  # (B, 1, 1, T_total)
        if self.norm_first:
            x = x + self.drop(self._self_attn(self.norm_attn(x), mask, kv_cache, positions))
            if self.cross_attn is not None:
                x = x + self.drop(self.cross_attn(self.norm_cross(x), memory, memory_mask))
            x = x + self.drop(self.ffn(self.norm_ffn(x)))
        else:
            x = self.norm_attn(x + self.drop(self._self_attn(x, mask, kv_cache, positions)))
            if self.cross_attn is not None:
                x = self.norm_cross(x + self.drop(self.cross_attn(x, memory, memory_mask)))
            x = self.norm_ffn(x + self.drop(self.ffn(x)))
        return x
