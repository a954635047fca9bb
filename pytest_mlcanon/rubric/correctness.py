"""Correctness axis: every reference test of the item passed (numerics probes count toward Numerics).

Codes: ``COR001`` a reference test failed, ``COR002`` a public name of the reference is missing from
the learner's module or cannot be called with the API's signature (a TypeError at a test's call, probes
included, reported once per function and not again as a failure or a Numerics probe), ``COR003`` the
item ran no test, ``REC001`` (grading) the grader's seeded re-check failed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import PurePath

from pytest_mlcanon.evidence import Location, RecheckFailure
from pytest_mlcanon.rubric.model import AxisResult, Finding, Outcome
from pytest_mlcanon.rubric.rules import finding
from pytest_mlcanon.rubric.source import Source

#: The interpreter's own words for a call that does not fit a function's signature (raised at the call,
#: before the function runs): these are the Python messages, not ours.
_SIGNATURE = re.compile(r"TypeError: (?P<function>[\w.<>]+)\(\) (?:got an unexpected keyword argument|missing \d+ "
                        r"required (?:positional|keyword-only) arguments?|takes (?:from \d+ to )?\d+ positional "
                        r"arguments? but \d+ (?:was|were) given|got multiple values for argument|takes no arguments)")


def signature_problem(outcome: Outcome) -> str | None:
    """The function a failed test could not call (a missing keyword, a wrong number of arguments),
    or None. Only a TypeError raised at the test's own call counts: one raised deeper, inside the
    learner's code, is an ordinary failure."""
    if not outcome.failed:
        return None
    match = _SIGNATURE.match(outcome.message)
    if match is None or outcome.where is None or not PurePath(outcome.where.path).name.startswith("test_"):
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


def evaluate(outcomes: Iterable[Outcome], missing: Iterable[Finding] = (), *, contract_required: bool = False,
             place: str = "", recheck: RecheckFailure | None = None, recheck_place: str = "",
             item: str = "ITEM") -> AxisResult:
    """Passes when at least one non-probe test ran, none failed, no public name is missing, and
    (grading) the seeded re-check did not void the tests.

    Input-validation checks (``contract`` outcomes) count only when ``contract_required``; otherwise
    they are advice: a note says how many held and which did not, and no finding is made.
    ``place`` is where a finding no test owns (``COR003``) is placed: the item's test files; ``item``
    (its slug) goes into a failed test's fix hint, the command that reruns that test alone.
    """
    outcomes = list(outcomes)
    missing = list(missing)
    advice = [o for o in outcomes if o.contract and not o.probe and not contract_required]
    tests = [o for o in outcomes if not o.probe and o not in advice]
    signatures = _signature_findings([o for o in outcomes if o not in advice])
    called = {o.nodeid for o in outcomes if signature_problem(o)}
    failed = [o for o in tests if o.failed and o.reported and o.nodeid not in called]
    silent = [o for o in tests if not o.reported]  # the run ended first: one finding (the probes': Numerics')
    findings = [_failed(o, item) for o in failed]
    findings += missing + signatures
    ran = [o for o in tests if o.ran]
    if silent:
        findings.append(never_reported(silent, place))
    elif not ran:
        findings.append(_nothing_ran([o for o in outcomes if o.probe and o.ran], place))
    why = _why(len(failed), len(ran), missing, signatures, len(silent))  # re-check outcomes are probes: never in ran
    if recheck is not None:
        findings.append(finding("REC001", recheck_place, 0, outcome=recheck.outcome,
                                problems="; ".join(recheck.problems)))
        why = "; ".join(filter(None, [why, recheck.describe(first_only=True)]))
    return AxisResult(not why, tuple(findings), _contract_notes(advice), why)


def _why(failed: int, ran: int, problems: list[Finding], signatures: list[Finding], silent: int = 0) -> str:
    """What failed the axis, for the verdict: ``8 of 39 tests failed`` (of the item's tests that count toward
    Correctness and ran: the numerics probes and the input-check advice have their own lines, so the
    two numbers are of one kind), ``a public name is missing``..."""
    reasons = [f"{failed} of {ran} tests failed"] if failed else [] if ran or silent else ["no reference test ran"]
    if silent:
        reasons.append(f"{silent} never reported")
    names = sum(1 for f in problems if f.code == "COR002")
    if names:
        reasons.append("a public name is missing" if names == 1 else f"{names} public names are missing")
    reasons += [f"`{f.subject}` cannot be called as the API calls it" for f in signatures]
    if any(f.code == "COR004" for f in problems):
        reasons.append("a file does not parse")
    return "; ".join(reasons)


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
        place = first.where or Location("", 0)
        findings.append(finding("COR002", place.path, place.line, subject=function,
                                problem=f"cannot be called as the API calls it ({count}): {error}"))
    return findings


def _contract_notes(advice: list[Outcome]) -> tuple[str, ...]:
    """``input checks (advice): 9 of 12 held; not held: test_rejects_bad_beta, ...``."""
    ran = [o for o in advice if o.ran]
    if not ran:
        return ()
    missed = [o.name for o in ran if o.failed]
    text = f"input checks (advice): {len(ran) - len(missed)} of {len(ran)} held"
    if missed:
        shown = ", ".join(missed[:4]) + (f" and {len(missed) - 4} more" if len(missed) > 4 else "")
        text += f"; not held: {shown} (contract = required would count them)"
    return (text,)


def _failed(outcome: Outcome, item: str) -> Finding:
    """COR001 at the failure's file:line, else at the test's id (never an empty path). A failed value
    check whose value the learner's code produced is placed at that line, and names the call."""
    keyword = outcome.name.split("::")[-1].split("[")[0]  # the test function's name, as -k matches it
    origin = outcome.origin
    if origin is not None:
        return finding("COR001", origin.file, origin.line, test=outcome.name, outcome=outcome.outcome,
                       detail=f"{origin.call} gave a wrong value: {outcome.message}", item=item, keyword=keyword)
    place = outcome.where or Location(outcome.nodeid, 0)
    return finding("COR001", place.path, place.line, test=outcome.name, outcome=outcome.outcome, detail=outcome.message,
                   item=item, keyword=keyword)


def never_reported(silent: list[Outcome], place: str) -> Finding:
    """COR005: one finding for the tests a run that ended early never reported (what ended it is the
    verdict's), rather than one COR001 each saying the same."""
    names = ", ".join(o.name for o in silent[:3]) + (f" and {len(silent) - 3} more" if len(silent) > 3 else "")
    return finding("COR005", place, 0, tests=f"{len(silent)} correctness test(s)", names=names)


def _nothing_ran(probes: list[Outcome], place: str) -> Finding:
    """COR003: what did run instead, when no reference test of the item counted toward Correctness."""
    if not probes:
        return finding("COR003", place, 0, instead="")
    names = ", ".join(o.name for o in probes[:3])
    more = f" and {len(probes) - 3} more" if len(probes) > 3 else ""
    return finding("COR003", place, 0, instead=f"; only numerics probes did ({len(probes)}: {names}{more}), and "
                   "they count toward Numerics")
