"""Numerics axis: static rules for the classic instabilities, plus the item's numerics probes.

Codes: ``NUM001`` exp normalised without max-subtraction, ``NUM002`` infinite mask fill, ``NUM003``
eps outside the sqrt, ``NUM004`` log of a softmax or sigmoid, ``NUM005`` a hard-coded mask constant
beyond float16's range, ``NUM100`` a numerics probe failed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import TypeGuard

from pytest_mlcanon.rubric.model import AxisResult, Finding, Outcome
from pytest_mlcanon.rubric.source import Source, call_name, dotted, functions, walk
from pytest_mlcanon.settings import Settings

MASK_FILLERS = frozenset({"masked_fill", "masked_fill_", "where", "full", "full_like", "fill_", "new_full", "fill"})
STABILISERS = frozenset({"max", "amax", "logsumexp", "logaddexp", "log_softmax", "softmax", "nanmax"})
FP16_MAX = 65504.0


def _is_call_to(node: ast.AST, names: frozenset[str] | set[str]) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and call_name(node) in names


def _is_neg_inf(node: ast.AST) -> bool:
    """``float('-inf')``, ``-float('inf')``, ``-math.inf``, ``-np.inf``, ``-torch.inf``, ``np.NINF``."""
    if isinstance(node, ast.Call) and call_name(node) == "float" and node.args:
        arg = node.args[0]
        return isinstance(arg, ast.Constant) and str(arg.value).strip().lower() in {"-inf", "-infinity"}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if isinstance(inner, ast.Call) and call_name(inner) == "float" and inner.args:
            arg = inner.args[0]
            return isinstance(arg, ast.Constant) and str(arg.value).strip().lower() in {"inf", "infinity"}
        return (dotted(inner) or "").split(".")[-1] == "inf"
    return (dotted(node) or "").split(".")[-1] == "NINF"


def _huge_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(
        node.value, bool) and abs(node.value) > FP16_MAX


def _contains(node: ast.AST, predicate: Callable[[ast.AST], bool]) -> bool:
    return any(predicate(n) for n in ast.walk(node))


def _assigned_names(fn: ast.AST) -> dict[str, ast.expr]:
    """Last value assigned to each plain name inside ``fn`` (a cheap data-flow for the rules)."""
    values: dict[str, ast.expr] = {}
    for node in walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = node.value
    return values


def _unstable_exps(fn: ast.AST) -> list[ast.Call]:
    """``exp`` calls whose result is normalised by a sum, with nothing subtracted from the argument."""
    assigned = _assigned_names(fn)
    exp_names = {name for name, value in assigned.items() if _is_call_to(value, {"exp"})}
    normalised = set()
    for node in walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            denominator = node.right
            if _is_call_to(denominator, {"sum"}):
                names = {n.id for n in ast.walk(denominator) if isinstance(n, ast.Name)}
                normalised |= names & exp_names
                if _contains(denominator, lambda n: _is_call_to(n, {"exp"})):
                    normalised.add("<inline>")
    if not normalised:
        return []
    maxima = {name for name, value in assigned.items() if _contains(value, lambda n: _is_call_to(n, STABILISERS))}
    stabilised = {name for name, value in assigned.items()
                  if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Sub)
                  and _contains(value, lambda n: _is_call_to(n, STABILISERS)
                                or (isinstance(n, ast.Name) and n.id in maxima))}
    found = []
    for node in walk(fn):
        if not _is_call_to(node, {"exp"}):
            continue
        argument = node.args[0] if node.args else getattr(node.func, "value", node)
        safe = _contains(argument, lambda n: isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub)) or any(
            isinstance(n, ast.Name) and n.id in stabilised for n in ast.walk(argument))
        if not safe:
            found.append(node)
    return found


def static_findings(source: Source) -> list[Finding]:
    """Every static numerics finding in one file."""
    out: list[Finding] = []
    where = source.display
    for fn in functions(source.tree):
        for call in _unstable_exps(fn):
            out.append(Finding("NUM001", where, call.lineno, "exp of unshifted values is normalised by its sum: "
                               "overflows to inf/inf = NaN for logits near 1e3",
                               "subtract the row max first (x - x.max(dim, keepdim=True)) or use softmax/logsumexp"))
    assigned_in: dict[int, dict[str, ast.expr]] = {}
    for fn in functions(source.tree):
        assigned = _assigned_names(fn)
        assigned_in.update((id(node), assigned) for node in walk(fn))
    for node in walk(source.tree):
        assigned = assigned_in.get(id(node), {})
        if isinstance(node, ast.Call) and call_name(node) in MASK_FILLERS:
            values = [*node.args, *(k.value for k in node.keywords)]
            if any(_is_neg_inf(v) for v in values):
                out.append(Finding("NUM002", where, node.lineno, "mask filled with -inf: a fully masked row "
                                   "softmaxes to NaN", "fill with torch.finfo(scores.dtype).min"))
            elif any(_huge_constant(v) for v in values):
                out.append(Finding("NUM005", where, node.lineno, "hard-coded mask constant beyond float16's "
                                   "range (65504): it becomes -inf in half precision",
                                   "use torch.finfo(dtype).min"))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets):
            if _is_neg_inf(node.value):
                out.append(Finding("NUM002", where, node.lineno, "masked entries set to -inf: a fully masked "
                                   "row softmaxes to NaN", "use torch.finfo(dtype).min (or np.finfo)"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if _is_call_to(side, {"sqrt"}) and _looks_like_eps(other) and _variance_like(side, assigned):
                    out.append(Finding("NUM003", where, node.lineno, "eps added outside the sqrt: sqrt(var) "
                                       "has an infinite gradient at var = 0", "write sqrt(var + eps)"))
                    break
        if isinstance(node, ast.Call) and call_name(node) == "log":
            inner: ast.AST | None = node.args[0] if node.args else getattr(node.func, "value", None)
            if inner is not None and _is_call_to(inner, {"softmax", "sigmoid", "expit"}):
                out.append(Finding("NUM004", where, node.lineno, f"log of {call_name(inner)}: underflows to "
                                   "log(0) = -inf for confident logits",
                                   "use log_softmax / logsigmoid (F.logsigmoid, -np.logaddexp(0, -x))"))
    return sorted(out, key=lambda f: (f.line, f.code))


def _variance_like(sqrt_call: ast.Call, assigned: dict[str, ast.expr]) -> bool:
    """The sqrt is of a variance or mean square (a norm's denominator), directly or through a name
    assigned one in the same function, not of Adam's second moment ``v_hat``, whose published update
    is ``m_hat / (sqrt(v_hat) + eps)``."""
    argument = sqrt_call.args[0] if sqrt_call.args else getattr(sqrt_call.func, "value", sqrt_call)
    sources = [argument, *(assigned[n.id] for n in ast.walk(argument) if isinstance(n, ast.Name) and n.id in assigned)]
    return any(_variance_expr(source) for source in sources)


def _variance_expr(argument: ast.AST) -> bool:
    for node in ast.walk(argument):
        if isinstance(node, ast.Call) and call_name(node) in {"var", "mean", "std"}:
            return True
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if "var" in name.lower() or "sq" in name.lower():
            return True
    return False


def _looks_like_eps(node: ast.AST) -> bool:
    name = (dotted(node) or "").lower()
    if "eps" in name:
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, float) and 0 < node.value < 1e-2


def _probe_finding(probe: Outcome) -> Finding:
    """NUM100 at the first learner line that produced NaN/inf, else where the probe failed."""
    name = probe.nodeid.split("::", 1)[-1]
    hint = "make the extreme-input case finite (see the test)"
    if probe.nonfinite is not None:
        path, line, comment = probe.nonfinite
        return Finding("NUM100", path, line, f"numerics probe {name} failed: first non-finite value here "
                       f"(# {comment}); {probe.message}", hint)
    if probe.where is not None:
        return Finding("NUM100", probe.where[0], probe.where[1], f"numerics probe {name} failed: {probe.message}",
                       hint)
    return Finding("NUM100", probe.nodeid, 0, f"numerics probe failed: {probe.message}", hint)


def evaluate(sources: Iterable[Source], outcomes: Iterable[Outcome], settings: Settings) -> AxisResult:
    """Passes when no enabled static rule fires and every numerics probe passed."""
    findings = [f for s in sources for f in static_findings(s) if settings.enabled(f.code)]
    probes = [o for o in outcomes if o.probe]
    for probe in probes:
        if probe.outcome in {"failed", "error"} and settings.enabled("NUM100"):
            findings.append(_probe_finding(probe))
    passed_probes = sum(1 for p in probes if p.outcome == "passed")
    notes = (f"numerics probes passed: {passed_probes}/{len(probes)}",)
    return AxisResult(not findings, tuple(findings), notes)
