"""Alternative #29/#30: blocks written around one residual helper, with explicit full masks.

``_residual(x, norm, fn, pre)`` implements both pre-norm (``x + f(norm(x))``) and post-norm
(``norm(x + f(x))``) for every sublayer. The decoder does not use ``is_causal``: it builds the whole
``(B, 1, T, T_total)`` allow-mask itself from #27's ``causal_mask`` (bottom-right, offset by the cache)
and the key-padding mask, and the encoder expands key padding to ``(B, 1, T, T)``.
Shape letters: ``B`` batch, ``T`` new tokens, ``T_total`` cached + new keys, ``T_m`` memory, ``d`` width.
Trade-off: one helper instead of six written-out residual lines, because the pre/post choice then lives
in one place. Test: passes every #29 and #30 check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from torch import Tensor, nn

from canon_refs.llm.gqa import GroupedQueryAttention
from canon_refs.nn.normalization_torch import RMSNorm
from canon_refs.transformer.ffn import FeedForward, SwiGLU
from canon_refs.transformer.masks import causal_mask, combine_masks
from canon_refs.transformer.multihead import CrossAttention, MultiHeadAttention

if TYPE_CHECKING:
    from canon_refs.transformer.kv_cache import KVCache
    from canon_refs.transformer.positional import RotaryEmbedding

__all__ = ["DecoderBlock", "EncoderBlock"]


def _norm(kind: str, d: int, eps: float, bias: bool) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(d, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(d, eps=eps)
    raise ValueError(f"unknown norm {kind!r}; use 'layernorm' or 'rmsnorm'")


def _ffn(kind: str, d: int, d_ff: int | None, dropout: float, bias: bool) -> nn.Module:
    if kind == "gelu":
        return FeedForward(d, d_ff, dropout, bias)
    if kind == "swiglu":
        return SwiGLU(d, d_ff, bias=bias, dropout=dropout)
    raise ValueError(f"unknown ffn {kind!r}; use 'gelu' or 'swiglu'")


def _residual(x: Tensor, norm: nn.Module, fn: Callable[[Tensor], Tensor], drop: nn.Module, pre: bool) -> Tensor:
    """Pre-norm ``x + drop(fn(norm(x)))`` or post-norm ``norm(x + drop(fn(x)))``; ``(B, T, d)``."""
    if pre:
        return x + drop(fn(norm(x)))
    return norm(x + drop(fn(x)))


def _bool_padding(mask: Tensor | None, B: int, T: int, name: str) -> Tensor | None:
    if mask is None:
        return None
    if mask.is_floating_point() or mask.shape != (B, T):
        raise ValueError(f"{name} must be a bool|int mask of shape {(B, T)}, got {tuple(mask.shape)}")
    return mask != 0


class EncoderBlock(nn.Module):
    """Encoder block (#29); same API, attributes and errors as the reference."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 ffn: Literal["gelu", "swiglu"] = "gelu", norm: Literal["layernorm", "rmsnorm"] = "layernorm",
                 norm_first: bool = True, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.norm_attn = _norm(norm, d_model, eps, bias)
        self.norm_ffn = _norm(norm, d_model, eps, bias)
        self.ffn = _ffn(ffn, d_model, d_ff, dropout, bias)
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """``(B, T, d) -> (B, T, d)``; ValueError for a bad ``x`` or ``key_padding_mask``."""
        if x.dim() != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        valid = _bool_padding(key_padding_mask, B, T, "key_padding_mask")
        allow = None if valid is None else valid[:, None, None, :].expand(B, 1, T, T)  # (B, 1, T, T)
        x = _residual(x, self.norm_attn, lambda h: self.self_attn(h, mask=allow), self.drop, self.norm_first)
        return _residual(x, self.norm_ffn, self.ffn, self.drop, self.norm_first)


class DecoderBlock(nn.Module):
    """Decoder block (#30); same API, attributes and errors as the reference."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 cross_attention: bool = False, n_kv_heads: int | None = None,
                 rope: RotaryEmbedding | None = None, ffn: Literal["gelu", "swiglu"] = "gelu",
                 norm: Literal["layernorm", "rmsnorm"] = "layernorm", norm_first: bool = True,
                 eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        if n_kv_heads is not None and (n_kv_heads < 1 or n_heads % n_kv_heads):
            raise ValueError(f"n_kv_heads must divide n_heads={n_heads}, got {n_kv_heads}")
        self.d_model, self.norm_first = d_model, norm_first
        self.norm_attn = _norm(norm, d_model, eps, bias)
        if n_kv_heads is not None:
            self.self_attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, bias=bias, dropout=dropout, rope=rope)
        else:
            self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout, rope=rope)
        self.norm_cross = _norm(norm, d_model, eps, bias) if cross_attention else None
        self.cross_attn = CrossAttention(d_model, n_heads, bias=bias, dropout=dropout) if cross_attention else None
        self.norm_ffn = _norm(norm, d_model, eps, bias)
        self.ffn = _ffn(ffn, d_model, d_ff, dropout, bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor | None = None, *, attention_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, kv_cache: KVCache | None = None,
                positions: Tensor | None = None) -> Tensor:
        """``(B, T, d) -> (B, T, d)``, causal; ValueError before any cache write."""
        if x.dim() != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        if (memory is not None) != (self.cross_attn is not None):
            raise ValueError("memory must be given exactly when the block has cross-attention")
        if memory_mask is not None and memory is None:
            raise ValueError("memory_mask given without memory")
        if memory is not None:
            if memory.dim() != 3 or memory.shape[0] != B or memory.shape[2] != self.d_model:
                raise ValueError(f"memory must be (B, T_m, d), got {tuple(memory.shape)}")
            _bool_padding(memory_mask, B, memory.shape[1], "memory_mask")
        T_total = T + (kv_cache.length if kv_cache is not None else 0)
        valid = _bool_padding(attention_mask, B, T_total, "attention_mask")
        keys = None if valid is None else valid[:, None, None, :]        # (B, 1, 1, T_total)
        allow = combine_masks(causal_mask(T, T_total, device=x.device), keys)  # (..., T, T_total)
        if allow.dim() == 2:
            allow = allow[None, None]                                    # (1, 1, T, T_total)
        x = _residual(x, self.norm_attn,
                      lambda h: self.self_attn(h, mask=allow, kv_cache=kv_cache, positions=positions),
                      self.drop, self.norm_first)
        if self.cross_attn is not None:
            x = _residual(x, self.norm_cross, lambda h: self.cross_attn(h, memory, memory_mask),
                          self.drop, self.norm_first)
        return _residual(x, self.norm_ffn, self.ffn, self.drop, self.norm_first)
