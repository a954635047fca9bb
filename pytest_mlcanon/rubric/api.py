"""API-fluency axis: silent full transposes, ``.view`` on transposed tensors, element loops,
deprecated APIs, the catalog's forbidden shortcuts, and stalling past the time target.

Codes: ``API001`` full transpose of a 3-D+ tensor (statically from the shape comments of a plain
name, and at run time from the ndim of every ``.T`` operand the instrumented code saw), ``API002``
``.view`` right after a transpose, ``API003`` Python double loop over elements, ``API004``
deprecated API, ``API005`` forbidden shortcut for this item, ``API006`` past the time target
(``--timed``), ``API007`` legacy global NumPy RNG.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping

from pytest_mlcanon.catalog import Item
from pytest_mlcanon.evidence import Timing
from pytest_mlcanon.rubric import shape_grammar
from pytest_mlcanon.rubric.model import AxisResult, Finding
from pytest_mlcanon.rubric.rules import finding
from pytest_mlcanon.rubric.source import Source, call_name, dotted, functions, per_source, resolve, walk
from pytest_mlcanon.settings import Settings

DEPRECATED = {
    "torch.symeig": "torch.linalg.eigh", "torch.eig": "torch.linalg.eig", "torch.solve": "torch.linalg.solve",
    "torch.lstsq": "torch.linalg.lstsq", "torch.matrix_rank": "torch.linalg.matrix_rank",
    "torch.qr": "torch.linalg.qr", "torch.cholesky": "torch.linalg.cholesky",
    "torch.chain_matmul": "torch.linalg.multi_dot", "torch.autograd.Variable": "a plain tensor",
    "torch.nn.functional.sigmoid": "torch.sigmoid", "torch.nn.functional.tanh": "torch.tanh",
    "torch.nn.functional.upsample": "F.interpolate", "torch.norm": "torch.linalg.norm / vector_norm",
    "numpy.float": "float", "numpy.int": "int", "numpy.bool": "bool", "numpy.object": "object",
    "numpy.asscalar": "x.item()", "numpy.matrix": "a 2-D ndarray", "numpy.product": "np.prod",
    "numpy.alltrue": "np.all", "numpy.sometrue": "np.any", "numpy.cumproduct": "np.cumprod",
}
LEGACY_RNG = frozenset({"seed", "rand", "randn", "randint", "random", "normal", "uniform", "choice", "shuffle",
                        "permutation"})
TRANSPOSERS = frozenset({"transpose", "permute", "movedim", "swapaxes", "T", "mT"})
_SIZE_CALLS = frozenset({"len", "size", "numel"})
#: Modules whose published algorithm is a scalar loop nest, so API003's vectorised form is not what the
#: item asks for: the O(n^3) Hungarian algorithm (potentials and shortest augmenting paths, contract #40)
#: scans one row of reduced costs per step in its textbook form (blind round 35).
SCALAR_LOOPS_ASKED = frozenset({"multimodal/hungarian"})


def _ranks_by_name(fn: ast.AST, source: Source) -> dict[str, list[tuple[int, int | None]]]:
    """For each plain name assigned in ``fn``: (line, rank from its shape comment) in line order."""
    table: dict[str, list[tuple[int, int | None]]] = {}
    for node in walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            table.setdefault(node.targets[0].id, []).append((node.lineno, _comment_rank(source, node.lineno)))
    for entries in table.values():
        entries.sort()
    return table


def _comment_rank(source: Source, line: int) -> int | None:
    comment = source.comment(line)
    if comment is None or not shape_grammar.looks_like_shape(comment):
        return None
    try:
        parsed = shape_grammar.parse(comment)
    except shape_grammar.ShapeSyntaxError:
        return None
    return parsed.values[0][0].rank


def _rank_before(table: dict[str, list[tuple[int, int | None]]], name: str, line: int) -> int | None:
    rank = None
    for assigned_line, assigned_rank in table.get(name, []):
        if assigned_line < line:
            rank = assigned_rank
    return rank


def _transposed(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in {"T", "mT"}:
        return True
    return isinstance(node, ast.Call) and call_name(node) in TRANSPOSERS


def _size_expr(node: ast.AST, lists: frozenset[str] = frozenset()) -> bool:
    """``len(x)``, ``x.size(0)``, ``x.numel()`` or ``x.shape[...]`` anywhere in ``node``; ``len`` of a
    Python list (``lists``: ``len(self.layers)``, ``len(params)``) counts no tensor dimension."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "shape":
            return True
        if isinstance(sub, ast.Call) and call_name(sub) in _SIZE_CALLS:
            if call_name(sub) == "len" and sub.args and (dotted(sub.args[0]) or "") in lists:
                continue
            return True
    return False


def list_names(tree: ast.AST) -> frozenset[str]:
    """Names and attributes (``self.layers``) that hold Python lists: assigned a list display, a
    comprehension or ``list(...)``, appended to, or parameters annotated ``list``/``Sequence``/``tuple``."""
    found: set[str] = set()
    for node in walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value
            if isinstance(value, (ast.List, ast.ListComp, ast.Tuple)) or (
                    isinstance(value, ast.Call) and call_name(value) in {"list", "tuple", "sorted"}):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found |= {name for t in targets if (name := dotted(t))}
        elif isinstance(node, ast.Call) and call_name(node) in {"append", "extend", "insert"}:
            receiver = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else None
            if receiver:
                found.add(receiver)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            annotation = ast.unparse(node.annotation)
            if re.match(r"(?:typing\.)?(?:list|List|Sequence|Iterable|tuple|Tuple)\b", annotation):
                found.add(node.arg)
    return frozenset(found)


def _size_names(fn: ast.AST, lists: frozenset[str] = frozenset()) -> set[str]:
    """Names bound to tensor sizes in ``fn``: ``n = len(x)``, ``B, T = x.shape``, ``H = x.size(1)``."""
    names: set[str] = set()
    for node in walk(fn):
        if isinstance(node, ast.Assign) and _size_expr(node.value, lists):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _element_loop(node: ast.AST, sizes: set[str] = frozenset(),  # type: ignore[assignment]
                  lists: frozenset[str] = frozenset()) -> bool:
    """``for i in range(len(x))`` / ``range(x.shape[0])`` / ``range(B)`` with ``B, T = x.shape``,
    also under ``reversed(...)``; not a loop over a Python list's length (``lists``)."""
    if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Call):
        return False
    loop = node.iter
    if call_name(loop) == "reversed" and loop.args and isinstance(loop.args[0], ast.Call):
        loop = loop.args[0]
    if call_name(loop) != "range":
        return False
    return any(_size_expr(arg, lists) or any(isinstance(n, ast.Name) and n.id in sizes for n in ast.walk(arg))
               for arg in loop.args)


@per_source
def static_findings(source: Source, item: Item | None) -> list[Finding]:
    """Every static API finding in one file (forbidden shortcuts need the item)."""
    out: list[Finding] = []
    where = source.display
    lists = list_names(source.tree)
    scalar_loops_asked = "/".join(source.path.with_suffix("").parts[-2:]) in SCALAR_LOOPS_ASKED
    for fn in functions(source.tree):
        ranks = _ranks_by_name(fn, source)
        sizes = _size_names(fn, lists)
        for node in walk(fn):
            if isinstance(node, ast.Attribute) and node.attr == "T" and isinstance(node.value, ast.Name):
                rank = _rank_before(ranks, node.value.id, node.lineno)
                if rank is not None and rank >= 3:
                    out.append(finding("API001", where, node.lineno, subject=f"`{node.value.id}.T`",
                                       rank="3-D or larger", seen=""))
            if isinstance(node, ast.Call) and call_name(node) == "transpose" and not node.args and not node.keywords:
                receiver = getattr(node.func, "value", None)
                if isinstance(receiver, ast.Name):
                    rank = _rank_before(ranks, receiver.id, node.lineno)
                    if rank is not None and rank >= 3:
                        out.append(finding("API001", where, node.lineno, subject="np.transpose without axes",
                                           rank="3-D or larger", seen=""))
            if isinstance(node, ast.Call) and call_name(node) == "view" and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                if (_transposed(receiver) or (
                    isinstance(receiver, ast.Name) and _name_from_transpose(fn, receiver.id, node.lineno)
                )) and not _adds_dims(node, ranks, receiver):
                    out.append(finding("API002", where, node.lineno))
            if not scalar_loops_asked and _element_loop(node, sizes, lists):
                assert isinstance(node, ast.For)
                inner = [n for n in ast.walk(node) if n is not node and _element_loop(n, sizes, lists)]
                if inner:
                    out.append(finding("API003", where, node.lineno))
    seen_forbidden: set[tuple[int, str]] = set()
    for node in walk(source.tree):
        line = getattr(node, "lineno", 0)
        for full in _full_names(node, source):
            out.extend(_name_findings(node, full, where))
            for banned in item.forbidden if item else ():
                if (full == banned or full.startswith(banned + ".")) and (line, banned) not in seen_forbidden:
                    seen_forbidden.add((line, banned))
                    out.append(finding("API005", where, line, subject=full, item=item.label if item else ""))
    return sorted(set(out), key=lambda f: (f.line, f.code))


def _name_findings(node: ast.AST, full: str, where: str) -> list[Finding]:
    found = []
    line = getattr(node, "lineno", 0)
    if full in DEPRECATED and isinstance(node, ast.Attribute):
        found.append(finding("API004", where, line, subject=full, replacement=DEPRECATED[full]))
    parts = full.split(".")
    if parts[:2] == ["numpy", "random"] and len(parts) == 3 and parts[2] in LEGACY_RNG:
        found.append(finding("API007", where, line, subject=parts[2]))
    return found


def _full_names(node: ast.AST, source: Source) -> list[str]:
    """Fully qualified names used at ``node``: imports, and Name/Attribute chains through aliases."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        full = resolve(node, source.aliases)
        return [full] if full else []
    return []


def _adds_dims(view: ast.Call, ranks: dict[str, list[tuple[int, int | None]]], receiver: ast.expr) -> bool:
    """``q.view(B, H_kv, R, T, d)`` on ``q  # (B, H, T, d)``: more dims than the receiver's commented rank,
    so it splits dims (always a view, whatever the strides) rather than merging transposed ones."""
    if not isinstance(receiver, ast.Name):
        return False
    rank = _rank_before(ranks, receiver.id, view.lineno)
    sizes = view.args[0].elts if len(view.args) == 1 and isinstance(view.args[0], (ast.Tuple, ast.List)) else view.args
    if rank is None or view.keywords or any(isinstance(a, ast.Starred) for a in sizes):
        return False
    return len(sizes) > rank


def _name_from_transpose(fn: ast.AST, name: str, line: int) -> bool:
    latest: ast.expr | None = None
    latest_line = -1
    for node in walk(fn):
        if isinstance(node, ast.Assign) and node.lineno < line and node.lineno > latest_line:
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                latest, latest_line = node.value, node.lineno
    return latest is not None and _transposed(latest)


def runtime_findings(sources: Iterable[Source], transposes: Mapping[tuple[str, int], int],
                     static: Iterable[Finding] = ()) -> list[Finding]:
    """API001 for every ``.T`` that reversed a value of ndim > 2 while the tests ran.

    ``transposes`` maps (displayed path, line) to the largest such ndim (``ShapeTrace.transposes``);
    lines outside ``sources`` and lines the static rule already flags (``static``) are left out.
    """
    flagged = {(f.path, f.line) for f in static if f.code == "API001"}
    shown = {source.display for source in sources}
    return [finding("API001", path, line, subject="`.T`", rank=f"{ndim}-D", seen=" when the tests ran")
            for (path, line), ndim in sorted(transposes.items()) if path in shown and (path, line) not in flagged]


def stall_finding(timing: Timing, item: Item, display: str) -> Finding:
    """API006: the drill ran past its allowance (counted only under ``--timed=strict``)."""
    return finding("API006", display, 0, elapsed=timing.elapsed_min, allowed=timing.allowed_min,
                   attempt=timing.attempt, target=item.minutes, started_from=timing.started_from, slug=item.slug)


def evaluate(sources: Iterable[Source], item: Item, settings: Settings,
             extra: Iterable[Finding] = (), transposes: Mapping[tuple[str, int], int] | None = None) -> AxisResult:
    """Passes when no enabled API rule fires (``extra`` carries run-time evidence such as API006;
    ``transposes`` the run-time ``.T`` operands of ndim > 2, see ``runtime_findings``)."""
    sources = list(sources)
    static = [f for s in sources for f in static_findings(s, item)]
    findings = [f for f in static if settings.enabled(f.code)]
    findings += [f for f in runtime_findings(sources, transposes or {}, static) if settings.enabled(f.code)]
    findings += [f for f in extra if settings.enabled(f.code)]
    return AxisResult(not findings, tuple(findings))

