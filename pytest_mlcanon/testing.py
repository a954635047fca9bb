"""Shared helpers for the reference tests in ``canon_tests/``: tolerances, finite differences, seeded
inputs and the low-precision probe.

One place for all sixty items (canon-spec C1, C8, C9). Nothing here imports torch at module load:
the torch helpers import it when they are called, so NumPy-only items never pay for it.

Markers the rubric reads (registered by the plugin):

* ``@pytest.mark.numerics_probe``: an extreme-input probe; counts toward the Numerics axis.
* ``@pytest.mark.edge_case``: an edge case (empty input, batch of one, single box); counts toward
  Correctness and is listed separately in the report.
* ``@pytest.mark.canon("posttrain/dpo")``: ties a test to an item where a test file holds several.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Tol:
    """An ``(atol, rtol)`` pair, as ``np.testing.assert_allclose`` takes them."""

    atol: float
    rtol: float

    def kw(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


class TOL:
    """The default tolerance table of canon-spec C8."""

    EXACT64 = Tol(1e-12, 0.0)  # closed-form value quoted to full precision, float64
    NUMPY_VS_REF = Tol(1e-10, 1e-8)  # NumPy item vs a torch / SciPy reference op, float64
    TORCH_OP = Tol(1e-6, 1e-5)  # torch function vs one torch op, float32
    COMPOSITE = Tol(1e-5, 1e-4)  # block, GPT, ViT vs a reference composition, float32
    LOW_PRECISION = Tol(1e-2, 1e-2)  # fp16/bf16 probe vs float32
    FD_STEP = 1e-6  # central finite-difference step, float64
    FD_MAX_REL_ERR = 1e-6  # max relative error of an analytic gradient


def rounded_close(value: float, quoted: float, decimals: int) -> bool:
    """C8: a value quoted rounded to ``decimals`` places matches when ``|err| <= 0.5e-decimals``."""
    return abs(float(value) - quoted) <= 0.5 * 10.0**-decimals


def rel_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """Max of ``|a - n| / max(1e-8, |a| + |n|)`` over entries (C8's relative error)."""
    a = np.asarray(analytic, dtype=np.float64)
    n = np.asarray(numeric, dtype=np.float64)
    if a.shape != n.shape:
        raise ValueError(f"analytic shape {a.shape} differs from numeric shape {n.shape}")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - n) / np.maximum(1e-8, np.abs(a) + np.abs(n))))


def numeric_grad(f: Callable[[], float], x: np.ndarray, h: float = TOL.FD_STEP) -> np.ndarray:
    """Central finite differences of the scalar ``f()`` w.r.t. the array ``x``, perturbed in place.

    ``x`` must be a float64 array that ``f`` reads; every entry is restored after its probe.
    """
    if x.dtype != np.float64:
        raise ValueError(f"x must be float64 for finite differences, got {x.dtype}")
    grad = np.zeros_like(x)
    flat_x = x.reshape(-1)
    flat_g = grad.reshape(-1)
    for i in range(flat_x.size):
        saved = flat_x[i]
        flat_x[i] = saved + h
        plus = float(f())
        flat_x[i] = saved - h
        minus = float(f())
        flat_x[i] = saved
        flat_g[i] = (plus - minus) / (2.0 * h)
    return grad


def assert_grad_matches(
    f: Callable[[], float], x: np.ndarray, analytic: np.ndarray, max_rel_err: float = TOL.FD_MAX_REL_ERR
) -> None:
    """Assert that ``analytic`` matches the central finite difference of ``f`` w.r.t. ``x`` (C8)."""
    numeric = numeric_grad(f, x)
    err = rel_error(analytic, numeric)
    assert err <= max_rel_err, f"analytic gradient off: max rel err {err:.3e} > {max_rel_err:.0e}"


def rng(seed: int = 0) -> np.random.Generator:
    """A fresh NumPy generator (C7)."""
    return np.random.default_rng(seed)


def randn(*shape: int, seed: int = 0, dtype: Any = None, requires_grad: bool = False) -> torch.Tensor:
    """A seeded standard-normal torch tensor, float32 unless ``dtype`` says otherwise."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = torch.randn(*shape, generator=gen, dtype=dtype or torch.float32)
    return out.requires_grad_(requires_grad)


def bitwise_equal(after: torch.Tensor, before: torch.Tensor) -> bool:
    """Same shape, dtype and bytes. Unlike ``torch.equal`` this holds for a buffer that was never
    written (``torch.empty``), whose garbage may contain NaN, and NaN never equals itself."""
    import torch

    if after.shape != before.shape or after.dtype != before.dtype:
        return False
    return torch.equal(after.contiguous().view(torch.uint8), before.contiguous().view(torch.uint8))


def random_xyxy(n: int, seed: int, dtype: Any = None, *, min_side: float = 1.0,
                max_side: float = 41.0) -> torch.Tensor:
    """``n`` valid xyxy boxes (float64 unless ``dtype``): corners in [0, 100), sides in [min_side, max_side)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    dtype = dtype or torch.float64
    xy = torch.rand(n, 2, generator=gen, dtype=dtype) * 100
    wh = torch.rand(n, 2, generator=gen, dtype=dtype) * (max_side - min_side) + min_side
    return torch.cat([xy, xy + wh], dim=1)


def iou_pair(a: list[float], b: list[float]) -> float:
    """IoU of two xyxy boxes in plain Python floats: a check independent of any item's ``box_iou``."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def low_precision_dtype() -> torch.dtype | None:
    """float16 when the CPU kernels support it, else bfloat16, else None (C9's fp16 probe)."""
    import torch

    for dtype in (torch.float16, torch.bfloat16):
        try:
            a = torch.ones(2, 2, dtype=dtype)
            (a @ a).softmax(-1).exp()
        except (RuntimeError, TypeError):
            continue
        return dtype
    return None


def assert_low_precision_matches(fn: Callable[..., Any], *inputs: torch.Tensor) -> None:
    """C9's fp16 probe: ``fn`` run in float16 (or bfloat16) is finite and matches float32 at 1e-2.

    ``fn`` receives the inputs cast to the probe dtype and returns a tensor or a tuple of tensors.
    Skips the calling test when neither low-precision dtype has CPU kernels.
    """
    import pytest
    import torch

    dtype = low_precision_dtype()
    if dtype is None:
        pytest.skip("neither float16 nor bfloat16 kernels on this CPU")
    ref = _as_tuple(fn(*[t.float() if t.is_floating_point() else t for t in inputs]))
    low = _as_tuple(fn(*[t.to(dtype) if t.is_floating_point() else t for t in inputs]))
    for got, want in zip(low, ref):
        assert torch.isfinite(got).all(), f"{dtype} forward produced non-finite values"
        tol = TOL.LOW_PRECISION
        torch.testing.assert_close(got.float(), want.float(), atol=tol.atol, rtol=tol.rtol)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@contextlib.contextmanager
def strict_numpy() -> Iterator[None]:
    """C9: NumPy floating-point warnings become errors inside the block."""
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        yield


def copy_linear(dst: Any, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """Copy ``weight`` (and ``bias``) into an ``nn.Linear`` without tracking gradients."""
    import torch

    with torch.no_grad():
        dst.weight.copy_(weight)
        if bias is not None:
            dst.bias.copy_(bias)
