"""The rule registry is complete, and docs/rules.md is generated from it."""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_mlcanon import timer
from pytest_mlcanon.rubric import rules

PACKAGE = Path(rules.__file__).resolve().parents[1]


def _emitted_codes() -> set[str]:
    codes = set()
    for path in [*(PACKAGE / "rubric").glob("*.py"), Path(timer.__file__), PACKAGE / "run.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    codes.add(first.value)
    return codes


def test_every_emitted_code_is_registered() -> None:
    emitted = _emitted_codes()
    assert emitted, "no Finding(...) calls found: the scan is broken"
    assert emitted <= set(rules.BY_CODE), f"unregistered codes: {sorted(emitted - set(rules.BY_CODE))}"


def test_docs_are_generated_from_the_registry() -> None:
    docs = PACKAGE.parent / "docs" / "rules.md"
    assert docs.read_text() == rules.render_markdown(), "run: python -m pytest_mlcanon.rubric.rules > docs/rules.md"
