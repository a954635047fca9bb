"""The parent's own comparison of a learner's re-check answers with the reference's (numpy only).

Values are compared structurally, led by the expected value: a dataclass or named tuple field by
field, sequences item by item, tensors and arrays by shape and then by value, with a tolerance set by
the lower precision of the two dtypes (1e-2 for float16/bfloat16, 1e-4 relative for float32, 1e-6
for float64), NaN and infinities in the same places. Types are not compared (the reference tests
already pin dtypes and containers); values are.
"""

from __future__ import annotations

from typing import Any

from pytest_mlcanon.grade.channel import Array, Opaque, Raised, Record

TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-6, 1e-8)}
EXACT = (0.0, 0.0)
MAX_PROBLEMS = 4


def compare(expected: Any, got: Any, where: str = "result") -> list[str]:
    """Differences between the decoded expected and actual values; empty when they agree."""
    problems: list[str] = []
    _compare(expected, got, where, problems)
    return problems[:MAX_PROBLEMS]


def _compare(expected: Any, got: Any, where: str, problems: list[str]) -> None:
    if len(problems) >= MAX_PROBLEMS:
        return
    if isinstance(got, Raised):
        problems.append(f"{where}: raised {got.type}: {got.message}")
        return
    if isinstance(got, Opaque) and not isinstance(expected, Opaque):
        problems.append(f"{where}: returned a {got.type}")
        return
    if isinstance(expected, Record):
        for name, value in expected.fields.items():
            if isinstance(got, Record):
                other = got.fields.get(name, _MISSING)
            elif isinstance(got, dict):
                other = got.get(name, _MISSING)
            else:
                other = _MISSING
            if other is _MISSING:
                problems.append(f"{where}.{name}: missing")
            else:
                _compare(value, other, f"{where}.{name}", problems)
        return
    if isinstance(expected, (tuple, list)):
        items = got.fields.values() if isinstance(got, Record) else got
        if not isinstance(items, (tuple, list)) and not isinstance(got, Record):
            problems.append(f"{where}: expected a sequence of {len(expected)}, got {_kind(got)}")
            return
        items = list(items)
        if len(items) != len(expected):
            problems.append(f"{where}: expected {len(expected)} values, got {len(items)}")
            return
        for index, (want, have) in enumerate(zip(expected, items)):
            _compare(want, have, f"{where}[{index}]", problems)
        return
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            problems.append(f"{where}: expected a mapping, got {_kind(got)}")
            return
        for key, value in expected.items():
            if key not in got:
                problems.append(f"{where}[{key!r}]: missing")
            else:
                _compare(value, got[key], f"{where}[{key!r}]", problems)
        return
    if isinstance(expected, Array) or isinstance(got, Array) or _number(expected):
        _compare_values(expected, got, where, problems)
        return
    if expected != got:
        problems.append(f"{where}: expected {expected!r}, got {_kind(got)}")


_MISSING = object()


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_array(value: Any) -> tuple[Any, str] | None:
    import numpy as np

    if isinstance(value, Array):
        return value.values, value.dtype
    if isinstance(value, bool):
        return np.asarray(value), "bool"
    if isinstance(value, int):
        return np.asarray(value), "int64"
    if isinstance(value, float):
        return np.asarray(value), "float64"
    return None


def _compare_values(expected: Any, got: Any, where: str, problems: list[str]) -> None:
    import numpy as np

    want, have = _as_array(expected), _as_array(got)
    if want is None or have is None:
        problems.append(f"{where}: expected {_kind(expected)}, got {_kind(got)}")
        return
    (w, w_dtype), (h, h_dtype) = want, have
    if w.shape != h.shape:
        problems.append(f"{where}: shape {tuple(h.shape)} instead of {tuple(w.shape)}")
        return
    rtol, atol = _tolerance(w_dtype, h_dtype)
    w64, h64 = w.astype(np.float64), h.astype(np.float64)
    if not np.array_equal(np.isnan(w64), np.isnan(h64)):
        problems.append(f"{where}: NaN where the reference has {'none' if not np.isnan(w64).any() else 'a number'}")
        return
    scale = max(1.0, float(np.max(np.abs(w64[np.isfinite(w64)]), initial=0.0)))
    finite = np.isfinite(w64) & np.isfinite(h64)
    same_inf = np.array_equal(np.isinf(w64), np.isinf(h64)) and np.array_equal(w64[np.isinf(w64)],
                                                                                 h64[np.isinf(h64)])
    close = np.abs(w64[finite] - h64[finite]) <= atol * scale + rtol * np.abs(w64[finite])
    if same_inf and bool(close.all()):
        return
    if not same_inf:
        problems.append(f"{where}: infinities differ from the reference")
        return
    error = np.where(finite, np.abs(w64 - h64), 0.0).reshape(-1)
    flat = int(np.argmax(error))
    at = tuple(int(i) for i in np.unravel_index(flat, w64.shape)) if w64.ndim else ()
    problems.append(f"{where}: off by up to {float(error[flat]):.3g} (at {at}: expected "
                    f"{float(w64.reshape(-1)[flat]):.6g}, got {float(h64.reshape(-1)[flat]):.6g})")


def _tolerance(a: str, b: str) -> tuple[float, float]:
    candidates = [TOLERANCE[d] for d in (a, b) if d in TOLERANCE]
    if not candidates:
        return EXACT
    return max(candidates)


def _kind(value: Any) -> str:
    if isinstance(value, Array):
        return f"a {value.kind} of shape {tuple(value.values.shape)}"
    if isinstance(value, (Opaque, Record)):
        return f"a {value.type}"
    return f"{value!r}"[:60]
