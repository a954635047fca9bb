"""Run-time verification of shape comments (``SHP002``): what a comment says, how a value is
matched against it, and how the results of several tests merge into one verdict per comment.

Symbolic dims are bound per call, as jaxtyping binds them per decorated call: ``B`` keeps one value
within a call, numbers must match, expressions (``C*kh*kw``, ``T_q + 1``) are evaluated, and
``list[N]`` checks a length. Each comment ends up confirmed, contradicted, or never executed.
The checks are made by the instrumented code of ``shape_instrument``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mlcanon.rubric import shape_grammar
from pytest_mlcanon.rubric.shape_grammar import Shape, ShapeComment
from pytest_mlcanon.rubric.source import Source, load, walk

CONFIRMED, CONTRADICTED = "confirmed", "contradicted"


@dataclass(frozen=True)
class Annotated:
    """A statement with a shape comment: what it binds and what the comment says."""

    line: int
    end_line: int
    targets: tuple[str | None, ...]  # expressions to read after the statement; None = the returned value
    comment: ShapeComment
    text: str


def annotated_statements(source: Source) -> dict[int, Annotated]:
    """Statements (assignments and returns) whose first line carries a parseable shape comment."""
    found: dict[int, Annotated] = {}
    for node in walk(source.tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
            continue
        comment = source.comment(node.lineno)
        if comment is None or not shape_grammar.looks_like_shape(comment):
            continue
        try:
            parsed = shape_grammar.parse(comment)
        except shape_grammar.ShapeSyntaxError:
            continue
        targets: tuple[str | None, ...]
        if isinstance(node, ast.Return):
            targets = (None,)
        else:
            raw = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = tuple(_target_exprs(raw[-1]))
        found[node.lineno] = Annotated(node.lineno, node.end_lineno or node.lineno, targets, parsed, comment)
    return found


def _target_exprs(target: ast.expr) -> list[str | None]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [_readable(t) for t in target.elts]
    return [_readable(target)]


def _readable(target: ast.expr) -> str:
    """Source of a target that can be read back without side effects ('' when it cannot):
    names, attributes, and subscripts whose parts contain no call (``grads[f"W{l}"]``)."""
    if isinstance(target, ast.Starred) or any(isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr))
                                               for n in ast.walk(target)):
        return ""
    return ast.unparse(target)


def shape_of(value: Any) -> tuple[str, tuple[int, ...] | int] | None:
    """``("array", shape)`` for tensors/arrays, ``("list", len)`` for lists and tuples of values,
    ``("scalar", ())`` for Python numbers; None when the value has no shape to check."""
    shape = getattr(value, "shape", None)
    if shape is not None and not callable(shape):
        try:
            return "array", tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return "scalar", ()
    if isinstance(value, (list, tuple)):
        return "list", len(value)  # chunk/split return tuples; `list[N]` states their length
    return None


class Mismatch(Exception):
    """A value disagrees with the comment; the message names the dim."""


def _eval_dim(expr: ast.expr, bindings: dict[str, int]) -> int | None:
    """Evaluate a dim expression, or None when it uses an unbound name."""
    if isinstance(expr, ast.Constant):
        return expr.value if isinstance(expr.value, int) else None
    if isinstance(expr, ast.Name):
        return bindings.get(expr.id)
    if isinstance(expr, ast.BinOp):
        left, right = _eval_dim(expr.left, bindings), _eval_dim(expr.right, bindings)
        if left is None or right is None:
            return None
        if isinstance(expr.op, ast.Add):
            return left + right
        if isinstance(expr.op, ast.Sub):
            return left - right
        if isinstance(expr.op, ast.Mult):
            return left * right
        if isinstance(expr.op, ast.FloorDiv) and right != 0:
            return left // right
    return None


def match_shape(shape: Shape, actual: tuple[str, tuple[int, ...] | int], bindings: dict[str, int]) -> dict[str, int]:
    """New bindings if ``actual`` fits ``shape`` under ``bindings``; raises Mismatch otherwise."""
    kind, value = actual
    if shape.kind == "scalar":
        if kind == "scalar" or (kind == "array" and value == ()):
            return {}
        raise Mismatch(f"expected a scalar, got shape {value}")
    if shape.kind == "list":
        if kind != "list":
            raise Mismatch(f"expected a list, got {kind} {value}")
        return _match_dims((shape.dims[0],), (int(value),), bindings)  # type: ignore[arg-type]
    if kind == "scalar":
        if shape.dims:
            raise Mismatch(f"expected rank {len(shape.dims)}, got a Python scalar")
        return {}
    if kind != "array":
        raise Mismatch(f"expected an array, got a list of {value}")
    dims = tuple(shape.dims)
    sizes = tuple(value)  # type: ignore[arg-type]
    ellipsis = [i for i, d in enumerate(dims) if d.is_ellipsis]
    if ellipsis:
        i = ellipsis[0]
        head, tail = dims[:i], dims[i + 1 :]
        if len(sizes) < len(head) + len(tail):
            raise Mismatch(f"expected at least {len(head) + len(tail)} dims, got {len(sizes)}")
        new = _match_dims(head, sizes[: len(head)], bindings)
        new.update(_match_dims(tail, sizes[len(sizes) - len(tail) :], {**bindings, **new}))
        return new
    if len(dims) != len(sizes):
        raise Mismatch(f"expected {len(dims)} dims, got {len(sizes)}")
    return _match_dims(dims, sizes, bindings)


def _match_dims(dims: Sequence[shape_grammar.Dim], sizes: Sequence[int], bindings: dict[str, int]) -> dict[str, int]:
    new: dict[str, int] = {}
    pending: list[tuple[shape_grammar.Dim, int]] = []
    for dim, size in zip(dims, sizes):
        expr = dim.expr
        if isinstance(expr, ast.Name) and expr.id not in bindings and expr.id not in new:
            new[expr.id] = size
        else:
            pending.append((dim, size))
    merged = {**bindings, **new}
    for dim, size in pending:
        assert dim.expr is not None
        expected = _eval_dim(dim.expr, merged)
        if expected is None:
            continue  # an expression over names not yet bound cannot be checked
        if expected != size:
            raise Mismatch(f"dim {dim.text} should be {expected}, got {size}")
    return new


def match_comment(comment: ShapeComment, values: Sequence[Any], bindings: dict[str, int]) -> dict[str, int] | None:
    """Bindings added by a match, or None when nothing could be checked; raises Mismatch."""
    if len(comment.values) != len(values):
        if len(values) == 1 and isinstance(values[0], tuple) and len(values[0]) == len(comment.values):
            values = list(values[0])
        elif len(comment.values) == 1 and len(values) > 1:
            return None
        else:
            raise Mismatch(f"the comment lists {len(comment.values)} shape(s) for {len(values)} value(s)")
    added: dict[str, int] = {}
    checked = False
    for alternatives, value in zip(comment.values, values):
        actual = shape_of(value)
        if actual is None:
            continue
        errors = []
        for shape in alternatives:
            try:
                added.update(match_shape(shape, actual, {**bindings, **added}))
                break
            except Mismatch as exc:
                errors.append(str(exc))
        else:
            raise Mismatch("; ".join(errors))
        checked = True
    return added if checked else None


def describe(value: Any) -> str:
    actual = shape_of(value)
    if actual is None:
        return type(value).__name__
    kind, shape = actual
    if kind == "list":
        return f"list of length {shape}"
    if kind == "scalar" or isinstance(shape, int):
        return "a Python scalar"
    return str(tuple(shape)) if len(shape) != 1 else f"({shape[0]},)"


@dataclass
class CommentVerdict:
    """What happened to one shape comment during the traced tests."""

    path: str
    line: int
    comment: str
    status: str = "never executed"
    detail: str = ""


ENTERED = "entered"
NOT_EXERCISED = "not exercised"
#: Rows ``[path, line, TRANSPOSED, "<ndim>"]``: ``.T`` reversed a value of that many dims there (API001).
TRANSPOSED = "full transpose"


def full_transposes(exported: Iterable[list[list[Any]]]) -> dict[tuple[str, int], int]:
    """(resolved path, line) -> the largest ndim that ``.T`` reversed there, over several tests' rows."""
    found: dict[tuple[str, int], int] = {}
    for results in exported:
        for path, line, status, detail in results:
            if status == TRANSPOSED:
                key = (str(path), int(line))
                found[key] = max(found.get(key, 0), int(detail))
    return found


def owner_lines(source: Source) -> dict[int, int]:
    """Annotated line -> first line of the innermost function holding it (0 for module level)."""
    owners: dict[int, int] = {}
    table = annotated_statements(source)

    def visit(node: ast.AST, owner: int) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.lineno if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            if isinstance(child, ast.stmt) and child.lineno in table and child.lineno not in owners:
                owners[child.lineno] = owner
            visit(child, inner)

    visit(source.tree, 0)
    return owners


def merge(files: Iterable[Path], exported: Iterable[list[list[Any]]], display: dict[str, str]) -> list[CommentVerdict]:
    """Merge several tests' results into one verdict per annotated line of ``files``.

    Rows with status ``entered`` name functions the tests called (by first line). A comment inside a
    function the item's tests never called is ``not exercised``: in a module shared by several items
    (#13/#14 in ``normalization.py``) it belongs to the other item, and it does not count.
    """
    verdicts: dict[tuple[str, int], CommentVerdict] = {}
    owners: dict[tuple[str, int], int] = {}
    for path in files:
        resolved = str(path.resolve())
        try:
            source = load(path)
        except ValueError:
            continue
        for line, owner in owner_lines(source).items():
            owners[(resolved, line)] = owner
        for line, stmt in annotated_statements(source).items():
            verdicts[(resolved, line)] = CommentVerdict(display.get(resolved, resolved), line, stmt.text)
    entered: set[tuple[str, int]] = set()
    for results in exported:
        for path, line, status, detail in results:
            if status == ENTERED:
                entered.add((path, line))
                continue
            if status == TRANSPOSED:
                continue
            verdict = verdicts.get((path, line))
            if verdict is None or verdict.status == CONTRADICTED:
                continue
            verdict.status, verdict.detail = status, detail
    for key, verdict in verdicts.items():
        if verdict.status == "never executed" and (key[0], owners.get(key, 0)) not in entered:
            verdict.status = NOT_EXERCISED
    return sorted(verdicts.values(), key=lambda v: (v.path, v.line))
