"""Run-time shape checks by instrumenting only the annotated lines (an import-hook AST rewrite, as
jaxtyping does), instead of tracing every line: the overhead is one call per annotated statement.

The redirect's loader compiles a learner (or reference) file through ``instrument``:

* every function (and the module body) that holds annotated statements or returns a value opens a
  ``Scope``, which binds symbolic dims for that call;
* after ``x = ...  # (B, T, d)`` it inserts ``__mlcanon_scope.check(LINE, (x,))``;
* ``return y  # (B,)`` becomes ``return __mlcanon_scope.ret(LINE, y)``, and a return without a
  comment ``return __mlcanon_scope.done(LINE, y)``: either ends the call normally and commits it;
* falling off the end of a function commits the call;
* every ``<expr>.T`` that is read becomes ``__mlcanon__.transposed(<expr>, LINE)``, which records
  the operand's ``ndim`` when it is above 2 (a silent full transpose, ``API001``: the static rule
  cannot know the rank of an argument or a call result) and returns ``<expr>.T`` unchanged.

A contradiction or a confirmation is provisional until its call returns normally: a call that raises
(a validation error on bad input, or a crash further down) proves nothing about shapes; a full
transpose is recorded as soon as it happens. A value of another rank than its comment
(``OTHER_FORM``) is wrong only when no call confirms the comment: a comment may describe one of the
call forms a docstring allows (``(B,) or ()``).
Within one test, the first ``CHECKED_CALLS_PER_TEST`` calls of a function are checked, and after them
only a call of a *form* not seen yet in the test (the ranks and dtypes of its arguments: the batched call
after the unbatched ones, the float16 probe after the float32 calls), up to ``MAX_CHECKED_CALLS_PER_TEST``;
other calls (the 500th Lloyd step, the 40th decoding step, the 4th forward pass of a training step) run
unchecked, whole calls at a time so that no call is half bound. They repeat the shapes the first calls
saw; checking each cost ~1.4x on k-means, and checking calls 3 to 8 of each form cost the DPO tests
0.03 s of their 0.55 s of CPU.

Each value bound on an instrumented line or returned is also noted (by identity, weakly) with its
line and the call it ran in, so a failed value check (``testing.ValueMismatch``) can name the learner's
line that produced the value it compared, and the arguments of that call (17.5).

Results go to a :class:`Recorder`, the one the redirect's finder hands every instrumented module;
the run's record job resets it before each test and takes the test's trace after it. Line numbers
are preserved, so tracebacks and coverage still point at the learner's lines. Nothing is written to
``__pycache__``.
"""

from __future__ import annotations

import ast
import functools
import sys
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mlcanon.evidence import NonFinite, ShapeCheck, ShapeStatus, ShapeTrace, Transpose, stronger
from pytest_mlcanon.rubric.shape_runtime import (
    Annotated,
    Mismatch,
    RankMismatch,
    annotated_statements,
    describe,
    match_statement,
)
from pytest_mlcanon.rubric.source import Source, call_name, dotted

RUNTIME_NAME = "__mlcanon__"
SCOPE_NAME = "__mlcanon_scope"
MISSING = object()

CHECKED_CALLS_PER_TEST = 2
MAX_CHECKED_CALLS_PER_TEST = 8
RETURNED_ELEMENTS = 8  # the elements of a returned tuple whose origin is noted
GIVEN_ELEMENTS = 64  # the elements of a list argument a helper may hand back unchanged


class Recorder:
    """What the instrumented files saw during the current test, keyed by (resolved path, line)."""

    def __init__(self) -> None:
        #: each checked line's status and, when contradicted, how
        self.checks: dict[tuple[str, int], tuple[ShapeStatus, str]] = {}
        #: the first annotated line whose value held NaN or inf: (path, line, its comment)
        self.first_nonfinite: tuple[str, int, str] | None = None
        #: whether to look for it: the run sets this per test, for its numerics probes only (the one place
        #: it is read: ``numerics``' NUM100); a scan of every value costs two tensor ops per check
        self.watch_nonfinite = True
        #: scopes (path, first line of the function; 0 for the module) entered
        self.entered: set[tuple[str, int]] = set()
        #: the largest ndim (> 2) of a value ``.T`` was applied to, per line (API001)
        self.transposed: dict[tuple[str, int], int] = {}
        #: checked calls per scope (path, first line), and the forms of their arguments
        self.calls: dict[tuple[str, int], int] = {}
        self.forms: dict[tuple[str, int], set[tuple[Any, ...]]] = {}
        #: the values bound on instrumented lines or returned, by id: where each came from
        self.produced: dict[int, Produced] = {}
        #: no call is checked while set (the grader's re-check runs the learner's code outside any test)
        self.paused = False

    def record(self, key: tuple[str, int], status: ShapeStatus, detail: str) -> None:
        """One line's status in this test: the stronger one stands (``evidence.stronger``)."""
        known = self.checks.get(key)
        if known is None or stronger(status, known[0]) is not known[0]:
            self.checks[key] = (status, detail)

    def reset(self) -> None:
        """Forget the current test's results (before each test, and by ``take``)."""
        self.checks.clear()
        self.first_nonfinite = None
        self.entered.clear()
        self.transposed.clear()
        self.calls.clear()
        self.forms.clear()
        self.produced.clear()

    def note(self, value: Any, path: str, line: int, call: Call, *, first: bool = False) -> None:
        """Remember that ``value`` (a tensor or an array) was produced at ``path:line`` in ``call``; with
        ``first``, a value this call already noted keeps its line (a returned array names the line that
        bound it or last wrote into it, not the ``return``)."""
        if getattr(value, "shape", None) is None:
            return
        if first:
            known = self.produced.get(id(value))
            if known is not None and known.call is call and known.ref() is value:
                return
        try:
            ref = weakref.ref(value)
        except TypeError:
            return
        self.produced[id(value)] = Produced(ref, path, line, call)

    def origin(self, value: Any) -> Produced | None:
        """Where ``value`` came from: the learner's line that bound or returned it (or the array it is
        a view of), when an instrumented line of the current test did; None otherwise."""
        for candidate in (value, getattr(value, "_base", None), getattr(value, "base", None)):
            found = self.produced.get(id(candidate)) if candidate is not None else None
            if found is not None and found.ref() is candidate:
                return found
        return None

    def take(self, files: Mapping[str, str]) -> tuple[ShapeTrace, NonFinite | None]:
        """The current test's trace, then forget it. ``files`` maps the resolved path of each file of
        interest to its module file (``posttrain/dpo.py``); rows of other files are dropped."""
        trace = ShapeTrace(
            tuple(ShapeCheck(files[path], line, status, detail)
                  for (path, line), (status, detail) in sorted(self.checks.items()) if path in files),
            tuple((files[path], line) for path, line in sorted(self.entered) if path in files),
            tuple(Transpose(files[path], line, ndim)
                  for (path, line), ndim in sorted(self.transposed.items()) if path in files))
        first = self.first_nonfinite
        nonfinite = NonFinite(files[first[0]], first[1], first[2]) if first and first[0] in files else None
        self.reset()
        return trace, nonfinite


@dataclass(frozen=True)
class Call:
    """One call of an instrumented learner function: its name (``Adam.step`` for a method) and the
    arguments it was called with; ``nested`` when another instrumented function called it (a helper
    such as ``_check_params``), not the test."""

    function: str
    args: dict[str, Any]
    nested: bool = False


@dataclass(frozen=True)
class Produced:
    """A value an instrumented line bound or returned: the line and the call it ran in."""

    ref: weakref.ref[Any]
    path: str
    line: int
    call: Call


def _has_nonfinite(value: Any) -> bool:
    """True for a floating tensor or array holding NaN or inf (other values are never flagged)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or not getattr(dtype, "is_floating_point", getattr(dtype, "kind", "") == "f"):
        return False
    try:
        if hasattr(value, "isfinite"):
            return not bool(value.isfinite().all())
        import numpy as np

        return not bool(np.isfinite(value).all())
    except Exception:  # noqa: BLE001 - exotic array types are simply not checked
        return False


@dataclass
class Scope:
    """Dim bindings of one call, with the loop rule of docs/contract.md C4."""

    path: str
    table: dict[int, Annotated]
    recorder: Recorder
    call: Call
    bindings: dict[str, int] = field(default_factory=dict)
    bound_at: dict[str, int] = field(default_factory=dict)
    line_first_seq: dict[int, int] = field(default_factory=dict)
    seq: int = 0
    contradictions: dict[int, tuple[ShapeStatus, str]] = field(default_factory=dict)
    confirmations: set[int] = field(default_factory=set)

    def check(self, line: int, values: tuple[Any, ...]) -> None:
        """Check the values bound at ``line`` against its comment, and note where they came from
        (never raises)."""
        try:
            for value in values:
                self.recorder.note(value, self.path, line, self.call)
            self._check(line, values)
        except Exception:  # noqa: BLE001 - the checker must never break the learner's code
            pass

    def ret(self, line: int, value: Any) -> Any:
        """Check a returned value, commit the call, and hand the value back."""
        try:
            self._note_returned(line, value)
            self._check(line, (value,))
        except Exception:  # noqa: BLE001 - as check
            pass
        self.commit()
        return value

    def done(self, line: int, value: Any) -> Any:
        """A return without a shape comment: note the value's line, commit the call, hand it back."""
        try:
            self._note_returned(line, value)
        except Exception:  # noqa: BLE001 - as check
            pass
        self.commit()
        return value

    def wrote(self, line: int, value: Any) -> None:
        """``value[...] = ...`` at ``line``: the array's values now come from this line."""
        try:
            self.recorder.note(value, self.path, line, self.call)
        except Exception:  # noqa: BLE001 - as check
            pass

    def _note_returned(self, line: int, value: Any) -> None:
        """The returned value, and each element of a returned tuple or list (``return advantages,
        returns``), unless this call already noted where it came from. A helper that hands back what
        it was given (``_check_params(params)`` returning the same arrays) did not produce it: a value
        another learner function passed it keeps the place it had."""
        values = value[:RETURNED_ELEMENTS] if isinstance(value, (tuple, list)) else (value,)
        given = _given(self.call) if self.call.nested else set()
        for each in values:
            if id(each) not in given:
                self.recorder.note(each, self.path, line, self.call, first=True)

    def commit(self) -> None:
        """The call returned normally: its contradictions stand, unless the call was made inside a
        ``pytest.raises`` block: a test's deliberately invalid input says nothing about the shapes
        the comments describe, even when the learner's code accepts it without raising."""
        if self.contradictions and inside_expected_raise():
            self.contradictions.clear()
        for line in self.confirmations:
            self.recorder.record((self.path, line), ShapeStatus.CONFIRMED, "")
        for line, (status, detail) in self.contradictions.items():
            self.recorder.record((self.path, line), status, detail)
        self.contradictions.clear()
        self.confirmations.clear()

    def _check(self, line: int, values: tuple[Any, ...]) -> None:
        stmt = self.table[line]
        self._enter_line(line)
        if any(v is MISSING for v in values):
            return
        recorder = self.recorder
        if recorder.watch_nonfinite and recorder.first_nonfinite is None and any(_has_nonfinite(v) for v in values):
            recorder.first_nonfinite = (self.path, line, stmt.text)
        try:
            added = match_statement(stmt, _named(stmt, values), self.bindings)
        except Mismatch as exc:
            actual = ", ".join(describe(v) for v in values)
            bound = ", ".join(f"{k}={v}" for k, v in self.bindings.items()) or "nothing yet"
            status = ShapeStatus.OTHER_FORM if isinstance(exc, RankMismatch) else ShapeStatus.CONTRADICTED
            self.contradictions.setdefault(
                line, (status, f"line {line} says {stmt.comment} but the value is {actual} ({exc}); bound: {bound}"))
            return
        if added is None:
            return
        for name, size in added.items():
            self.bindings[name] = size
            self.bound_at[name] = self.seq
            self.seq += 1
        self.confirmations.add(line)

    def _enter_line(self, line: int) -> None:
        first = self.line_first_seq.get(line)
        if first is None:
            self.line_first_seq[line] = self.seq
            return
        for name, seq in list(self.bound_at.items()):
            if seq >= first:
                del self.bound_at[name]
                del self.bindings[name]


def _given(call: Call) -> set[int]:
    """The ids of a call's arguments and of the elements of its list and tuple arguments."""
    ids: set[int] = set()
    for value in call.args.values():
        ids.add(id(value))
        if isinstance(value, (list, tuple)):
            ids.update(id(each) for each in value[:GIVEN_ELEMENTS])
    return ids


def inside_expected_raise() -> bool:
    """True when some caller on the stack is inside ``with pytest.raises(...)`` (or the call form
    ``pytest.raises(E, f, ...)``): the value being checked came from input the test expects to be
    rejected. Read from the callers' source by AST, and only when a contradiction is pending."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "raises" and "_pytest" in code.co_filename:
            return True
        if _raises_block_at(code.co_filename, frame.f_lineno):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _raises_block_at(filename: str, line: int) -> bool:
    """Whether ``line`` of ``filename`` lies in the body of a ``with ...raises(...)`` statement."""
    if not filename.endswith(".py") or "_pytest" in filename or "pytest_mlcanon" in filename:
        return False
    return any(first <= line <= last for first, last in _raises_blocks(filename))


def read_ahead(filenames: list[str]) -> None:
    """Read the ``raises`` blocks of ``filenames`` now (the grading zygote, for the test files and their
    helpers): in a job, reading a test file while learner code is on the stack is what the guard blocks
    and flags, so a wrong shape comment would otherwise cost an honest student an INT102."""
    for filename in filenames:
        _raises_blocks(filename)


@functools.lru_cache(maxsize=256)
def _raises_blocks(filename: str) -> tuple[tuple[int, int], ...]:
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ()
    blocks = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                isinstance(w.context_expr, ast.Call) and call_name(w.context_expr) == "raises" for w in node.items):
            blocks.append((node.lineno, node.end_lineno or node.lineno))
    return tuple(blocks)


class Unchecked:
    """The scope of a call past the per-test budget: it checks nothing."""

    def check(self, line: int, values: tuple[Any, ...]) -> None:
        pass

    def ret(self, line: int, value: Any) -> Any:
        return value

    def done(self, line: int, value: Any) -> Any:
        return value

    def wrote(self, line: int, value: Any) -> None:
        pass

    def commit(self) -> None:
        pass


UNCHECKED = Unchecked()


class Runtime:
    """What an instrumented module sees as ``__mlcanon__``."""

    def __init__(self, path: str, table: dict[int, Annotated], recorder: Recorder) -> None:
        self.path = path
        self.table = table
        self.recorder = recorder

    def enter(self, owner_line: int = 0) -> Scope | Unchecked:
        if self.recorder.paused:
            return UNCHECKED
        key = (self.path, owner_line)
        calls = self.recorder.calls
        self.recorder.entered.add(key)
        count = calls.get(key, 0)
        if count >= MAX_CHECKED_CALLS_PER_TEST:
            return UNCHECKED
        caller = sys._getframe(1)  # the instrumented function, before its body: its locals are its arguments
        args = dict(caller.f_locals) if owner_line else {}
        form = _form(args)
        seen = self.recorder.forms.setdefault(key, set())
        if count >= CHECKED_CALLS_PER_TEST and form in seen:
            return UNCHECKED
        seen.add(form)
        calls[key] = count + 1
        outer = caller.f_back
        nested = outer is not None and RUNTIME_NAME in outer.f_globals
        return Scope(self.path, self.table, self.recorder, Call(_function_name(caller.f_code), args, nested))

    def transposed(self, value: Any, line: int) -> Any:
        """``value.T``, recording ``value.ndim`` at ``line`` when it is above 2 (a full transpose)."""
        ndim = getattr(value, "ndim", None)
        seen = self.recorder.transposed
        if type(ndim) is int and ndim > 2 and ndim > seen.get((self.path, line), 0):
            seen[(self.path, line)] = ndim
        return value.T


def _form(args: dict[str, Any]) -> tuple[Any, ...]:
    """The form of a call: the rank and dtype of each array argument, the length of each sequence."""
    return tuple((getattr(v, "ndim", None), str(getattr(v, "dtype", ""))) if not isinstance(v, (list, tuple))
                 else len(v) for v in args.values())


def _function_name(code: Any) -> str:
    """``Adam.step`` for a method, ``softmax`` for a function (and a function nested in another)."""
    qualified = getattr(code, "co_qualname", code.co_name)  # Python 3.11+
    return code.co_name if "<" in qualified else qualified


def instrument(source: Source, path: str, recorder: Recorder) -> tuple[ast.Module, Runtime | None]:
    """The instrumented module AST and its runtime, which records into ``recorder``; ``(tree, None)``
    when nothing is annotated, nothing is returned and no ``.T`` is read."""
    table = annotated_statements(source)
    tree = ast.parse(source.text, filename=path)
    if not table and not any(_reads_T(node) or isinstance(node, ast.Return) for node in ast.walk(tree)):
        return tree, None
    _Rewriter(table).visit(tree)
    ast.fix_missing_locations(tree)
    return tree, Runtime(path, table, recorder)


def _reads_T(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "T" and isinstance(node.ctx, ast.Load)


def _name(id_: str) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Load())


def _call(method: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=_name(SCOPE_NAME), attr=method, ctx=ast.Load()), args=list(args),
                    keywords=[])


class _Rewriter(ast.NodeTransformer):
    """Opens a scope in each module or function body that owns annotated statements or returns a value,
    and instruments those statements and returns. Class bodies are left alone (a scope there would become a class attribute)."""

    def __init__(self, table: dict[int, Annotated]) -> None:
        self.table = table
        self.scoped: list[bool] = []

    def _owns_scope(self, node: ast.AST) -> bool:
        """A body opens a scope when it holds annotated statements, returns a value, or writes into an
        array in place (so a failed value check can name the learner's ``return`` line, or the step's
        ``p -= ...``, even where no line of the function is annotated)."""
        return any(isinstance(child, ast.stmt) and (child.lineno in self.table or isinstance(child, ast.Return)
                                                    and child.value is not None or _writes_in_place(child))
                   for child in _own_nodes(node))

    def _open_scope(self, node: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        body = node.body
        start = 0
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(
                body[0].value.value, str):
            start = 1
        while start < len(body) and _is_future_import(body[start]):
            start += 1
        anchor = body[min(start, len(body) - 1)]
        owner_line = 0 if isinstance(node, ast.Module) else node.lineno
        enter = ast.Assign(targets=[ast.Name(id=SCOPE_NAME, ctx=ast.Store())],
                           value=ast.Call(func=ast.Attribute(value=_name(RUNTIME_NAME), attr="enter", ctx=ast.Load()),
                                          args=[ast.Constant(owner_line)], keywords=[]))
        ast.copy_location(enter, anchor)
        body.insert(start, enter)
        commit = ast.Expr(value=_call("commit"))
        ast.copy_location(commit, body[-1])
        body.append(commit)

    def _visit_owner(self, node: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        owns = self._owns_scope(node)
        self.scoped.append(owns)
        self.generic_visit(node)
        self.scoped.pop()
        if owns:
            self._open_scope(node)
        return node

    def visit_Module(self, node: ast.Module) -> ast.AST:
        return self._visit_owner(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._visit_owner(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._visit_owner(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        self.scoped.append(False)
        self.generic_visit(node)
        self.scoped.pop()
        return node

    def _instrumented(self, node: ast.stmt) -> Annotated | None:
        return self.table.get(node.lineno) if self.scoped and self.scoped[-1] else None

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        """``<expr>.T`` -> ``__mlcanon__.transposed(<expr>, LINE)`` (the line of ``<expr>``, as API001's)."""
        self.generic_visit(node)
        if not _reads_T(node):
            return node
        call = ast.Call(func=ast.Attribute(value=_name(RUNTIME_NAME), attr="transposed", ctx=ast.Load()),
                        args=[node.value, ast.Constant(node.lineno)], keywords=[])
        return ast.copy_location(call, node)

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        if not (self.scoped and self.scoped[-1]):
            return node
        stmt = self._instrumented(node)
        if stmt is None or node.value is None:  # a plain return also ends the call normally: commit
            node.value = _call("done", ast.Constant(node.lineno),
                               node.value if node.value is not None else ast.Constant(None))
            return node
        node.value = _call("ret", ast.Constant(stmt.line), node.value)
        return node

    def _after(self, node: ast.stmt) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        out: list[ast.stmt] = [node]
        stmt = self._instrumented(node)
        if stmt is not None:
            values = ast.Tuple(elts=[_read_expr(t) for t in stmt.targets], ctx=ast.Load())
            out.append(ast.copy_location(ast.Expr(value=_call("check", ast.Constant(stmt.line), values)), node))
        if self.scoped and self.scoped[-1]:
            targets: list[ast.expr | None] = [*node.targets] if isinstance(node, ast.Assign) else [
                getattr(node, "target", None)]
            for target in _written_arrays(targets) + _updated_in_place(node):
                out.append(ast.copy_location(ast.Expr(value=_call("wrote", ast.Constant(node.lineno), target)), node))
        return out if len(out) > 1 else node

    def visit_Assign(self, node: ast.Assign) -> ast.AST | list[ast.stmt]:
        return self._after(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | list[ast.stmt]:
        return self._after(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | list[ast.stmt]:
        return self._after(node)


def _written_arrays(targets: list[ast.expr | None]) -> list[ast.expr]:
    """The names written into by item assignment: ``adv[:, t] = ...`` and ``adv[t] += ...`` write into ``adv``."""
    names: list[str] = []
    for target in targets:
        node = target
        while isinstance(node, ast.Subscript):
            node = node.value
        if node is not target and isinstance(node, ast.Name) and node.id not in names:
            names.append(node.id)
    return [_name(name) for name in names]


def _updated_in_place(node: ast.stmt) -> list[ast.expr]:
    """The value an augmented assignment updates, read back after it: ``p -= lr * m_hat / ...`` writes
    into the array ``p`` in place (an optimizer's step, which returns nothing), so the array's values now
    come from this line; ``self.w += ...`` likewise. Names and attribute chains only (no call is re-run)."""
    if not isinstance(node, ast.AugAssign) or dotted(node.target) is None:
        return []
    return [_read_expr(ast.unparse(node.target))]


def _writes_in_place(node: ast.AST) -> bool:
    """An item assignment into a name or an augmented assignment of a name or attribute chain."""
    if isinstance(node, ast.AugAssign):
        return dotted(node.target) is not None or bool(_written_arrays([node.target]))
    return isinstance(node, ast.Assign) and bool(_written_arrays([*node.targets]))


def _is_future_import(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"


def _own_nodes(owner: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``owner``'s own body: every node below it but those inside a nested def, class or
    lambda (which are themselves included). One walk, however many annotated statements it holds."""
    stack = list(ast.iter_child_nodes(owner))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _named(stmt: Annotated, values: tuple[Any, ...]) -> list[Any]:
    """The values a comment describes: all of them, or, when it lists one shape per named target, those
    not discarded into ``_`` (``_, S, Vt = np.linalg.svd(x)  # (k,), (k, d)``)."""
    kept = [value for target, value in zip(stmt.targets, values) if target != "_"]
    if len(kept) < len(values) and len(stmt.comment.values) == len(kept) and not stmt.comment.each:
        return kept
    return list(values)


def _read_expr(target: str | None) -> ast.expr:
    """The expression that reads a target back after the statement, or the MISSING sentinel."""
    if not target:
        return ast.Attribute(value=_name(RUNTIME_NAME), attr="missing", ctx=ast.Load())
    expr = ast.parse(target, mode="eval").body
    return expr


Runtime.missing = MISSING  # type: ignore[attr-defined]
