"""int8 weight-only quantization of a linear layer: per-output-channel absmax scales (canon item ...

Plan: one absmax scale per output row instead of one per tensor, because a single outlier row would
otherwise crush the resolution of every other row; codes are round(w / scale) clamped to
[-127, 127] (symmetric, -128 unused). The matmul runs on the codes cast to the activation dtype
and scales the output columns afterwards, which is exact for the cast. Tests: round-trip error
<= scale / 2 per entry, zero rows get scale 1, QLinear matches nn.Linear within the quantization error.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def quantize_per_channel(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric absmax int8 quantization, one scale per output row: ``(q (out, in), scale (out,))``."""
    w = weight.detach().to(torch.float32)
    amax = w.abs().amax(dim=1)  # (out,)
    scale = amax / 127.0  # (out,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # a subnormal absmax can underflow
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)  # (out, in)
    return q, scale


def dequantize(q: Tensor, scale: Tensor) -> Tensor:
    """Float32 weight ``q * scale``, ``(out, in)``."""
    return q.to(torch.float32) * scale.to(torch.float32)[:, None]


def int8_weight_only_matmul(x: Tensor, q: Tensor, scale: Tensor, bias: Tensor | None = None) -> Tensor:
    """``(x @ q.T) * scale (+ bias)`` in ``x.dtype``, the scale applied after the matmul."""
    y = (x @ q.to(x.dtype).T) * scale.to(x.dtype)  # (..., out)
    if bias is not None:
        y = y + bias.to(x.dtype)
    return y


class QLinear(nn.Module):
    """A linear layer with int8 weights (buffers) and a float bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        """Empty layer (codes 0, scales 1, bias 0); fill it with :meth:`from_linear`."""
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("qweight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.ones(out_features, dtype=torch.float32))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> QLinear:
        """Quantize ``linear.weight`` per output channel and copy its bias (as float32)."""
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        q, scale = quantize_per_channel(linear.weight)
        layer.qweight.copy_(q)
        layer.scale.copy_(scale)
        if linear.bias is not None:
            layer.bias.data.copy_(linear.bias.detach().to(torch.float32))
        return layer.to(linear.weight.device)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., in)`` -> ``(..., out)`` in ``x.dtype``."""
        return int8_weight_only_matmul(x, self.qweight, self.scale, self.bias)

    def extra_repr(self) -> str:
        """The sizes shown by ``repr(layer)``."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
