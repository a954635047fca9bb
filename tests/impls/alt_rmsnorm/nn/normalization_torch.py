"""Alternative correct RMSNorm (canon #15): the mean square as an einsum dot product, and the
reciprocal root written as ``sqrt(d) / sqrt(||x||^2 + d * eps)`` instead of ``rsqrt(mean + eps)``.

Shapes: ``...`` leading dims, ``d`` normalised width. The reduction runs in float32 for
float16/bfloat16 inputs (and in float64 for float64) because ``x**2`` overflows float16 above 256;
the result is cast back to the input dtype. Test: every nn/rmsnorm reference test must pass.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """``(..., d) -> (..., d)`` RMS normalisation with eps inside the root; returns ``x.dtype``."""
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if x.ndim == 0:
        raise ValueError("x must be at least 1-D")
    d = x.shape[-1]
    if weight is not None and weight.numel() != d:
        raise ValueError(f"weight has {weight.numel()} elements but x has last dim {d}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xw = x.to(work)                                            # (..., d)
    sq = torch.einsum("...i,...i->...", xw, xw)[..., None]     # (..., 1)
    scale = math.sqrt(d) / torch.sqrt(sq + d * eps)            # (..., 1)
    out = xw * scale                                           # (..., d)
    if weight is not None:
        out = torch.einsum("...i,i->...i", out, weight.to(work).flatten())  # (..., d)
    return out.to(x.dtype)                                     # (..., d)


class RMSNorm(nn.Module):
    """RMSNorm module with a ones-initialised gain ``weight (d,)``."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        if d < 1:
            raise ValueError(f"d must be at least 1, got {d}")
        if eps <= 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d))              # (d,)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d) -> (..., d)``; ValueError when the last dim of x is not d."""
        if x.ndim == 0 or x.shape[-1] != self.d:
            raise ValueError(f"x last dim must be {self.d}, got shape {tuple(x.shape)}")
        return rms_norm(x, self.weight, self.eps)              # (..., d)
