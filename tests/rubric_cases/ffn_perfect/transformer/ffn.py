"""The feed-forward networks of a transformer block, written with explicit einsums on the weights.

Instead of calling the ``nn.Linear`` submodules, the forward contracts the input with their weights via
``torch.einsum`` and writes the activations out by hand: SiLU as ``x * sigmoid(x)`` and the exact GELU
as ``0.5 · x · (1 + erf(x / sqrt(2)))``. The hidden width uses ``math.ceil`` on a fraction instead of
integer negation. Shape letters: ``...`` leading dims, ``d`` model width, ``f`` hidden width ``d_ff``.
Trade-off: einsum makes the contraction explicit, rather than hiding it in ``nn.Linear``, because that is
what an interviewer wants to see; the cost is one extra bias add. Test: the hidden widths 48 -> 128 and
64 -> 176, agreement with Linear-GELU-Linear, and finite outputs for inputs of 1e4.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
from torch import Tensor, nn

__all__ = ["FeedForward", "SwiGLU", "swiglu_hidden_dim"]


def _positive(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _linear(x: Tensor, layer: nn.Linear) -> Tensor:
    """``x (..., i) -> (..., o)`` with ``layer``'s weight ``(o, i)`` and optional bias."""
    out = torch.einsum("...i,oi->...o", x, layer.weight)                 # (..., o)
    return out if layer.bias is None else out + layer.bias


class FeedForward(nn.Module):
    """``fc2(dropout(gelu(fc1(x))))``, exact GELU; ``(..., d) -> (..., d)``. Raises ValueError on bad sizes."""

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        _positive(d_model, "d_model")
        if d_ff is None:
            d_ff = d_model * 4
        _positive(d_ff, "d_ff")
        if dropout < 0.0 or dropout >= 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
        self.d_model = d_model
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d) -> (..., d)``; ValueError when the last dim of ``x`` is not ``d_model``."""
        if x.dim() == 0 or x.shape[-1] != self.d_model:
            raise ValueError(f"x last dim must be {self.d_model}, got shape {tuple(x.shape)}")
        pre = _linear(x, self.fc1)                                       # (..., f)
        act = 0.5 * pre * (1.0 + torch.erf(pre / math.sqrt(2.0)))
        return _linear(self.drop(act), self.fc2)                         # (..., d)


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """``ceil(floor(8 d / 3) / multiple_of) · multiple_of``; ValueError for non-positive arguments."""
    _positive(d_model, "d_model")
    _positive(multiple_of, "multiple_of")
    base = math.floor(Fraction(8 * d_model, 3))
    return math.ceil(Fraction(base, multiple_of)) * multiple_of


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)``; ``(..., d) -> (..., d)``. Raises ValueError on bad sizes or input width."""

    def __init__(self, d_model: int, d_ff: int | None = None, *, bias: bool = False,
                 multiple_of: int = 8, dropout: float = 0.0) -> None:
        super().__init__()
        _positive(d_model, "d_model")
        _positive(multiple_of, "multiple_of")
        if d_ff is None:
            d_ff = swiglu_hidden_dim(d_model, multiple_of)
        _positive(d_ff, "d_ff")
        if dropout < 0.0 or dropout >= 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
        self.d_model = d_model
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d) -> (..., d)``; ValueError when the last dim of ``x`` is not ``d_model``."""
        if x.dim() == 0 or x.shape[-1] != self.d_model:
            raise ValueError(f"x last dim must be {self.d_model}, got shape {tuple(x.shape)}")
        g = _linear(x, self.w1)                                          # (..., f)
        u = _linear(x, self.w3)                                          # (..., f)
        h = self.drop(g * torch.sigmoid(g) * u)                          # (..., f)
        return _linear(h, self.w2)                                       # (..., d)
