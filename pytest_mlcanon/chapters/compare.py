"""Run a chapter's code snippet, and say whether two results agree.

A snippet is Python whose last statement is an expression: ``x.sum(axis=1, keepdims=True)``, or
``e = np.exp(x - x.max(-1, keepdims=True)); e / e.sum(-1, keepdims=True)``. The text shown in the
cheat sheet is the text executed, so a row cannot drift from what it claims.

Results agree when they have the same structure (an array, or a tuple of them), the same kind of
number (floating, integer, boolean), the same shape and, for floats, values within the tolerance of
:func:`pytest_mlcanon.testing.tolerance` for the coarser of the two dtypes and the magnitude
compared; integers and booleans must be equal. Nothing tighter than float spacing is asked.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

import numpy as np

from pytest_mlcanon.chapters import DataError
from pytest_mlcanon.testing import assert_close


def evaluate(code: str, namespace: Mapping[str, Any], where: str = "<snippet>") -> Any:
    """Execute ``code`` in a copy of ``namespace`` and return the value of its last expression."""
    try:
        tree = ast.parse(code, filename=where, mode="exec")
    except SyntaxError as exc:
        raise DataError(f"{where}: {exc.msg}: {code!r}") from None
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise DataError(f"{where}: the snippet must end with an expression, the value it produces: {code!r}")
    *statements, last = tree.body
    scope = dict(namespace)
    exec(compile(ast.Module(body=statements, type_ignores=[]), where, "exec"), scope)  # noqa: S102 - our own data
    assert isinstance(last, ast.Expr)
    return eval(compile(ast.Expression(body=last.value), where, "eval"), scope)  # noqa: S307 - our own data


def plain(value: Any) -> Any:
    """A result as NumPy: tensors and scalars become arrays, tuples and lists become lists of them."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return np.asarray(value)


def kind(array: np.ndarray) -> str:
    if array.dtype == np.bool_:
        return "bool"
    if np.issubdtype(array.dtype, np.integer):
        return "integer"
    if np.issubdtype(array.dtype, np.floating):
        return "floating"
    return str(array.dtype)


def difference(got: Any, want: Any, *, mode: str = "values", cond: float = 1.0, what: str = "result") -> str:
    """Why ``got`` does not agree with ``want`` (one line), or ``""`` when it does.

    ``mode``: ``"values"`` compares everything; ``"sorted"`` compares the sorted values (a permutation);
    ``"shape"`` only the structure, kind and shape (random draws).
    """
    got, want = plain(got), plain(want)
    if isinstance(want, list) or isinstance(got, list):
        if not (isinstance(want, list) and isinstance(got, list)):
            return f"{what}: got {_structure(got)}, expected {_structure(want)}"
        if len(got) != len(want):
            return f"{what}: got {len(got)} values, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            reason = difference(g, w, mode=mode, cond=cond, what=f"{what}[{i}]")
            if reason:
                return reason
        return ""
    if kind(got) != kind(want):
        return f"{what}: got {kind(got)} values ({got.dtype}), expected {kind(want)} ({want.dtype})"
    if got.shape != want.shape:
        return f"{what}: got shape {_shape(got.shape)}, expected {_shape(want.shape)}"
    if mode == "shape":
        return ""
    if mode == "sorted":
        got, want = np.sort(got, axis=None), np.sort(want, axis=None)
    if kind(want) != "floating":
        if np.array_equal(got, want):
            return ""
        first = tuple(int(i) for i in np.argwhere(got != want)[0])
        return f"{what} at index {first}: got {got[first].item()!r}, expected {want[first].item()!r}"
    coarser = got.dtype if np.finfo(got.dtype).eps >= np.finfo(want.dtype).eps else want.dtype
    try:
        assert_close(got, want, dtype=coarser, cond=cond, what=what)
    except AssertionError as exc:
        return str(exc)
    return ""


def _shape(shape: tuple[int, ...]) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(str(s) for s in shape)})"


def _structure(value: Any) -> str:
    return f"{len(value)} values" if isinstance(value, list) else f"one array of shape {_shape(value.shape)}"
