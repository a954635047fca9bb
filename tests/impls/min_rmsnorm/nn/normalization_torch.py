"""Canon #15: RMSNorm in torch, as a function and as a module ...

Plan: y = x / sqrt(mean(x^2) + eps) * weight over the last dim, no mean subtraction and no bias.
Half-precision inputs are upcast to float32 for the reduction because squaring fp16 overflows
past ~256 and the mean loses precision; the result is cast back to the input dtype. Tests: output
rms is ~1 per row, matches a float64 reference for fp16/bf16 inputs, gradcheck in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """Root-mean-square normalisation over the last dimension; returns ``(..., d)`` in ``x.dtype``."""
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xf = x.to(compute)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., d)
    if weight is not None:
        y = y * weight.to(compute)
    return y.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learned per-feature gain, initialised to ones (no bias)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d = d
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x`` ``(..., d)``; returns ``(..., d)`` in ``x.dtype``."""
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        """Shown by ``print(module)``: the width and eps."""
        return f"{self.d}, eps={self.eps}"
