"""Explanation axis: do the docstrings state the plan, the shapes, a trade-off, and what to test?

Codes: ``EXP001`` no module docstring, ``EXP002`` public function or class without a docstring,
``EXP003`` module docstring too short to state a plan, ``EXP004`` no shapes stated in any docstring,
``EXP005`` no trade-off or reason stated, ``EXP006`` nothing said about what to test.

Docstrings are prose, so the checks on their content are word and pattern checks on prose; a shape
in prose is read with the shape grammar. A file that creates, reshapes, contracts or reduces no tensor
(a scalar autograd engine) has no shape to state, and EXP004 does not apply to it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from pytest_mlcanon.rubric import shape_grammar, shapes
from pytest_mlcanon.rubric.model import AxisResult, Finding
from pytest_mlcanon.rubric.rules import finding
from pytest_mlcanon.rubric.source import Source, per_source, walk
from pytest_mlcanon.settings import Settings

# A parenthesised group not directly after a name (``sigmoid(z)`` is a call): read with the shape
# grammar, so `(B*T, V)`, `(n/world,)` and `(d_l, d_{l+1})` are shapes, and `(RetinaNet)` is not.
_PAREN_GROUP = re.compile(r"(?<![\w.\])}])\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")
# Shapes stated in words: a scalar, a shared or arbitrary shape, an N-D array, "Shapes: none".
SHAPE_WORDS = re.compile(
    r"\bscalars?\b|\b(?:same|any|arbitrary|matching|identical|its|their|input|one|broadcastable)\s+shapes?\b"
    r"|\bshaped?\s+(?:like|as|of)\b|\bshapes?\s*(?::|=|-)\s*none\b|\bno\s+(?:tensor\s+)?shapes?\b"
    r"|\b[1-9]-?D\b|\blist\[\w+\]", re.IGNORECASE)
_YEAR = range(1800, 2101)
#: Words that give a reason or weigh a choice. A reason is often a consequence ("never as log(p), which
#: is -inf for saturated p"; "keeps the loss finite"), not only a "because" (blind round 35).
TRADE_OFF_WORDS = ("because", "instead of", "rather than", "trade-off", "tradeoff", "trade off", "why",
                   "so that", "otherwise", "at the cost of", "cheaper", "costs", "instead", "since", "avoid",
                   "saves", "faster", "slower", "at the price", "chose", "choose", "prefer", "simpler",
                   "simplest", "can't", "cannot", "than ", "never", "keep", "overflow", "underflow", "stable",
                   "stability", "precision", "safer", "would ")
# "... clamped at eps so empty boxes give 0": a purpose clause is a reason too ("so far" is not).
_SO_REASON = re.compile(r"\bso\s+(?!far\b|on\b|much\b|many\b|long\b|called\b|large\b|small\b|few\b)[a-z]")
TEST_PLAN = re.compile(r"\b(?:tests?|tested|testing|checks?|checked|checking|verify|verifies|verified|asserts?"
                       r"|sanity|edge[- ]cases?|finite[- ]differences?|gradcheck|invariants?|compared?\s+(?:with|to|against))\b")


def states_a_shape(prose: str) -> bool:
    """Whether docstring prose states a shape: a group the shape grammar reads (not a citation such as
    ``(Karpathy, 2020)``), or a shape in words (``scalar``, ``same shape as``, ``2-D``, ``Shapes: none``)."""
    if SHAPE_WORDS.search(prose):
        return True
    for match in _PAREN_GROUP.finditer(prose):
        try:
            parsed = shape_grammar.parse(match.group())
        except shape_grammar.ShapeSyntaxError:
            continue
        if not (_citation(parsed) or _aside(match.group(), parsed)):
            return True
    return False


def _aside(text: str, comment: shape_grammar.ShapeComment) -> bool:
    """``(RetinaNet)``, ``(1 - p_t)``: a parenthesis in prose. A shape comment may write a 1-D shape
    without its comma (C4), but in a docstring only ``(n,)`` is read as one."""
    return "," not in text and all(shape.kind == "tuple" and len(shape.dims) == 1 and not shape.dims[0].is_ellipsis
                                   for shape in shape_grammar.shapes_of(comment))


def _citation(comment: shape_grammar.ShapeComment) -> bool:
    """``(Karpathy, 2020)``, ``(Vaswani, 2017)``: an author's name and a year, not a shape."""
    dims = [d for shape in shape_grammar.shapes_of(comment) for d in shape.dims]
    texts = [d.text for d in dims]
    years = [t for t in texts if t.isdigit() and int(t) in _YEAR]
    names = [t for t in texts if t[:1].isupper() and t[1:].isalpha() and len(t) > 2]
    return bool(years) and bool(names)


def _documented(node: ast.AST) -> bool:
    return ast.get_docstring(node) is not None  # type: ignore[arg-type]


def _public_defs(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """Top-level functions and classes, and the methods of public classes, whose names are public."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            found.append(node)
            if isinstance(node, ast.ClassDef):
                found += [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and not m.name.startswith("_")]
    return found


def _all_docstrings(tree: ast.Module) -> list[str]:
    nodes = [tree, *(n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [doc for n in nodes if (doc := ast.get_docstring(n))]


@per_source
def findings_for(source: Source, settings: Settings) -> list[Finding]:
    """Every Explanation finding of one file."""
    out: list[Finding] = []
    where = source.display
    module_doc = ast.get_docstring(source.tree) or ""
    if not module_doc:
        out.append(finding("EXP001", where, 1))
    elif len(module_doc.split()) < settings.docstring_min_words:
        out.append(finding("EXP003", where, 1, words=len(module_doc.split()), needed=settings.docstring_min_words))
    for node in _public_defs(source.tree):
        if not _documented(node):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            out.append(finding("EXP002", where, node.lineno, subject=node.name, kind=kind))
    prose = "\n".join(_all_docstrings(source.tree))
    lowered = prose.lower()
    if prose and shapes.shape_lines(source) and not states_a_shape(prose):
        out.append(finding("EXP004", where, 1))
    if prose and not (any(word in lowered for word in TRADE_OFF_WORDS) or _SO_REASON.search(lowered)):
        out.append(finding("EXP005", where, 1))
    if prose and not TEST_PLAN.search(lowered):
        out.append(finding("EXP006", where, 1))
    return out


def evaluate(sources: Iterable[Source], settings: Settings) -> AxisResult:
    """Passes when no enabled Explanation rule fires on any of the item's files."""
    findings = [f for s in sources for f in findings_for(s, settings) if settings.enabled(f.code)]
    return AxisResult(not findings, tuple(findings))
