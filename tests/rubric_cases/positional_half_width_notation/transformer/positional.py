"""Canon #34: rotary position embeddings (RoPE) and the sinusoidal absolute encoding.

RoPE rotates each pair of query/key features by an angle proportional to the token's position,
``angle[p, i] = p · base^(-2i / d_h)``. A rotation by ``m·θ`` of q and ``n·θ`` of k leaves
``⟨q, k⟩`` depending only on ``m - n``, so attention scores see relative positions while nothing is
added to the residual stream. ``sinusoidal_positions`` is the original additive table of the
Transformer paper, kept here because it shares the frequency ladder.

The subtle point is the pairing. This module pairs dimension ``i`` with ``i + d_h/2`` (the
"half-split" layout of GPT-NeoX and HF Llama): ``rotate_half(x) = cat(-x2, x1)``. The original paper
and Meta's Llama release pair ``(2i, 2i+1)`` instead. Both are rotations, both preserve norms and
relative positions, so tests of those properties pass with either; only a comparison against an
explicit reference of one layout (or loading weights trained with the other) tells them apart.

Shape letters: ``B`` batch, ``H`` heads, ``T`` positions in the input, ``d_h`` head width (even),
``d`` model width for the sinusoidal table, ``P`` = ``max_positions`` rows of the tables.

Trade-off: angles are computed in float64 and the cos/sin tables stored in float32, rather than
computed in the working dtype, because in float32 the rounding of ``θ_i`` times ``p`` plus the rounding
of the product puts ``p · θ_i`` off by up to 2.4e-4 rad at ``p = 4095``, ``d_h = 128``: cos/sin wrong
in the fourth decimal, ~8000 times the 3e-8 error of rounding the float64 value to float32. float16 (spacing 2 above 2048) is useless for
angles. Inputs in float16/bfloat16 are rotated in float32 and cast back. The tables cost
``2 · P · d_h/2 · 4`` bytes (1 MiB for ``P = 2048, d_h = 128``); they are buffers, so a module-wide
``.half()`` would cast them too: convert the model's weights, not this module.

What to test: position 0 is the identity, the ``[1, 0]``-at-position-1 value, norm preservation, the
relative property ``⟨rope(q, m), rope(k, n)⟩ = f(m - n)``, a complex-multiplication reference with the
half-split pairing, per-row ``(B, T)`` positions against slicing a longer sequence, float16 in/out,
and the sinusoidal table's first row ``[0, 1, 0, 1, ...]``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["RotaryEmbedding", "apply_rope", "rope_frequencies", "rotate_half", "sinusoidal_positions"]


def _check_even(value: int, name: str) -> None:
    if value < 2 or value % 2 != 0:
        raise ValueError(f"{name} must be even and >= 2, got {value}")


def _inverse_frequencies(dim: int, base: float) -> Tensor:
    """``base^(-2i/dim)`` for ``i = 0 .. dim/2 - 1`` in float64, ``(dim/2,)``."""
    if not base > 0:
        raise ValueError(f"base must be > 0, got {base}")
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim       # (dim/2,)
    return base ** -exponents


def sinusoidal_positions(T: int, d: int, base: float = 10000.0) -> Tensor:
    """Sinusoidal absolute position table ``(T, d)`` float32 (Vaswani et al. 2017, section 3.5).

    ``PE[p, 2i] = sin(p / base^(2i/d))`` and ``PE[p, 2i+1] = cos(p / base^(2i/d))``; row 0 is
    ``[0, 1, 0, 1, ...]`` and every value lies in [-1, 1]. Computed in float64.
    Raises ValueError for odd ``d``, ``T < 0`` or ``base <= 0``.
    """
    _check_even(d, "d")
    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    positions = torch.arange(T, dtype=torch.float64)[:, None]            # (T, 1)
    inv_freq = _inverse_frequencies(d, base)                             # (d/2,)
    angles = positions * inv_freq[None, :]                               # (T, d/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)            # (T, d/2, 2)
    return table.reshape(T, d).float()                                   # (T, d)


def rope_frequencies(head_dim: int, max_positions: int, base: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """RoPE cos/sin tables, each ``(max_positions, head_dim/2)`` in ``dtype``.

    ``angle[p, i] = p · base^(-2i/head_dim)``, computed in float64 and cast to ``dtype``. Raises
    ValueError for odd ``head_dim``, ``max_positions < 1`` or ``base <= 0``. Source: Su et al. 2021
    (RoFormer), eq. 15.
    """
    _check_even(head_dim, "head_dim")
    if max_positions < 1:
        raise ValueError(f"max_positions must be >= 1, got {max_positions}")
    positions = torch.arange(max_positions, dtype=torch.float64)         # (P,)
    inv_freq = _inverse_frequencies(head_dim, base)                      # (d_h/2,)
    angles = positions[:, None] * inv_freq[None, :]                      # (P, d_h/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``(..., d_h) -> (..., d_h)``: ``cat(-x2, x1)`` with ``x1 = x[..., :d_h/2]``, ``x2 = x[..., d_h/2:]``.

    Multiplying by ``sin`` and adding ``x · cos`` rotates each pair ``(x1[i], x2[i])`` by its angle.
    Raises ValueError if the last dim is odd.
    """
    _check_even(x.shape[-1], "x last dim")
    x1, x2 = x.chunk(2, dim=-1)                                          # (..., d_h/2), (..., d_h/2)
    return torch.cat([-x2, x1], dim=-1)                                  # (..., d_h)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x (B, H, T, d_h)`` by the angles whose cos/sin are given; returns ``(B, H, T, d_h)``, x.dtype.

    ``cos``/``sin``: ``(T, d_h/2)`` (same positions for every row) or ``(B, T, d_h/2)`` (per-row
    positions, e.g. left padding). The rotation runs in the wider of x's dtype and float32.
    Raises ValueError if ``x`` is not 4-D with an even last dim, or ``cos``/``sin`` do not match it.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be (B, H, T, d_h), got shape {tuple(x.shape)}")
    _check_even(x.shape[-1], "x last dim")
    B, _, T, d_h = x.shape
    if cos.shape != sin.shape or cos.shape not in ((T, d_h // 2), (B, T, d_h // 2)):
        raise ValueError(f"cos and sin must both be (T, d_h/2) = {(T, d_h // 2)} or (B, T, d_h/2), "
                         f"got {tuple(cos.shape)} and {tuple(sin.shape)}")
    wide = torch.promote_types(torch.promote_types(x.dtype, cos.dtype), torch.float32)
    if cos.dim() == 2:
        cos, sin = cos[None, None], sin[None, None]                      # (1, 1, T, d_h/2), (1, 1, T, d_h/2)
    else:
        cos, sin = cos[:, None], sin[:, None]                            # (B, 1, T, d_h/2), (B, 1, T, d_h/2)
    cos_full = torch.cat([cos, cos], dim=-1).to(wide)                    # (..., T, d_h)
    sin_full = torch.cat([sin, sin], dim=-1).to(wide)                    # (..., T, d_h)
    xw = x.to(wide)
    return (xw * cos_full + rotate_half(xw) * sin_full).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE with precomputed float32 cos/sin tables for positions ``0 .. max_positions - 1``.

    Args: ``head_dim`` (even), ``max_positions`` (table rows), ``base`` (10000, as in RoFormer/Llama).
    Buffers ``cos_cached``, ``sin_cached`` ``(max_positions, head_dim/2)``, not saved in the state dict.
    One instance can be shared by every layer. Used duck-typed by ``MultiHeadAttention(rope=...)``.
    Raises ValueError for odd ``head_dim`` or ``max_positions < 1``.
    """

    def __init__(self, head_dim: int, max_positions: int = 2048, base: float = 10000.0) -> None:
        super().__init__()
        cos, sin = rope_frequencies(head_dim, max_positions, base)       # (P, d_h/2), (P, d_h/2)
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.base = base
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate queries or keys ``x (B, H, T, d_h)`` at ``positions``; returns ``(B, H, T, d_h)``, x.dtype.

        ``positions``: ``(T,)`` or ``(B, T)`` integer, default ``arange(T)``; with a KV cache the caller
        passes ``arange(past, past + T)``. Raises ValueError if ``x`` is not 4-D with last dim
        ``head_dim``, or ``positions`` has the wrong shape or dtype, is negative or is
        ``>= max_positions``.
        """
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must be (B, H, T, head_dim={self.head_dim}), got shape {tuple(x.shape)}")
        B, _, T, _ = x.shape
        if positions is None:
            positions = torch.arange(T, device=x.device)                 # (T,)
        if positions.is_floating_point() or positions.dtype == torch.bool:
            raise ValueError(f"positions must be an integer tensor, got {positions.dtype}")
        if positions.shape not in ((T,), (B, T)):
            raise ValueError(f"positions must be (T,) = ({T},) or (B, T) = ({B}, {T}), got {tuple(positions.shape)}")
        if positions.numel() and (positions.min() < 0 or positions.max() >= self.max_positions):
            raise ValueError(f"positions must lie in [0, max_positions={self.max_positions}), "
                             f"got [{int(positions.min())}, {int(positions.max())}]")
        cos = self.cos_cached[positions]                                 # (T, d_h/2) or (B, T, d_h/2)
        sin = self.sin_cached[positions]                                 # (T, d_h/2) or (B, T, d_h/2)
        return apply_rope(x, cos, sin)                                   # (B, H, T, d_h)
