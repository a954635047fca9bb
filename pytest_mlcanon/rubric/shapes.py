"""Shapes axis: which lines must carry a shape comment (canon-spec C4, rules R1-R4), whether they do,
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
from pytest_mlcanon.rubric.source import Source, call_name, dotted, statements_with_values, walk
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


@dataclass(frozen=True)
class ShapeLine:
    """A statement that must carry a shape comment, and the rule that says so."""

    line: int
    rule: str  # "R1 creation (torch.zeros)" and the like


def shape_lines(source: Source) -> list[ShapeLine]:
    """Every assignment or return statement that R1-R4 require a comment on, by first line."""
    submodules = _submodule_attrs(source.tree)
    found: dict[int, ShapeLine] = {}
    for stmt, value in statements_with_values(source.tree):
        rule = _rule_for(value, submodules)
        if rule and stmt.lineno not in found:
            found[stmt.lineno] = ShapeLine(stmt.lineno, rule)
    return [found[k] for k in sorted(found)]


SCALAR_CASTS = frozenset({"int", "float", "bool", "len", "round", "str", "item", "tolist"})


def _rule_for(value: ast.expr, submodules: set[str]) -> str | None:
    """The first R1-R4 rule matched inside ``value``; subtrees cast to Python scalars
    (``int(...)``, ``float(...)``, ``.item()``) bind no tensor and are skipped."""
    stack: list[ast.AST] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Lambda) or (isinstance(node, ast.Call) and call_name(node) in SCALAR_CASTS):
            continue
        rule = _node_rule(node, submodules)
        if rule:
            return rule
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return None


def _node_rule(node: ast.AST, submodules: set[str]) -> str | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return "R3 contraction (@)"
    if isinstance(node, ast.Attribute) and node.attr in {"T", "mT"} and isinstance(node.ctx, ast.Load):
        return f"R2 reshaping (.{node.attr})"
    if isinstance(node, ast.Subscript) and _indexes_with_none(node.slice):
        return "R2 reshaping (indexing with None)"
    if not isinstance(node, ast.Call):
        return None
    name = call_name(node)
    func = node.func
    base = dotted(func.value) if isinstance(func, ast.Attribute) else None
    root = base.split(".", 1)[0] if base else None
    is_module_call = root in ARRAY_MODULES
    if name in CREATORS and (is_module_call or name.endswith("_like")):
        return f"R1 creation ({base}.{name})" if base else f"R1 creation ({name})"
    if name in RNG_SAMPLERS and base is not None and ("rng" in base.lower() or "generator" in base.lower()):
        return f"R1 creation ({base}.{name})"
    if name in RESHAPERS and isinstance(func, ast.Attribute):
        return f"R2 reshaping (.{name})"
    if name in JOINERS and isinstance(func, ast.Attribute) and _array_call(node, is_module_call):
        return f"R2 reshaping ({name})"
    if name in CONTRACTIONS and isinstance(func, ast.Attribute):
        return f"R3 contraction ({name})"
    if name in REDUCTIONS and isinstance(func, ast.Attribute) and _has_axis(node, is_module_call):
        return f"R3 reduction ({name} over an axis)"
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        if name in submodules:
            return f"R4 module call (self.{name})"
    return None


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
            if not is_module:
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


def check_source(source: Source, settings: Settings) -> CommentCheck:
    """SHP001 for shape lines without a comment, SHP003 for malformed ones."""
    findings: list[Finding] = []
    annotated: list[int] = []
    required = shape_lines(source)
    for shape_line in required:
        comment = source.comment(shape_line.line)
        if comment is None or not shape_grammar.looks_like_shape(comment):
            findings.append(Finding(
                "SHP001", source.display, shape_line.line,
                f"missing shape comment: this line is a shape line ({shape_line.rule})",
                "end the line with the shape of what it binds, e.g. `# (B, T, d)`",
            ))
            continue
        try:
            shape_grammar.parse(comment)
        except shape_grammar.ShapeSyntaxError as exc:
            findings.append(Finding("SHP003", source.display, shape_line.line, f"malformed shape comment: {exc}",
                                    exc.hint or "follow the C4 grammar: `# (B, T, d)`, `# ()`, `# (N,)`, `# list[N]`"))
            continue
        annotated.append(shape_line.line)
    enabled = tuple(f for f in findings if settings.enabled(f.code))
    return CommentCheck(tuple(required), tuple(annotated), enabled)


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
