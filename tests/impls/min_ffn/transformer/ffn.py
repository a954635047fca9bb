"""Canon #36: the position-wise feed-forward networks of a transformer block, GELU and SwiGLU.

Plan: FeedForward is fc2(dropout(gelu(fc1 x))) with the exact (erf) GELU and a 4d hidden width.
SwiGLU gates the up projection with silu of a second projection, w2(silu(w1 x) * w3 x); because it
has three matrices instead of two, its default hidden width is 8d/3 (rounded up to a multiple, in
integer arithmetic) so the parameter count matches the 4d GELU MLP.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FeedForward", "SwiGLU", "swiglu_hidden_dim"]


class FeedForward(nn.Module):
    """The GELU MLP of a transformer block: ``(..., d) -> (..., d)``, ``fc2(dropout(gelu(fc1(x))))``."""

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.d_model = d_model
        self.d_ff = d_ff
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d) -> (..., d)``."""
        return self.fc2(self.dropout(F.gelu(self.fc1(x))))


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """SwiGLU hidden width: ``int(8 · d_model / 3)`` rounded up to a multiple of ``multiple_of``."""
    hidden = 8 * d_model // 3
    return (hidden + multiple_of - 1) // multiple_of * multiple_of


class SwiGLU(nn.Module):
    """Gated feed-forward ``(..., d) -> (..., d)``: ``w2(dropout(silu(w1 x) * w3 x))``."""

    def __init__(self, d_model: int, d_ff: int | None = None, *, bias: bool = False,
                 multiple_of: int = 8, dropout: float = 0.0) -> None:
        super().__init__()
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else d_ff
        self.d_model = d_model
        self.d_ff = d_ff
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)  # gate
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)  # up
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)  # down
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d) -> (..., d)``."""
        return self.w2(self.dropout(F.silu(self.w1(x)) * self.w3(x)))
