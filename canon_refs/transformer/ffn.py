"""Canon #36: the position-wise feed-forward networks of a transformer block, GELU and SwiGLU.

``FeedForward`` is the original two-layer MLP, ``fc2(dropout(gelu(fc1(x))))`` with the exact (erf)
GELU and a hidden width of ``4d``. ``SwiGLU`` is the gated variant of PaLM and Llama:
``w2(silu(w1 x) * w3 x)``, where ``w1`` produces the gate, ``w3`` the value ("up") and ``w2`` projects
back down. Both act on the last dim only, so any leading dims pass through.

The subtle point is which branch goes through the nonlinearity and how wide the hidden layer is. Only
the gate ``w1 x`` is passed through SiLU; the up branch ``w3 x`` stays linear, so zeroing ``w3`` zeroes
the whole output, and swapping the two branches gives a different function with the same shapes. The
hidden width is ``8d/3`` rather than ``4d`` because SwiGLU has three matrices instead of two:
``3 · d · 8d/3 = 8d²`` keeps the parameter count of the 4d GELU MLP. ``swiglu_hidden_dim`` rounds
``int(8d/3)`` *up* to a multiple of ``multiple_of`` (8 here, 256 in Llama) for matmul-friendly sizes:
``64 -> 176``, ``512 -> 1368``.

Shape letters: ``...`` any leading dims (batch, time), ``d`` model width, ``d_ff`` hidden width.

Trade-off: the GELU is the exact ``erf`` form instead of the tanh approximation, because that is what
``nn.GELU()`` and ``nn.TransformerEncoderLayer(activation="gelu")`` compute, and the tanh form differs
from it by up to ~5e-4 per activation, far above the 1e-5 tolerance of the block tests (#29). SiLU is
``F.silu``, which is finite for inputs of ±1e4; the hand-written ``exp(x) / (1 + exp(x))`` gives
``inf / inf = NaN`` there.

What to test: the three quoted hidden widths, the forward against the formula written with ``F.silu``
and ``FeedForward`` against Linear-GELU-Linear, the parameter count ``3 · d · d_ff`` (within 5% of
``8d²``), that zeroing ``w3`` zeroes the output, ``gradcheck`` in float64, float32 inputs of ±1e4, and
the float16 probe on unit-scale inputs.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FeedForward", "SwiGLU", "swiglu_hidden_dim"]


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
    in ``forward`` for an input whose last dim is not ``d_model``. Outputs and their gradients stay finite for
    float32 inputs of ``±1e4`` (a numerics probe).
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


def _check_width(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _check_dropout(dropout: float) -> None:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def _check_input(x: Tensor, d_model: int) -> None:
    if x.dim() < 1 or x.shape[-1] != d_model:
        raise ValueError(f"x must have last dim d_model={d_model}, got shape {tuple(x.shape)}")
