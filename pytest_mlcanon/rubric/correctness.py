"""Correctness axis: every reference test of the item passed (numerics probes count toward Numerics).

Codes: ``COR001`` a reference test failed, ``COR002`` a public name of the reference is missing from
the learner's module, ``COR003`` the item ran no test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from pytest_mlcanon.rubric.model import AxisResult, Finding, Outcome
from pytest_mlcanon.rubric.source import Source

FAILING = frozenset({"failed", "error"})


def public_names(source: Source) -> set[str]:
    """Top-level public functions, classes and assigned names of a module."""
    names: set[str] = set()
    for node in source.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return {n for n in names if not n.startswith("_")}


def missing_names(learner: Source, reference: Source) -> list[str]:
    """Public names the reference defines (not imports) and the learner lacks."""
    defined = {n.name for n in reference.tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return sorted((defined - public_names(learner)) - {n for n in defined if n.startswith("_")})


def evaluate(outcomes: Iterable[Outcome], missing: Iterable[Finding] = ()) -> AxisResult:
    """Passes when at least one non-probe test ran, none failed, and no public name is missing."""
    missing = list(missing)
    tests = [o for o in outcomes if not o.probe]
    findings = [
        Finding("COR001", o.where[0] if o.where else o.nodeid, o.where[1] if o.where else 0,
                f"{o.nodeid.split('::', 1)[-1]} {o.outcome}: {o.message}" if o.where else f"{o.outcome}: {o.message}")
        for o in tests if o.outcome in FAILING
    ]
    findings += missing
    ran = [o for o in tests if o.outcome != "skipped"]
    if not ran:
        findings.append(Finding("COR003", "", 0, "no reference test of the item ran", "check the selection and -k"))
    failed = any(o.outcome in FAILING for o in tests)
    return AxisResult(bool(ran) and not failed and not missing, tuple(findings))
