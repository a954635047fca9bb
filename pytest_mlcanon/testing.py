"""Shared helpers for the reference tests in ``canon_tests/``: tolerances, finite differences, seeded
inputs and the low-precision probe.

One place for all sixty items (docs/contract.md, C1, C8, C9). Nothing here imports torch at module load:
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


#: Units in the last place a careful implementation may be off by per unit of condition: a handful of
#: roundings (a sum, a division, an exp) each cost up to half an ulp, and a reduction over n terms
#: can cost a few more; 16 leaves room for a different but equally good evaluation order.
DEFAULT_ULPS = 16.0

#: The smallest relative tolerance of a value check, whatever the dtype: float32's spacing. A float64
#: check at 16 float64 ulps would reject correct code that adds the guard terms interviews write (an
#: ``eps`` of up to 1e-8 under a norm, inside a log or a square root) or that takes a float32 step
#: on the way; every classic mistake the canon's broken variants make moves a value by far more.
#: float32 and coarser dtypes are above it already.
FLOOR_RTOL = 2.0**-23


@dataclass(frozen=True)
class Tol:
    """An ``(atol, rtol)`` pair, as ``np.testing.assert_allclose`` takes them."""

    atol: float
    rtol: float

    def kw(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


class TOL:
    """The fixed tolerances of docs/contract.md C8. Prefer :func:`assert_close`, which derives the tolerance from
    the dtype and the magnitude compared; a fixed entry is for a check that states why it is safe."""

    EXACT64 = Tol(1e-12, 0.0)  # closed-form value quoted to full precision, float64
    COMPOSITE = Tol(1e-5, 1e-4)  # block, GPT, ViT vs a reference composition, float32
    LOW_PRECISION = Tol(1e-2, 1e-2)  # fp16/bf16 probe vs float32
    FD_STEP = 1e-6  # central finite-difference step, float64
    FD_MAX_REL_ERR = 1e-6  # max relative error of an analytic gradient


def eps(dtype: Any) -> float:
    """Machine epsilon of a NumPy or torch floating dtype (float64 for anything that is not float)."""
    name = str(dtype).rsplit(".", 1)[-1]
    table = {"float16": 2.0**-10, "half": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23,
             "float": 2.0**-23, "single": 2.0**-23}
    return table.get(name, 2.0**-52)


def tolerance(dtype: Any, magnitude: float, *, cond: float = 1.0, ulps: float = DEFAULT_ULPS,
              floor: float = FLOOR_RTOL) -> Tol:
    """The tolerance for comparing values computed in ``dtype`` whose size is about ``magnitude``.

    ``atol = unit * cond * magnitude`` and ``rtol = unit * cond`` with ``unit = max(ulps * eps(dtype),
    floor)``: a few ulps of the values compared (by default never tighter than float32's spacing,
    ``FLOOR_RTOL``; a caller whose ``cond`` already states its whole allowance passes 0), times the
    operation's condition number ``cond`` where the operation amplifies rounding (a softmax of logits
    of size L is off by about ``eps * L`` in absolute terms, so pass ``magnitude=L``; a solve of a
    system of condition k is off by about ``eps * k``). ``magnitude`` is floored at the smallest
    normal number, so a comparison with zeros is never exact.
    """
    unit = max(ulps * eps(dtype), floor) * max(float(cond), 1.0)
    return Tol(atol=unit * max(abs(float(magnitude)), _TINY), rtol=unit)


_TINY = 2.0**-126


def _as_float64(value: Any) -> np.ndarray:
    torch = _torch_if_loaded()
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().to(torch.float64).numpy()
    return np.asarray(value, dtype=np.float64)


def _dtype_of(value: Any) -> Any:
    dtype = getattr(value, "dtype", None)
    if dtype is None:  # a Python float or a list: float64
        return np.float64
    return dtype


def _torch_if_loaded() -> Any:
    import sys

    return sys.modules.get("torch")


class ValueMismatch(AssertionError):
    """:func:`assert_close` failed; ``actual`` is the implementation's value, so the run can name the
    learner's line that produced it (the shape instrumenter saw it bound there)."""

    def __init__(self, message: str, actual: Any) -> None:
        super().__init__(message)
        self.actual = actual


def assert_close(actual: Any, expected: Any, *, dtype: Any = None, magnitude: float | None = None,
                 cond: float = 1.0, ulps: float = DEFAULT_ULPS, what: str = "value") -> None:
    """Assert ``actual`` (the implementation's output) matches ``expected`` (a trusted value).

    Shapes must agree exactly (no broadcasting). The tolerance comes from :func:`tolerance` with
    ``dtype`` (default: ``actual``'s dtype, the precision it was computed in; float64 for Python
    numbers) and ``magnitude`` (default: the largest ``|expected|``). NaN matches NaN only where
    ``expected`` has one; infinities must match exactly. On failure the message names the shape,
    the first differing element with its expected and actual values, and the largest difference;
    the error is a :class:`ValueMismatch`, an ``AssertionError`` that keeps ``actual``.
    """
    __tracebackhide__ = True  # a failure is shown at the test's line, not in here
    got = _as_float64(actual)
    want = _as_float64(expected)
    if got.shape != want.shape:
        raise ValueMismatch(f"{what}: shape {got.shape}, expected {want.shape}", actual)
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]))) if finite.any() else 1.0
    tol = tolerance(dtype if dtype is not None else _dtype_of(actual),
                    scale if magnitude is None else magnitude, cond=cond, ulps=ulps)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got - want)
    with np.errstate(invalid="ignore"):
        close = np.where(finite, diff <= tol.atol + tol.rtol * np.abs(want), False)  # NaN in got is never close
    bad = ~(close | (got == want) | (np.isnan(got) & np.isnan(want)))  # infinities and NaN must match exactly
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    finite_diff = np.where(np.isfinite(diff), diff, np.inf)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(finite_diff)), diff.shape)) if diff.size else ()
    where = f" at index {first}" if first else ""
    raise ValueMismatch(
        f"{what}{where}: got {float(got[first])!r}, expected {float(want[first])!r} ({int(bad.sum())} of {bad.size} elements "
        f"differ; largest difference {finite_diff[worst]:.3g} at {worst}; tolerance atol={tol.atol:.3g}, "
        f"rtol={tol.rtol:.3g})", actual)


def call_leaves_inputs_unchanged(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` and assert it did not modify any tensor or array argument; return its result.

    Each argument is copied before the call and compared bit for bit afterwards (tensors and arrays
    inside lists, tuples and dicts included), so a function that normalises, sorts or masks its input
    in place fails here, naming the argument, rather than somewhere later.
    """
    import copy

    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", v) for k, v in kwargs.items()]
    before = copy.deepcopy([value for _, value in named])
    result = fn(*args, **kwargs)
    for (name, now), then in zip(named, before):
        for a, b in _leaves(now, then):
            assert _same_bits(a, b), f"{getattr(fn, '__name__', 'the function')} modified its {name} in place"
    return result


def _leaves(now: Any, then: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(now, dict) and isinstance(then, dict):
        # only the arrays the caller passed count: a key the function added to (or dropped from) its
        # own cache dict modifies no tensor
        for key in then.keys() & now.keys():
            yield from _leaves(now[key], then[key])
    elif isinstance(now, (list, tuple)):
        for a, b in zip(now, then):
            yield from _leaves(a, b)
    else:
        yield now, then


def _same_bits(now: Any, then: Any) -> bool:
    torch = _torch_if_loaded()
    if torch is not None and isinstance(now, torch.Tensor):
        return bitwise_equal(now.detach(), then.detach())
    if isinstance(now, np.ndarray):
        return now.shape == then.shape and now.dtype == then.dtype and now.tobytes() == then.tobytes()
    return True


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
    grad = np.zeros(x.shape, dtype=np.float64)
    for index in np.ndindex(x.shape):  # x itself, whatever its layout (a transposed view is not reshaped to a copy)
        saved = x[index]
        x[index] = saved + h
        plus = float(f())
        x[index] = saved - h
        minus = float(f())
        x[index] = saved
        grad[index] = (plus - minus) / (2.0 * h)
    return grad


def assert_grad_matches(
    f: Callable[[], float], x: np.ndarray, analytic: np.ndarray, max_rel_err: float = TOL.FD_MAX_REL_ERR
) -> None:
    """Assert that ``analytic`` matches the central finite difference of ``f`` w.r.t. ``x`` (C8)."""
    numeric = numeric_grad(f, x)
    err = rel_error(analytic, numeric)
    assert err <= max_rel_err, f"analytic gradient off: max rel err {err:.3e} > {max_rel_err:.0e}"


def optional_module(name: str) -> Any:
    """The module ``name``, or the calling test skipped when it is missing or broken: a third-party
    library a test compares with (torchvision, scipy, scikit-learn) whose install fails to load
    (torchvision built for another torch raises RuntimeError at import) is the machine's problem, never a
    failure of the learner's item, as ``pytest.importorskip`` (ImportError only) would make it."""
    import importlib

    import pytest

    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure to load the library skips the comparison
        pytest.skip(f"could not import {name}: {type(exc).__name__}: {str(exc)[:200]}")


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
    return torch.equal(after.reshape(-1).view(torch.uint8), before.reshape(-1).view(torch.uint8))  # 0-d too


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


@contextlib.contextmanager
def returns_within(cpu_seconds: float, what: str) -> Iterator[None]:
    """Fail the test (``pytest.fail``) when the block uses more than ``cpu_seconds`` of CPU time.

    For a call that a missing argument check turns into an endless loop (a chunk step of 0): the check
    ends as a failed test naming ``what`` instead of hanging the run while the loop fills memory. CPU
    time, not wall time, so a loaded machine does not trip it; the failure is a ``BaseException``, so an
    ``except Exception`` in the loop or a surrounding ``pytest.raises(ValueError)`` does not swallow it,
    and it repeats every 0.1 s until the block ends. POSIX main thread only; elsewhere the block runs
    unguarded.
    """
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        import pytest

        pytest.fail(f"{what} did not return within {cpu_seconds:g} s of CPU time (an endless loop?)",
                    pytrace=False)

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds, 0.1)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0.0)
        signal.signal(signal.SIGPROF, previous)


def copy_linear(dst: Any, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """Copy ``weight`` (and ``bias``) into an ``nn.Linear`` without tracking gradients."""
    import torch

    with torch.no_grad():
        dst.weight.copy_(weight)
        if bias is not None:
            dst.bias.copy_(bias)
