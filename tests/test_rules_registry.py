"""The rule registry is the one place a finding's code, wording, fix and miss-log phrase live: every
code the package uses is registered, every registered code is used, findings are made only by the
registry's constructor with the facts its templates need, and docs/rules.md is generated from it."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from pytest_mlcanon.rubric import rules
from pytest_mlcanon.rubric.model import AXES

PACKAGE = Path(rules.__file__).resolve().parents[1]
REGISTRY = Path(rules.__file__).resolve()
CODE = re.compile(r"(?:COR|SHP|NUM|API|EXP|REC|INT)\d{3}")
#: Where a ``Finding(...)`` may be built directly: the registry's constructor, and the gradebook decoding one.
BUILDS_FINDINGS = {REGISTRY, PACKAGE / "grade" / "gradebook.py"}


@cache
def _modules() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of the package, parsed once for all the tests here."""
    return tuple((path, ast.parse(path.read_text())) for path in sorted(PACKAGE.rglob("*.py")))


def _used_codes() -> set[str]:
    """Every string constant of the package (the registry aside) that is exactly a code."""
    return {node.value for path, tree in _modules() if path != REGISTRY for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.fullmatch(node.value)}


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    return [(path, node) for path, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == name
                                               or getattr(node.func, "attr", None) == name)]


def test_the_scan_sees_the_package() -> None:
    assert len(_modules()) > 50 and {"SHP002", "INT107", "REC001", "API006"} <= _used_codes()


def test_every_code_used_is_registered() -> None:
    assert _used_codes() <= set(rules.BY_CODE), f"unregistered: {sorted(_used_codes() - set(rules.BY_CODE))}"


def test_every_registered_code_is_used() -> None:
    assert set(rules.BY_CODE) <= _used_codes(), f"never emitted: {sorted(set(rules.BY_CODE) - _used_codes())}"


def test_findings_are_made_only_by_the_registry() -> None:
    direct = [f"{path.relative_to(PACKAGE)}:{call.lineno}" for path, call in _calls("Finding")
              if path not in BUILDS_FINDINGS]
    assert not direct, f"build findings with rules.finding(CODE, ...): {direct}"


def test_every_finding_passes_the_facts_its_rule_needs() -> None:
    calls = _calls("finding")
    checked = 0
    for path, call in calls:
        first = call.args[0] if call.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and CODE.fullmatch(first.value)):
            continue
        rule = rules.BY_CODE[first.value]
        if rule.axis == rules.INTEGRITY:
            continue  # integrity.finding(code, path, line, detail)
        given = {k.arg for k in call.keywords}
        assert rule.fields - {"subject"} <= given, f"{path.name}:{call.lineno} {rule.code} lacks {rule.fields - given}"
        checked += 1
    assert checked >= 30


@pytest.mark.parametrize("rule", [*rules.RULES, *rules.INTEGRITY_RULES], ids=lambda r: r.code)
def test_every_rule_is_complete_and_its_templates_format(rule: rules.Rule) -> None:
    assert rule.axis in (*AXES, rules.INTEGRITY) and rule.flags and rule.hint
    if rule.axis != rules.INTEGRITY:
        assert rule.why and rule.bad and rule.good
    made = rule.finding("a.py", 3, **{name: 1 for name in rule.fields})
    assert (made.code, made.path, made.line) == (rule.code, "a.py", 3) and made.message and made.hint


def test_miss_phrases_come_from_the_registry() -> None:
    assert rules.miss("NUM003") == "eps outside sqrt"
    assert rules.miss("COR001") is None and rules.miss("INT107") is None  # a failing test or the grader names these


def test_docs_are_generated_from_the_registry() -> None:
    docs = PACKAGE.parent / "docs" / "rules.md"
    assert docs.read_text() == rules.render_markdown(), "run: python -m pytest_mlcanon.rubric > docs/rules.md"
    assert "### REC001" in docs.read_text() and "| INT107 |" in docs.read_text()
