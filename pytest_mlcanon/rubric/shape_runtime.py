"""Run-time verification of shape comments (``SHP002``).

While an item's tests run, a line tracer is active for the item's own files only (never site-packages,
never the tests). After each statement that carries a shape comment, it reads the shapes of the
values the statement bound and checks them against the comment. Symbolic dims are bound per call,
as jaxtyping binds them per decorated call: ``B`` keeps one value within a call, numbers must match,
expressions (``C*kh*kw``, ``T_q + 1``) are evaluated, and ``list[N]`` checks a length. When a line
runs again in the same call (a loop), every name first bound at that line or later is unbound first
(canon-spec C4).

Each comment ends up confirmed, contradicted, or never executed; the verdicts of several tests are
merged with ``merge``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from pytest_mlcanon.rubric import shape_grammar
from pytest_mlcanon.rubric.shape_grammar import Shape, ShapeComment
from pytest_mlcanon.rubric.source import Source, load

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
    for node in ast.walk(source.tree):
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
    if isinstance(value, list):
        return "list", len(value)
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
class _CallState:
    """Bindings of one function call, in the order they were made, and the line being checked."""

    bindings: dict[str, int] = field(default_factory=dict)
    bound_at: dict[str, int] = field(default_factory=dict)  # name -> sequence number of its binding
    line_first_seq: dict[int, int] = field(default_factory=dict)
    seq: int = 0
    pending: Annotated | None = None
    raised: bool = False
    contradictions: dict[int, str] = field(default_factory=dict)


@dataclass
class CommentVerdict:
    """What happened to one shape comment during the traced tests."""

    path: str
    line: int
    comment: str
    status: str = "never executed"
    detail: str = ""


class ShapeTracer:
    """A ``sys.settrace`` tracer for the given files; ``start``/``stop`` around one test call."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.statements: dict[str, dict[int, Annotated]] = {}
        for path in files:
            try:
                source = load(path)
            except ValueError:
                continue
            table = annotated_statements(source)
            if table:
                self.statements[str(path.resolve())] = table
        self._codes: dict[Any, dict[int, Annotated] | None] = {}
        self.results: dict[tuple[str, int], tuple[str, str]] = {}
        self._previous: Any = None
        self.active = False

    def start(self) -> bool:
        """Install the tracer; False (and nothing installed) when another tracer already runs."""
        if not self.statements or sys.gettrace() is not None:
            return False
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        self.active = True
        return True

    def stop(self) -> None:
        if self.active:
            sys.settrace(self._previous)
            self.active = False

    def _table_for(self, frame: FrameType) -> dict[int, Annotated] | None:
        """The annotated statements of the frame's code object; None (no line tracing at all) when
        its file is not traced or the code object holds no annotated line."""
        code = frame.f_code
        if code not in self._codes:
            table = self.statements.get(_resolved(code.co_filename))
            if table is not None:
                lines = {line for _, _, line in code.co_lines() if line is not None}
                table = {k: v for k, v in table.items() if k in lines} or None
            self._codes[code] = table
        return self._codes[code]

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        table = self._table_for(frame)
        if table is None:
            return None
        state = _CallState()
        path = _resolved(frame.f_code.co_filename)

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "exception":
                state.raised = True
            elif event == "line":
                state.raised = False
                if state.pending is not None and not (state.pending.line <= frame.f_lineno <= state.pending.end_line):
                    done, state.pending = state.pending, None
                    if done.targets != (None,):
                        self._check(path, done, [_read(frame, t) for t in done.targets], state)
                entered = table.get(frame.f_lineno)
                if entered is not None and state.pending is not entered:
                    self._enter_line(entered.line, state)
                    state.pending = entered
            elif event == "return":
                stmt, state.pending = state.pending, None
                if state.raised:
                    return local  # the call raised (a validation error): its shapes state nothing
                if stmt is not None:
                    if stmt.targets == (None,):
                        self._check(path, stmt, [arg], state)
                    else:
                        self._check(path, stmt, [_read(frame, t) for t in stmt.targets], state)
                for line, detail in state.contradictions.items():
                    self.results[(path, line)] = (CONTRADICTED, detail)
            return local

        return local

    @staticmethod
    def _enter_line(line: int, state: _CallState) -> None:
        """Loop rule: re-running a line unbinds every name first bound at it or later."""
        first = state.line_first_seq.get(line)
        if first is None:
            state.line_first_seq[line] = state.seq
            return
        for name, seq in list(state.bound_at.items()):
            if seq >= first:
                del state.bound_at[name]
                del state.bindings[name]

    def _check(self, path: str, stmt: Annotated, values: list[Any], state: _CallState) -> None:
        if any(v is _MISSING for v in values):
            return
        key = (path, stmt.line)
        try:
            added = match_comment(stmt.comment, values, state.bindings)
        except Mismatch as exc:
            actual = ", ".join(describe(v) for v in values)
            bound = ", ".join(f"{k}={v}" for k, v in state.bindings.items()) or "nothing yet"
            detail = f"line {stmt.line} says {stmt.comment} but the value is {actual} ({exc}); bound: {bound}"
            state.contradictions.setdefault(stmt.line, detail)  # kept only if the call returns normally
            return
        if added is None:
            return
        for name, size in added.items():
            state.bindings[name] = size
            state.bound_at[name] = state.seq
            state.seq += 1
        self.results.setdefault(key, (CONFIRMED, ""))

    def export(self) -> list[list[Any]]:
        """JSON-friendly results for report ``user_properties`` (they cross xdist's wire)."""
        return [[path, line, status, detail] for (path, line), (status, detail) in sorted(self.results.items())]


_MISSING = object()


_COMPILED: dict[str, Any] = {}


def _read(frame: FrameType, target: str | None) -> Any:
    """The value a statement bound to ``target``, read from the frame after the statement ran."""
    if not target:
        return _MISSING
    if target.isidentifier():
        return frame.f_locals.get(target, _MISSING)
    code = _COMPILED.get(target)
    if code is None:
        code = _COMPILED[target] = compile(target, "<shape comment target>", "eval")
    try:
        return eval(code, frame.f_globals, dict(frame.f_locals))  # noqa: S307 - call-free target expression
    except Exception:
        return _MISSING


_RESOLVED: dict[str, str] = {}


def _resolved(filename: str) -> str:
    if filename not in _RESOLVED:
        try:
            _RESOLVED[filename] = str(Path(filename).resolve())
        except OSError:
            _RESOLVED[filename] = filename
    return _RESOLVED[filename]


def merge(files: Iterable[Path], exported: Iterable[list[list[Any]]], display: dict[str, str]) -> list[CommentVerdict]:
    """Merge several tests' results into one verdict per annotated line of ``files``."""
    verdicts: dict[tuple[str, int], CommentVerdict] = {}
    for path in files:
        resolved = str(path.resolve())
        try:
            source = load(path)
        except ValueError:
            continue
        for line, stmt in annotated_statements(source).items():
            verdicts[(resolved, line)] = CommentVerdict(display.get(resolved, resolved), line, stmt.text)
    for results in exported:
        for path, line, status, detail in results:
            verdict = verdicts.get((path, line))
            if verdict is None or verdict.status == CONTRADICTED:
                continue
            verdict.status, verdict.detail = status, detail
    return sorted(verdicts.values(), key=lambda v: (v.path, v.line))
