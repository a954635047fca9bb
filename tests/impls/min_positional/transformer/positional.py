"""Canon #34: rotary position embeddings (RoPE) and the sinusoidal absolute encoding.

Plan: both use the geometric frequencies base^(-2i/d), computed in float64 because p * freq for large
p loses digits in float32. Sinusoidal: interleave sin and cos in a (T, d) table. RoPE: precompute
cos/sin tables (positions, d_h/2) and rotate each pair (x1[i], x2[i]) of the half-split layout with
x * cos + rotate_half(x) * sin, so q·k depends only on the position difference.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["RotaryEmbedding", "apply_rope", "rope_frequencies", "rotate_half", "sinusoidal_positions"]


def sinusoidal_positions(T: int, d: int, base: float = 10000.0) -> Tensor:
    """Sinusoidal absolute position table ``(T, d)`` float32 (Vaswani et al. 2017, section 3.5)."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angle = pos * inv_freq[None, :]  # (T, d/2)
    pe = torch.empty(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def rope_frequencies(head_dim: int, max_positions: int, base: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """RoPE cos/sin tables, each ``(max_positions, head_dim/2)`` in ``dtype``."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d_h/2,)
    pos = torch.arange(max_positions, dtype=torch.float64)  # (P,)
    angle = pos[:, None] * inv_freq[None, :]  # (P, d_h/2)
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``(..., d_h) -> (..., d_h)``: ``cat(-x2, x1)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x (B, H, T, d_h)`` by the angles whose cos/sin are given; returns ``(B, H, T, d_h)``, x.dtype."""
    work = torch.promote_types(x.dtype, torch.float32)
    cos = torch.cat([cos, cos], dim=-1).to(work)  # (T, d_h) or (B, T, d_h)
    sin = torch.cat([sin, sin], dim=-1).to(work)
    if cos.dim() == 3:  # per-row positions: broadcast over heads
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, d_h)
    xw = x.to(work)
    return (xw * cos + rotate_half(xw) * sin).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE with precomputed float32 cos/sin tables for positions ``0 .. max_positions - 1``."""

    def __init__(self, head_dim: int, max_positions: int = 2048, base: float = 10000.0) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.base = base
        cos, sin = rope_frequencies(head_dim, max_positions, base)
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate queries or keys ``x (B, H, T, d_h)`` at ``positions`` (``(T,)`` or ``(B, T)``)."""
        if positions is None:
            positions = torch.arange(x.shape[2], device=x.device)
        positions = positions.long()
        cos = self.cos_cached[positions]  # (T, d_h/2) or (B, T, d_h/2)
        sin = self.sin_cached[positions]
        return apply_rope(x, cos, sin)
