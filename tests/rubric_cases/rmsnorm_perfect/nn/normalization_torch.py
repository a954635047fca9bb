"""Canon #15: RMSNorm in torch, as a function and as a module (used by the transformer blocks).

RMSNorm rescales each vector by the inverse of its root mean square and then by a learned gain:
``y = x / sqrt(mean(x**2, -1) + eps) * weight``. Unlike LayerNorm it neither subtracts the mean nor
adds a bias, which saves one reduction per token and works as well in practice (Zhang & Sennrich,
2019; LLaMA).

The subtle point is the dtype of the mean square. In float16 the largest finite value is 65504, so
any activation above sqrt(65504) ~ 256 makes ``x**2`` overflow to inf, the reciprocal root becomes
0 and the whole row silently turns into zeros. Half-precision inputs are therefore upcast to
float32 for the reduction and the result is cast back, instead of squaring in the input dtype;
float64 stays float64 so that gradcheck sees full precision. The second point is where eps goes:
inside the square root (``rsqrt(ms + eps)``) rather than added to the root, so an all-zero row gives
exactly zero with a finite gradient and the function agrees with ``torch.nn.functional.rms_norm``.

Shapes: ``...`` any leading dims (batch, time), ``d`` the normalised feature width (last dim).

What to test: the closed form ``[3, 4] -> [0.8485, 1.1314]``, agreement with ``F.rms_norm`` at the
same eps (also for inputs whose scale is comparable to eps, which checks where eps sits), scale
invariance, zeros in -> zeros out, ``gradcheck`` in float64, and the fp16/bf16 probe with
``1000 * randn`` inputs, whose squares overflow float16 unless the reduction is upcast.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_eps(eps: float) -> None:
    if not (eps > 0):
        raise ValueError(f"eps must be > 0, got {eps!r}")


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """Root-mean-square normalisation over the last dimension.

    Args:
        x: ``(..., d)`` floating tensor, at least 1-D.
        weight: optional ``(d,)`` gain (any floating dtype; cast to the compute dtype).
        eps: added to the mean square inside the square root; must be > 0.

    Returns:
        ``(..., d)`` tensor in ``x.dtype``. float16/bfloat16 inputs are computed in float32 and cast
        back (docs/contract.md C5 "upcast"); float32 and float64 are computed in their own dtype.

    Raises:
        ValueError: ``x`` is 0-D, ``weight.numel()`` differs from the last dim of ``x``, or
        ``eps <= 0``.

    Source: Zhang & Sennrich (2019), "Root Mean Square Layer Normalization", eq. 4.
    """
    _check_eps(eps)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (..., d), got a 0-d tensor")
    if weight is not None and weight.numel() != x.shape[-1]:
        raise ValueError(
            f"weight must have d = x.shape[-1] = {x.shape[-1]} elements, got {weight.numel()}"
        )
    compute_dtype = torch.float32 if x.dtype in _LOW_PRECISION else x.dtype
    xc = x.to(compute_dtype)                                   # (..., d)
    ms = xc.pow(2).mean(dim=-1, keepdim=True)                  # (..., 1)
    rstd = torch.rsqrt(ms + eps)                               # (..., 1)
    y = xc * rstd                                              # (..., d)
    if weight is not None:
        y = y * weight.to(compute_dtype).reshape(-1)           # (..., d)
    return y.to(x.dtype)                                       # (..., d)


class RMSNorm(nn.Module):
    """RMSNorm with a learned per-feature gain, initialised to ones (no bias).

    ``forward`` maps ``(..., d) -> (..., d)`` and keeps the input dtype (see :func:`rms_norm`).

    Raises:
        ValueError: in ``__init__`` when ``d < 1`` or ``eps <= 0``; in ``forward`` when the last dim of
        ``x`` differs from ``d``.

    Source: Zhang & Sennrich (2019); the LLaMA blocks use the same layer with eps 1e-6.
    """

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        if d < 1:
            raise ValueError(f"d must be >= 1, got {d}")
        _check_eps(eps)
        self.d = d
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))              # (d,)

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x`` ``(..., d)``; returns ``(..., d)`` in ``x.dtype``.

        Raises:
            ValueError: ``x`` is 0-D or its last dim is not ``d``.
        """
        if x.dim() < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x must have last dim d = {self.d}, got shape {tuple(x.shape)}")
        return rms_norm(x, self.weight, self.eps)              # (..., d)

    def extra_repr(self) -> str:
        """Shown by ``print(module)``: the width and eps."""
        return f"{self.d}, eps={self.eps}"
