"""Alternative int8 weight-only quantization (#58): the same contract, written differently.

Differences from the reference: the row absmax comes from ``torch.linalg.vector_norm(ord=inf)``, the
zero-scale guard is a masked fill, the matmul is an ``einsum`` against the codes, and ``QLinear`` keeps
its sizes in the buffers only. Shape letters: ``d_out``, ``d_in``. Test: all reference tests pass.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _validate(q: Tensor, scale: Tensor) -> None:
    if q.dtype is not torch.int8 or q.dim() != 2:
        raise ValueError("q must be an int8 matrix")
    if scale.shape != (q.size(0),):
        raise ValueError(f"scale shape {tuple(scale.shape)} != ({q.size(0)},)")
    if torch.any(~(scale > 0)) or not torch.isfinite(scale).all():
        raise ValueError("scale entries must be positive and finite")


def quantize_per_channel(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Absmax per row, symmetric int8."""
    if weight.dim() != 2 or not torch.is_floating_point(weight):
        raise ValueError("weight must be a 2-D float matrix")
    if not torch.isfinite(weight).all():
        raise ValueError("weight has NaN/inf")
    w = weight.detach().float()                                                      # (d_out, d_in)
    scale = torch.linalg.vector_norm(w, ord=float("inf"), dim=-1) / 127.0            # (d_out,)
    scale = scale.masked_fill(scale == 0, 1.0)                                       # (d_out,)
    q = (w / scale.unsqueeze(-1)).round().clamp(min=-127, max=127).to(torch.int8)    # (d_out, d_in)
    return q, scale                                                                  # (d_out, d_in), (d_out,)


def dequantize(q: Tensor, scale: Tensor) -> Tensor:
    """q * scale as float32."""
    _validate(q, scale)
    return torch.einsum("oi,o->oi", q.float(), scale.float())                        # (d_out, d_in)


def int8_weight_only_matmul(x: Tensor, q: Tensor, scale: Tensor, bias: Tensor | None = None) -> Tensor:
    """einsum against the codes, then the per-output scale."""
    _validate(q, scale)
    if x.dim() < 1 or x.size(-1) != q.size(1) or not torch.is_floating_point(x):
        raise ValueError(f"x last dim must equal {q.size(1)}")
    out = torch.einsum("...i,oi->...o", x, q.to(x.dtype)) * scale.to(x.dtype)       # (..., d_out)
    return out if bias is None else out + bias.to(x.dtype)                           # (..., d_out)


class QLinear(nn.Module):
    """int8 linear layer."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        """Zero codes, unit scales."""
        super().__init__()
        self.register_buffer("qweight", torch.zeros((out_features, in_features), dtype=torch.int8))
        self.register_buffer("scale", torch.ones((out_features,)))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> QLinear:
        """Quantize an nn.Linear."""
        new = cls(linear.in_features, linear.out_features, linear.bias is not None)
        new.qweight, new.scale = quantize_per_channel(linear.weight)
        if linear.bias is not None:
            new.bias = nn.Parameter(linear.bias.detach().float().clone())
        return new

    def forward(self, x: Tensor) -> Tensor:
        """Quantized forward."""
        return int8_weight_only_matmul(x, self.qweight, self.scale, self.bias)      # (..., d_out)
