"""Shapes axis: which lines must carry a shape comment (docs/contract.md C4, rules R1-R4), whether they do,
and whether the comment follows the grammar.

Codes: ``SHP001`` missing shape comment, ``SHP002`` wrong shape (a comment contradicted at run time),
``SHP003`` malformed shape comment.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from pytest_mlcanon.rubric import shape_grammar
from pytest_mlcanon.rubric.model import AxisResult, Finding
from pytest_mlcanon.rubric.rules import finding
from pytest_mlcanon.rubric.shape_runtime import CommentStatus, CommentVerdict
from pytest_mlcanon.rubric.source import (
    Source,
    call_name,
    dotted,
    functions,
    per_source,
    statements_with_values,
    walk,
)
from pytest_mlcanon.settings import Settings

ARRAY_MODULES = frozenset({"torch", "np", "numpy", "F", "nn", "jnp"})
CREATORS = frozenset({
    "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "tril", "triu", "tensor", "as_tensor",
    "array", "asarray", "rand", "randn", "randint", "randperm", "multinomial", "normal",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
})
RNG_SAMPLERS = frozenset({"normal", "random", "integers", "choice", "uniform", "standard_normal", "permutation"})
RESHAPERS = frozenset({
    "view", "reshape", "permute", "transpose", "swapaxes", "movedim", "unsqueeze", "squeeze", "flatten",
    "unflatten", "expand", "expand_as", "repeat", "repeat_interleave", "broadcast_to", "view_as", "reshape_as",
})
JOINERS = frozenset({
    "cat", "concatenate", "concat", "stack", "vstack", "hstack", "split", "chunk", "pad", "meshgrid", "unfold",
    "column_stack", "dstack",
})
CONTRACTIONS = frozenset({"matmul", "mm", "bmm", "einsum", "dot", "tensordot", "gather", "topk", "sort", "argsort"})
REDUCTIONS = frozenset({"sum", "mean", "max", "amax", "argmax", "logsumexp", "std", "var", "norm"})
MODULE_CONSTRUCTOR_HINTS = ("nn.", "torch.nn.")
#: Conversions keep the shape of the value they convert (``np.asarray(X, dtype=np.float64)``).
CONVERSIONS = frozenset({"asarray", "as_tensor", "asanyarray", "ascontiguousarray", "array", "tensor", "from_numpy"})
#: Sized creators whose size arguments may hold a literal 0: the empty result of a degenerate case.
SIZED_CREATORS = frozenset({"zeros", "ones", "empty", "full", "new_zeros", "new_ones", "new_empty", "new_full"})
#: torch.nn modules that keep their input's shape (element-wise or normalising): calling one
#: is a shape-preserving line, which needs no comment (docs/contract.md C4).
SHAPE_PRESERVING_MODULES = frozenset({
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "ReLU", "ReLU6", "GELU", "SiLU",
    "Mish", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "SELU", "CELU", "Softplus", "Softsign", "Hardtanh",
    "Hardswish", "Hardsigmoid", "PReLU", "Softmax", "LogSoftmax", "LayerNorm", "RMSNorm", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "LocalResponseNorm",
})


@dataclass(frozen=True)
class ShapeLine:
    """A statement that must carry a shape comment, and the rule that says so."""

    line: int
    rule: str  # "R1 creation (torch.zeros)" and the like


def shape_lines(source: Source) -> list[ShapeLine]:
    """Every assignment or return statement that R1-R4 require a comment on, by first line."""
    submodules = _submodule_attrs(source.tree)
    indexes = _index_bindings(source.tree)
    found: dict[int, ShapeLine] = {}
    for stmt, value in statements_with_values(source.tree):
        if isinstance(stmt, ast.Return) and _empty_creation(value):
            continue  # an early `return torch.empty(0, ...)` of a degenerate case
        if id(stmt) in indexes:
            continue  # `rows = np.arange(n)[:, None]` read only as `D[rows, idx]`: an index, as inline
        rule = _rule_for(value, submodules)
        if isinstance(stmt, ast.AugAssign) and rule == BROADCAST_RULE:
            continue  # `y += b[:, None]`: an in-place update keeps y's shape; the None only broadcasts b
        if rule and stmt.lineno not in found:
            found[stmt.lineno] = ShapeLine(stmt.lineno, rule)
    return [found[k] for k in sorted(found)]


BROADCAST_RULE = "R2 reshaping (indexing with None)"
SCALAR_CASTS = frozenset({"int", "float", "bool", "len", "round", "str", "item", "tolist"})


def _index_bindings(tree: ast.AST) -> set[int]:
    """The assignments (by ``id``) binding one name that the rest of its function reads only inside
    subscripts' indices (``states = np.arange(S)`` ... ``P[states, actions]``): C4's "array made only to
    index another", named instead of written inline."""
    found: set[int] = set()
    for fn in functions(tree):
        in_index = {id(n) for sub in walk(fn) if isinstance(sub, ast.Subscript) for n in ast.walk(sub.slice)}
        loads: dict[str, list[bool]] = {}
        for node in walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loads.setdefault(node.id, []).append(id(node) in in_index)
        index_only = {name for name, places in loads.items() if all(places)}
        found.update(id(stmt) for stmt in walk(fn) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                     and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in index_only)
    return found


#: Calls whose result has the shape of the tensor they are called on, whatever their arguments
#: (``x.masked_fill(t < lengths[:, None], v)``: the mask broadcasts to ``x``).
RECEIVER_SHAPED = frozenset({"masked_fill", "masked_fill_", "masked_scatter", "masked_scatter_"})


def _rule_for(value: ast.expr, submodules: set[str]) -> str | None:
    """The first R1-R4 rule matched inside ``value``; subtrees cast to Python scalars
    (``int(...)``, ``float(...)``, ``.item()``) bind no tensor and are skipped, and an array created
    only to index another (``D[np.arange(n), labels]``) is an index, not the value bound."""
    stack: list[tuple[ast.AST, bool]] = [(value, False)]
    while stack:
        node, in_index = stack.pop()
        if isinstance(node, ast.Lambda) or (isinstance(node, ast.Call) and call_name(node) in SCALAR_CASTS):
            continue
        rule = _node_rule(node, submodules)
        if rule and not (in_index and rule.startswith("R1")):
            return rule
        if isinstance(node, ast.Subscript):
            stack.append((node.slice, True))
            stack.append((node.value, in_index))
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            # f(x, torch.tensor([a])): an array made as an argument is the callee's input, not the value bound
            # (the callee's result, whose shape the line's comment would describe); "in_index" hides its R1 alike
            stack.extend((child, True) for child in reversed([*node.args, *(k.value for k in node.keywords)]))
            continue
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            kept = _keeps_shape_of(node)
            if kept is not None:  # e / e.sum(dim=-1, keepdim=True): e's shape, by broadcasting
                stack.extend((child, in_index) for child in kept)
                continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RECEIVER_SHAPED:
            stack.append((node.func.value, in_index))
            continue
        stack.extend((child, in_index) for child in reversed(list(ast.iter_child_nodes(node))))
    return None


def _node_rule(node: ast.AST, submodules: set[str]) -> str | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return "R3 contraction (@)"
    if isinstance(node, ast.Attribute) and node.attr in {"T", "mT"} and isinstance(node.ctx, ast.Load):
        return f"R2 reshaping (.{node.attr})"
    if isinstance(node, ast.Subscript) and _indexes_with_none(node.slice):
        return BROADCAST_RULE
    if not isinstance(node, ast.Call):
        return None
    name = call_name(node)
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        # self.norm(x), self.proj(x): the learner's own submodule or method, never a torch reduction
        return f"R4 module call (self.{name})" if name in submodules else None
    base = dotted(func.value) if isinstance(func, ast.Attribute) else None
    root = base.split(".", 1)[0] if base else None
    is_module_call = root in ARRAY_MODULES
    if name in CONVERSIONS and is_module_call and _converts_a_value(node):
        return None
    if name in SIZED_CREATORS and _empty_creation(node):
        return None
    if name in CREATORS and _scalar_creation(node, name):
        return None
    if name.endswith("_like"):
        return None  # the shape of its argument, by definition: a shape-preserving line
    if name in CREATORS and is_module_call:
        return f"R1 creation ({base}.{name})" if base else f"R1 creation ({name})"
    if (name in RNG_SAMPLERS and base is not None and ("rng" in base.lower() or "generator" in base.lower())
            and _draws_an_array(node, name)):
        return f"R1 creation ({base}.{name})"
    if name in RESHAPERS and isinstance(func, ast.Attribute):
        return f"R2 reshaping (.{name})"
    if name in JOINERS and isinstance(func, ast.Attribute) and _array_call(node, is_module_call):
        return f"R2 reshaping ({name})"
    if name in CONTRACTIONS and isinstance(func, ast.Attribute):
        return f"R3 contraction ({name})"
    if name in REDUCTIONS and isinstance(func, ast.Attribute) and _has_axis(node, is_module_call):
        return f"R3 reduction ({name} over an axis)"
    return None


#: Where a NumPy ``Generator`` sampler takes its ``size`` positionally; without one it draws a scalar.
_SIZE_POSITION = {"random": 0, "standard_normal": 0, "choice": 1, "integers": 2, "normal": 2, "uniform": 2}


def _draws_an_array(call: ast.Call, name: str) -> bool:
    """``rng.normal(0, 1, size=(n, d))`` or ``rng.permutation(n)``: an array; ``rng.random()`` and
    ``rng.integers(n_actions)`` draw one Python-level scalar, which C4 leaves without a comment."""
    position = _SIZE_POSITION.get(name)
    return position is None or len(call.args) > position or any(k.arg in {"size", None} for k in call.keywords)


def _converts_a_value(call: ast.Call) -> bool:
    """``np.asarray(x)``, ``torch.as_tensor(f(x), dtype=...)``: the conversion of an existing value,
    whose shape it keeps, not the creation of a new one from a literal or a comprehension
    (``np.array([[0, 1], [1, 0]])``, ``torch.tensor(0.0)``)."""
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in {"data", "a", "object",
                                                                                              "obj", "ndarray"}), None)
    literal = (ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.Constant, ast.UnaryOp)
    return first is not None and not isinstance(first, literal)


def _empty_creation(node: ast.expr) -> bool:
    """A sized creation with a literal 0 among its sizes (``torch.empty(0, 4)``, ``np.zeros((0,))``,
    ``x.new_zeros((0, 4))``): the empty result of a degenerate case, whose shape says nothing."""
    if not (isinstance(node, ast.Call) and call_name(node) in SIZED_CREATORS):
        return False
    sizes: list[ast.expr] = []
    for arg in [*node.args, *(k.value for k in node.keywords if k.arg in {"size", "shape"})]:
        sizes.extend(arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg])
    return any(isinstance(a, ast.Constant) and a.value == 0 and not isinstance(a.value, bool) for a in sizes)


def _scalar_creation(node: ast.Call, name: str) -> bool:
    """A 0-d creation: an empty size (``torch.zeros(())``, ``torch.full((), v)``, a draw ``torch.rand((),
    generator=g)`` or ``torch.randint(0, n, ())``, blind round 36's inverse-CDF sampler) or one number
    (``torch.tensor(0.0)``, ``torch.tensor(-1e9)``): its shape is ``()``, which a comment would only repeat."""
    if name in SIZED_CREATORS or name in {"rand", "randn", "randint"}:
        given = node.args[:1] if name != "randint" else [a for a in node.args if isinstance(a, (ast.Tuple, ast.List))]
        sizes = [*given, *(k.value for k in node.keywords if k.arg in {"size", "shape"})]
        return bool(sizes) and all(isinstance(a, (ast.Tuple, ast.List)) and not a.elts for a in sizes)
    first = node.args[0] if node.args else None
    if isinstance(first, ast.UnaryOp) and isinstance(first.op, (ast.USub, ast.UAdd)):
        first = first.operand
    return name in {"tensor", "array", "asarray", "as_tensor"} and isinstance(first, ast.Constant) and isinstance(
        first.value, (int, float)) and not isinstance(first.value, bool)


def _keeps_shape_of(node: ast.BinOp) -> list[ast.expr] | None:
    """For ``x OP r`` where ``r`` reduces ``x`` itself with ``keepdim=True`` (``e / e.sum(dim=-1, keepdim=True)``,
    ``x - x.amax(-1, keepdims=True)``, ``logits - torch.logsumexp(logits, -1, keepdim=True)``, also through
    ``.values``): the line keeps ``x``'s shape. Returns the parts still to look into (``x`` and what ``r``
    reduces), or None for any other operation."""
    for reduced, other in ((node.right, node.left), (node.left, node.right)):
        reduced = unguarded(reduced)
        call = reduced.value if isinstance(reduced, ast.Attribute) and reduced.attr == "values" else reduced
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call_name(call) in REDUCTIONS):
            continue
        if not any(k.arg in {"keepdim", "keepdims"} and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in call.keywords):
            continue
        base = dotted(call.func.value)
        operand = call.args[0] if base is not None and base.split(".", 1)[0] in ARRAY_MODULES and call.args \
            else call.func.value
        if _root_name(operand) is not None and ast.dump(operand) == ast.dump(other):  # the same array, by name
            return [other, operand]
    return None


#: Element-wise guards of a value by a scalar, which keep its shape: ``r.clamp_min(eps)``,
#: ``torch.clamp(r, min=eps)``, ``np.maximum(r, eps)``.
GUARDS = frozenset({"clamp", "clamp_min", "clip", "maximum", "fmax"})


def unguarded(expr: ast.expr) -> ast.expr:
    """``expr`` without the scalar guards around it: ``(r + eps)``, ``r.clamp_min(1e-12)``, ``np.maximum(r,
    eps)`` give ``r`` (blind round 35: CLIP's ``x / (x.norm(dim=-1, keepdim=True) + 1e-8)``, which the stub
    allows, keeps ``x``'s shape like the unguarded form)."""
    while True:
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)) and _scalar(expr.right):
            expr = expr.left
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) and _scalar(expr.left):
            expr = expr.right
        elif isinstance(expr, ast.Call) and call_name(expr) in GUARDS | {"add"}:
            base = dotted(expr.func.value) if isinstance(expr.func, ast.Attribute) else None
            module_call = base is not None and base.split(".", 1)[0] in ARRAY_MODULES
            operands = expr.args if module_call else [expr.func.value, *expr.args] \
                if isinstance(expr.func, ast.Attribute) else []
            guards = [*operands[1:], *(k.value for k in expr.keywords)]
            if not operands or not all(_scalar(g) for g in guards) or (call_name(expr) == "add" and module_call):
                return expr
            expr = operands[0]
        else:
            return expr


def _scalar(node: ast.expr) -> bool:
    """A number, or a name or attribute holding one by its look (``eps``, ``self.eps``, ``None``)."""
    if isinstance(node, ast.UnaryOp):
        return _scalar(node.operand)
    if isinstance(node, ast.Constant):
        return node.value is None or isinstance(node.value, (int, float))
    return isinstance(node, (ast.Name, ast.Attribute)) and "eps" in (dotted(node) or "").lower()


def _indexes_with_none(index: ast.expr) -> bool:
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for part in parts:
        if isinstance(part, ast.Constant) and part.value is None:
            return True
        if isinstance(part, ast.Attribute) and part.attr == "newaxis":
            return True
    return False


def _array_call(call: ast.Call, is_module_call: bool) -> bool:
    """Tensor/array joins only: ``text.split(",")`` and ``line.split()`` are string methods."""
    if is_module_call:
        return True
    if call_name(call) == "split":
        if not call.args and not call.keywords:
            return False
        first = call.args[0] if call.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return False
        if isinstance(first, ast.JoinedStr):
            return False
    return True


def _has_axis(call: ast.Call, is_module_call: bool) -> bool:
    if any(k.arg in {"dim", "axis"} for k in call.keywords):
        return True
    return len(call.args) >= (2 if is_module_call else 1)


def _submodule_attrs(tree: ast.Module) -> set[str]:
    """``self.<name>`` attributes assigned an ``nn.Module`` (a torch.nn constructor or a local
    nn.Module subclass) inside any ``__init__`` (rule R4)."""
    local_modules = {
        node.name
        for node in walk(tree)
        if isinstance(node, ast.ClassDef)
        and any((dotted(b) or "").split(".")[-1] in {"Module", "Sequential"} for b in node.bases)
    }
    names: set[str] = set()
    for node in walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "__init__"):
            continue
        for stmt in walk(node):
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or not isinstance(stmt.value, ast.Call):
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            ctor = dotted(stmt.value.func) or ""
            is_module = ctor.startswith(MODULE_CONSTRUCTOR_HINTS) or ctor.split(".")[-1] in local_modules
            if not is_module or ctor.split(".")[-1] in SHAPE_PRESERVING_MODULES:
                continue
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    names.add(target.attr)
    return names


@dataclass(frozen=True)
class CommentCheck:
    """Per-file static result: shape lines, which are annotated, and the findings."""

    lines: tuple[ShapeLine, ...]
    annotated: tuple[int, ...]
    findings: tuple[Finding, ...]


@per_source
def check_source(source: Source, settings: Settings) -> CommentCheck:
    """SHP001 for shape lines without a comment, SHP003 for malformed ones. The comment may sit on
    any line of a multi-line statement (``shape_grammar.statement_comment``)."""
    findings: list[Finding] = []
    annotated: list[int] = []
    required = shape_lines(source)
    statements = statements_with_values(source.tree)
    ends = {stmt.lineno: stmt.end_lineno or stmt.lineno for stmt, _ in statements}
    values = {stmt.lineno: value for stmt, value in reversed(statements)}  # the first statement of a line
    for shape_line in required:
        located = shape_grammar.statement_comment(source.comments, shape_line.line,
                                                  ends.get(shape_line.line, shape_line.line))
        comment = located[1] if located else None
        if comment is None or not shape_grammar.looks_like_shape(comment):
            inner = _shape_inside(comment) if comment else None
            if inner is not None:
                findings.append(finding("SHP003", source.display, shape_line.line,
                                        error=f"`# {comment}` must start with the shape to be read as one",
                                        hint=f"start it with the shape and put the rest after it: `# {inner}  ...`"))
                continue
            if comment is None:
                findings.append(finding("SHP001", source.display, shape_line.line, reason=shape_line.rule, words=""))
                continue
            findings.append(finding("SHP001", source.display, shape_line.line, reason=shape_line.rule,
                                    words=f"; its comment `# {comment}` is words, not a shape",
                                    hint=_words_hint(comment, values.get(shape_line.line))))
            continue
        try:
            shape_grammar.parse(comment)
        except shape_grammar.ShapeSyntaxError as exc:
            findings.append(finding("SHP003", source.display, shape_line.line, error=str(exc), hint=exc.hint or None))
            continue
        annotated.append(shape_line.line)
    enabled = tuple(f for f in findings if settings.enabled(f.code))
    return CommentCheck(tuple(required), tuple(annotated), enabled)


def _words_hint(comment: str, value: ast.expr | None) -> str:
    """The fix for a shape line whose comment is words (``# reduced axis kept as 1``): what C4 reads,
    with the learner's words kept as the note and the value's input named (``same shape as x``)."""
    name = _input_name(value) or "x"
    note = comment.strip()
    return (f"start the comment with the shape it binds and keep your words after it as a note, "
            f"`# (B, T, 1); {note}` with your dims; C4 reads a shape first: `(B, T, d)`, `()`, `(N,)`, "
            f"`list[N]`, `scalar`, `None` or `same shape as {name}` (docs/contract.md C4)")


def _input_name(value: ast.expr | None) -> str | None:
    """The array a line's value is made from, when one name says it: ``x`` in ``x.amax(-1)``,
    ``torch.softmax(x, -1)`` or ``x - m``."""
    node = value
    while node is not None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and _root_name(func.value) not in (*_MODULES, "self", None):
                node = func.value  # x.amax(-1), x.view(...).sum(0)
            else:
                node = node.args[0] if node.args else None  # torch.softmax(x, -1), self.proj(h)
        elif isinstance(node, ast.BinOp):
            node = node.left
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            return None
    return None


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


#: Module names whose calls take the array as their first argument (``torch.softmax(x, -1)``).
_MODULES = frozenset({"torch", "np", "numpy", "F", "nn", "jnp"})


def _shape_inside(comment: str) -> str | None:
    """The first shape found after a prefix (``world x (..., out/world)``), as text, or None."""
    for index, ch in enumerate(comment):
        if ch == "(" and index:
            try:
                parsed = shape_grammar.parse(comment[index:index + shape_grammar.MAX_TEXT])
            except shape_grammar.ShapeSyntaxError:
                continue
            if any(shape.dims for alts in parsed.values for shape in alts):
                return str(parsed)
    return None


def runtime_findings(verdicts: Iterable[CommentVerdict], settings: Settings) -> tuple[list[Finding], list[str]]:
    """SHP002 for each comment contradicted at run time, and a note with the confirmed share
    (comments in functions the item's tests never called belong to another item and do not count)."""
    if not settings.runtime_shapes:
        return [], ["runtime shape check off (mlcanon_runtime_shapes = false)"]
    counted = [v for v in verdicts if v.status is not CommentStatus.NOT_EXERCISED]
    findings = [finding("SHP002", v.path, v.line, detail=v.detail) for v in counted
                if v.status is CommentStatus.CONTRADICTED]
    count = {status: sum(1 for v in counted if v.status is status) for status in CommentStatus}
    if not counted:
        return findings, ["runtime: no shape comment ran in the item's tests"]
    share = count[CommentStatus.CONFIRMED] / len(counted)
    note = (f"runtime: {count[CommentStatus.CONFIRMED]} confirmed, {count[CommentStatus.CONTRADICTED]} "
            f"contradicted, {count[CommentStatus.NEVER_EXECUTED]} never executed of {len(counted)} shape "
            f"comments ({share:.0%} confirmed)")
    return findings, [note]


def evaluate(checks: Iterable[CommentCheck], runtime: Iterable[Finding], settings: Settings,
             runtime_notes: Iterable[str] = ()) -> AxisResult:
    """The axis: comment coverage of shape lines at or above the threshold and no wrong comment."""
    checks = list(checks)
    total = sum(len(c.lines) for c in checks)
    good = sum(len(c.annotated) for c in checks)
    coverage = good / total if total else 1.0
    wrong = [f for f in runtime if settings.enabled(f.code)]
    findings = [f for c in checks for f in c.findings] + wrong
    threshold = settings.shape_coverage_min
    passed = coverage >= threshold and not wrong
    if not settings.enabled("SHP001") and not settings.enabled("SHP003"):
        passed = not wrong
    notes = (f"shape comments on {good}/{total} shape lines ({coverage:.0%}; needed {threshold:.0%})", *runtime_notes)
    return AxisResult(passed, tuple(findings), notes)
