"""Feedback in the learner's terms: what a learner function was called with, in one line.

A failing value check is reported as the learner's function, a summary of the input it was called
with, the expected and the got (``testing.assert_close`` words those), and the learner's line that
produced the value (the shape instrumenter saw it bound there). This module makes the summary:

    attention(q: (2, 4, 8) float32, mask: (2, 4, 4) bool, 1 all-masked row, scale: 0.5)

Each tensor or array is its shape and dtype, then the special values a test probes with: NaN, inf,
large magnitudes (``|x| up to 1e+04``), and for a boolean mask the rows with nothing to attend to.
Other values are their short ``repr``. Nothing here imports torch; values are read through NumPy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

#: Magnitudes from here up are called out (the canon's extreme-input probes use 1e4 and beyond).
LARGE = 1e3
MAX_ARGS = 6
MAX_REPR = 40


def summarize_call(function: str, args: Mapping[str, Any]) -> str:
    """``function(name: summary, ...)``, the first :data:`MAX_ARGS` arguments (``self`` left out)."""
    shown = [(name, value) for name, value in args.items() if name not in ("self", "cls")]
    parts = [f"{name}: {summarize(value)}" for name, value in shown[:MAX_ARGS]]
    if len(shown) > MAX_ARGS:
        parts.append(f"... {len(shown) - MAX_ARGS} more")
    return f"{function}({', '.join(parts)})"


def summarize(value: Any) -> str:
    """One value in a few words: shape, dtype and special values for arrays, else a short repr."""
    array = _as_array(value)
    if array is None:
        text = repr(value) if isinstance(value, (int, float, bool, str, type(None))) else type(value).__name__
        return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."
    dtype = str(getattr(value, "dtype", array.dtype)).removeprefix("torch.")
    head = f"{tuple(array.shape)} {dtype}"
    return ", ".join([head, *_specials(array)])


def _specials(array: np.ndarray) -> list[str]:
    if array.size == 0:
        return ["empty"]
    if array.dtype == np.bool_:
        if array.ndim < 2:
            return ["all False"] if not array.any() else []
        empty_rows = int((~array.any(axis=-1)).sum())
        return [f"{empty_rows} all-masked row{'s' if empty_rows != 1 else ''}"] if empty_rows else []
    if not np.issubdtype(array.dtype, np.number):
        return []
    notes = []
    values = array.astype(np.float64, copy=False)
    if np.isnan(values).any():
        notes.append(f"{int(np.isnan(values).sum())} NaN")
    infinite = np.isinf(values)
    if infinite.any():
        signs = sorted({"+inf" if v > 0 else "-inf" for v in values[infinite].ravel()[:1000]})
        notes.append(f"{int(infinite.sum())} {'/'.join(signs)}")
    finite = values[np.isfinite(values)]
    if finite.size and float(np.max(np.abs(finite))) >= LARGE:
        notes.append(f"|x| up to {float(np.max(np.abs(finite))):.0e}")
    return notes


def _as_array(value: Any) -> np.ndarray | None:
    """A NumPy view of a tensor or array (None for anything else)."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        try:
            tensor = value.detach().cpu()
            if str(tensor.dtype) in ("torch.bfloat16", "torch.float16"):
                tensor = tensor.float()
            return np.asarray(tensor.numpy())
        except Exception:  # a meta, sparse or quantised tensor: shown by its type
            return None
    return None


_QUALIFIED = re.compile(r"\b(?:canon_refs|mlbook)(?:\.\w+)+")


def learner_names(text: str, served: Mapping[str, str]) -> str:
    """``text`` with the names of the learner's own objects shown as theirs.

    The redirect imports ``practice/posttrain/dpo.py`` as ``canon_refs.posttrain.dpo``, so its class
    prints as ``canon_refs.posttrain.dpo.DPOOutput``, which reads as the reference's. ``served`` maps
    each module the learner's file provides (``posttrain/dpo``) to how that file is shown
    (``practice/posttrain/dpo.py``); its names become ``practice/posttrain/dpo.py:DPOOutput`` and the
    module itself ``practice/posttrain/dpo.py``. Names of modules the reference served are left alone.
    """
    def own(match: re.Match[str]) -> str:
        parts = match.group(0).split(".")[1:]
        for cut in range(len(parts), 0, -1):
            shown = served.get("/".join(parts[:cut]))
            if shown is not None:
                rest = ".".join(parts[cut:])
                return f"{shown}:{rest}" if rest else shown
        return match.group(0)

    return _QUALIFIED.sub(own, text)
