"""Correctness axis: every reference test of the item passed (numerics probes count toward Numerics).

Codes: ``COR001`` a reference test failed, ``COR002`` a public name of the reference is missing from
the learner's module or cannot be called with the API's signature (a TypeError at a test's call, probes
included, reported once per function and not again as a failure or a Numerics probe), ``COR003`` the
item ran no test.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import PurePath

from pytest_mlcanon.rubric.model import AxisResult, Finding, Outcome
from pytest_mlcanon.rubric.source import Source

FAILING = frozenset({"failed", "error"})
#: The interpreter's own words for a call that does not fit a function's signature (raised at the call,
#: before the function runs): these are the Python messages, not ours.
_SIGNATURE = re.compile(r"TypeError: (?P<function>[\w.<>]+)\(\) (?:got an unexpected keyword argument|missing \d+ "
                        r"required (?:positional|keyword-only) arguments?|takes (?:from \d+ to )?\d+ positional "
                        r"arguments? but \d+ (?:was|were) given|got multiple values for argument|takes no arguments)")


def signature_problem(outcome: Outcome) -> str | None:
    """The function a failed test could not call (a missing keyword, a wrong number of arguments),
    or None. Only a TypeError raised at the test's own call counts: one raised deeper, inside the
    learner's code, is an ordinary failure."""
    if outcome.outcome not in FAILING:
        return None
    match = _SIGNATURE.match(outcome.message)
    if match is None or outcome.where is None or not PurePath(outcome.where[0]).name.startswith("test_"):
        return None
    return match.group("function")


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


def evaluate(outcomes: Iterable[Outcome], missing: Iterable[Finding] = (), *,
             contract_required: bool = False) -> AxisResult:
    """Passes when at least one non-probe test ran, none failed, and no public name is missing.

    Input-validation checks (``contract`` outcomes) count only when ``contract_required``; otherwise
    they are advice: a note says how many held and which did not, and no finding is made.
    """
    outcomes = list(outcomes)
    missing = list(missing)
    advice = [o for o in outcomes if o.contract and not o.probe and not contract_required]
    tests = [o for o in outcomes if not o.probe and o not in advice]
    signatures = _signature_findings([o for o in outcomes if o not in advice])
    called = {o.nodeid for o in outcomes if signature_problem(o)}
    findings = [_failed(o) for o in tests if o.outcome in FAILING and o.nodeid not in called]
    findings += missing + signatures
    ran = [o for o in tests if o.outcome != "skipped"]
    if not ran:
        findings.append(_nothing_ran([o for o in outcomes if o.probe and o.outcome != "skipped"]))
    failed = any(o.outcome in FAILING for o in tests) or bool(signatures)
    return AxisResult(bool(ran) and not failed and not missing, tuple(findings), _contract_notes(advice))


def _signature_findings(outcomes: list[Outcome]) -> list[Finding]:
    """One COR002 per function that tests (numerics probes included) could not call."""
    calls: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        function = signature_problem(outcome)
        if function:
            calls.setdefault(function, []).append(outcome)
    findings = []
    for function, failed in calls.items():
        first = failed[0]
        error = first.message.partition("TypeError: ")[2]
        count = f"{len(failed)} tests" if len(failed) > 1 else "1 test"
        findings.append(Finding("COR002", first.where[0] if first.where else "", first.where[1] if first.where else 0,
                                f"`{function}` cannot be called as the API calls it ({count}): {error}",
                                f"give `{function}` the API's signature: the parameters, keywords and defaults "
                                "its stub declares"))
    return findings


def _contract_notes(advice: list[Outcome]) -> tuple[str, ...]:
    """``input checks (advice): 9 of 12 held; not held: test_rejects_bad_beta, ...``."""
    ran = [o for o in advice if o.outcome != "skipped"]
    if not ran:
        return ()
    missed = [o.nodeid.partition("::")[2] or o.nodeid for o in ran if o.outcome in FAILING]
    text = f"input checks (advice): {len(ran) - len(missed)} of {len(ran)} held"
    if missed:
        shown = ", ".join(missed[:4]) + (f" and {len(missed) - 4} more" if len(missed) > 4 else "")
        text += f"; not held: {shown} (contract = required would count them)"
    return (text,)


def locate(result: AxisResult, path: str) -> AxisResult:
    """The axis with its item-level findings (``COR003``, which no test or line owns) placed at ``path``."""
    if not path or all(f.path for f in result.findings):
        return result
    return replace(result, findings=tuple(f if f.path else replace(f, path=path) for f in result.findings))


def _failed(outcome: Outcome) -> Finding:
    """COR001 at the failure's file:line, else at the test's id (never an empty path)."""
    file, sep, name = outcome.nodeid.partition("::")
    name = name if sep else outcome.nodeid
    if outcome.where:
        return Finding("COR001", outcome.where[0], outcome.where[1], f"{name} {outcome.outcome}: {outcome.message}")
    return Finding("COR001", outcome.nodeid if file else name, 0, f"{outcome.outcome}: {outcome.message}")


def _nothing_ran(probes: list[Outcome]) -> Finding:
    """COR003: what did run instead, when no reference test of the item counted toward Correctness."""
    if not probes:
        return Finding("COR003", "", 0, "no reference test of the item ran", "check the selection and -k")
    names = ", ".join(o.nodeid.partition("::")[2] or o.nodeid for o in probes[:3])
    more = f" and {len(probes) - 3} more" if len(probes) > 3 else ""
    return Finding("COR003", "", 0,
                   f"only numerics probes ran ({len(probes)}: {names}{more}); they count toward Numerics, so no "
                   "reference test judged Correctness",
                   "run the item's other reference tests too: drop --lf, --sw or the -k that selected only probes")
