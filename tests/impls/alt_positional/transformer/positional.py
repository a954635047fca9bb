"""Alternative correct #34: the rotation as complex multiplication (``torch.polar``) on the half-split
pairs, ``torch.outer`` for the angle table, and the sinusoidal table filled by strided assignment.

Written differently from the reference on purpose (tests/impls); it must pass every test of
``transformer/positional``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _even(n: int, name: str) -> None:
    if n <= 0 or n % 2:
        raise ValueError(f"{name} must be a positive even number, got {n}")


def sinusoidal_positions(T: int, d: int, base: float = 10000.0) -> Tensor:
    _even(d, "d")
    inv = torch.pow(base, -torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d//2,)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)         # (T, d//2)
    pe = torch.empty(T, d, dtype=torch.float64)                          # (T, d)
    pe[:, 0::2] = ang.sin()
    pe[:, 1::2] = ang.cos()
    return pe.to(torch.float32)


def rope_frequencies(head_dim: int, max_positions: int, base: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    _even(head_dim, "head_dim")
    if max_positions <= 0:
        raise ValueError("max_positions must be positive")
    inv = torch.pow(base, -torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d_h//2,)
    ang = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv)  # (P, d_h//2)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    _even(x.shape[-1], "x last dim")
    h = x.shape[-1] // 2
    return torch.cat((x[..., h:].neg(), x[..., :h]), dim=-1)             # (..., d_h)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    if x.ndim != 4:
        raise ValueError("x must be 4-D")
    _even(x.shape[-1], "x last dim")
    n_b, _, t, d_h = x.shape
    if cos.shape != sin.shape or tuple(cos.shape[-2:]) != (t, d_h // 2) or cos.ndim not in (2, 3) \
            or (cos.ndim == 3 and cos.shape[0] != n_b):
        raise ValueError("cos/sin do not match x")
    real = torch.float64 if torch.float64 in (x.dtype, cos.dtype) else torch.float32
    rot = torch.complex(cos.to(real), sin.to(real))
    if rot.ndim == 3:
        rot = rot.unsqueeze(1)                                           # (B, 1, T, d_h//2)
    h = d_h // 2
    z = torch.complex(x[..., :h].to(real), x[..., h:].to(real)) * rot
    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)               # (B, H, T, d_h)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_positions: int = 2048, base: float = 10000.0) -> None:
        super().__init__()
        _even(head_dim, "head_dim")
        self.head_dim, self.max_positions = head_dim, max_positions
        c, s = rope_frequencies(head_dim, max_positions, base)           # (P, d_h//2), (P, d_h//2)
        self.register_buffer("c", c, persistent=False)
        self.register_buffer("s", s, persistent=False)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        if x.ndim != 4 or x.shape[-1] != self.head_dim:
            raise ValueError("x has the wrong head_dim")
        t = x.shape[2]
        pos = torch.arange(t) if positions is None else positions        # (T,) | (B, T)
        if pos.dtype.is_floating_point or pos.shape[-1] != t or pos.ndim not in (1, 2) \
                or (pos.ndim == 2 and pos.shape[0] != x.shape[0]):
            raise ValueError("positions have the wrong shape or dtype")
        if bool((pos < 0).any()) or bool((pos >= self.max_positions).any()):
            raise ValueError("positions out of range")
        return apply_rope(x, self.c[pos], self.s[pos])                   # (B, H, T, d_h)
