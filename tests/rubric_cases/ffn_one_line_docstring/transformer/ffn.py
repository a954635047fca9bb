"""GELU and SwiGLU feed-forward layers."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FeedForward", "SwiGLU", "swiglu_hidden_dim"]


def _check_width(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _check_dropout(dropout: float) -> None:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def _check_input(x: Tensor, d_model: int) -> None:
    if x.dim() < 1 or x.shape[-1] != d_model:
        raise ValueError(f"x must have last dim d_model={d_model}, got shape {tuple(x.shape)}")


class FeedForward(nn.Module):
    """The GELU MLP of a transformer block: ``(..., d) -> (..., d)``, ``fc2(dropout(gelu(fc1(x))))``.

    Args:
        d_model: width ``d`` of the input and output.
        d_ff: hidden width, ``4 · d_model`` when None.
        dropout: dropout probability on the hidden activations (training mode only).
        bias: biases in ``fc1`` and ``fc2``.

    Attributes: ``fc1 (d -> d_ff)``, ``fc2 (d_ff -> d)``, float32 parameters; the output keeps the
    input dtype (cast the module to run it in float16 or float64).
    Raises ValueError for ``d_model < 1``, ``d_ff < 1``, ``dropout`` outside [0, 1), and in ``forward``
    for an input whose last dim is not ``d_model``.
    Source: Vaswani et al. 2017, eq. 2, with the exact GELU of Hendrycks & Gimpel 2016 (as in GPT-2/BERT).
    """

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        _check_width(d_model, "d_model")
        d_ff = 4 * d_model if d_ff is None else d_ff
        _check_width(d_ff, "d_ff")
        _check_dropout(dropout)
        self.d_model = d_model
        self.d_ff = d_ff
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d) -> (..., d)``; raises ValueError if the last dim of ``x`` is not ``d_model``."""
        _check_input(x, self.d_model)
        hidden = F.gelu(self.fc1(x))                                     # (..., d_ff)
        return self.fc2(self.dropout(hidden))                            # (..., d)


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """SwiGLU hidden width: ``int(8 · d_model / 3)`` rounded up to a multiple of ``multiple_of``.

    ``swiglu_hidden_dim(48) == 128``, ``(64) == 176``, ``(512) == 1368``. Integer arithmetic only, so no
    float rounding can push an exact multiple one step up. Raises ValueError for ``d_model < 1`` or
    ``multiple_of < 1``. Source: Shazeer 2020 (GLU variants); the rounding is Llama's ``FeedForward``.
    """
    _check_width(d_model, "d_model")
    _check_width(multiple_of, "multiple_of")
    hidden = (8 * d_model) // 3
    return multiple_of * (-(-hidden // multiple_of))


class SwiGLU(nn.Module):
    """Gated feed-forward ``(..., d) -> (..., d)``: ``w2(dropout(silu(w1 x) * w3 x))``.

    Args:
        d_model: width ``d`` of the input and output.
        d_ff: hidden width; ``swiglu_hidden_dim(d_model, multiple_of)`` when None.
        bias: biases in the three projections (Llama has none).
        multiple_of: rounding of the default hidden width.
        dropout: dropout probability on the gated hidden activations (training mode only).

    Attributes: ``w1`` gate ``(d -> d_ff)``, ``w3`` up ``(d -> d_ff)``, ``w2`` down ``(d_ff -> d)``, float32
    parameters; ``3 · d · d_ff`` weights without bias.
    Raises ValueError for ``d_model < 1``, ``d_ff < 1``, ``multiple_of < 1``, ``dropout`` outside [0, 1), and
    in ``forward`` for an input whose last dim is not ``d_model``.
    Source: Shazeer 2020, "GLU Variants Improve Transformer", eq. 6 (FFN_SwiGLU); Touvron et al. 2023.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, *, bias: bool = False,
                 multiple_of: int = 8, dropout: float = 0.0) -> None:
        super().__init__()
        _check_width(d_model, "d_model")
        _check_width(multiple_of, "multiple_of")
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else d_ff
        _check_width(d_ff, "d_ff")
        _check_dropout(dropout)
        self.d_model = d_model
        self.d_ff = d_ff
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d) -> (..., d)``; raises ValueError if the last dim of ``x`` is not ``d_model``."""
        _check_input(x, self.d_model)
        gate = F.silu(self.w1(x))                                        # (..., d_ff)
        up = self.w3(x)                                                  # (..., d_ff)
        hidden = self.dropout(gate * up)                                 # (..., d_ff)
        return self.w2(hidden)                                           # (..., d)
