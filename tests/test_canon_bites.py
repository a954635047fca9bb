"""Every reference test must bite, and every reference must pass its own rubric.

* ``tests/impls/alt_*``: an alternative correct implementation; all tests of its items pass.
* ``tests/impls/broken_*``: one classic mistake; at least one test of its items fails.
* every canon item that has reference tests: the references pass them and score 5/5.

Each variant directory holds only the modules it replaces; the redirect falls back to the
references for everything else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mlcanon import catalog
from pytest_mlcanon import run as canon_run

IMPLS = Path(__file__).parent / "impls"


def _variants() -> list[Path]:
    return sorted(p for p in IMPLS.iterdir() if p.is_dir() and p.name.startswith(("alt_", "broken_"))) if IMPLS.is_dir() else []


def _items_of(variant: Path) -> list[catalog.Item]:
    modules = ["/".join(p.relative_to(variant).with_suffix("").parts) for p in variant.rglob("*.py")]
    found = {item.number: item for m in modules for item in catalog.items_for_module(m)}
    return [found[n] for n in sorted(found)]


def _items_with_tests() -> list[catalog.Item]:
    return [i for i in catalog.all_items() if canon_run.in_canon(i)]


@pytest.mark.parametrize("variant", _variants(), ids=lambda p: p.name)
def test_variant(pytester: pytest.Pytester, variant: Path) -> None:
    items = _items_of(variant)
    assert items, f"{variant.name} holds no canon module"
    selector = ",".join(str(i.number) for i in items)
    result = pytester.runpytest(f"--canon-item={selector}", f"--impl={variant}", "-q", "-p", "no:cacheprovider",
                                "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    failed = outcomes.get("failed", 0) + outcomes.get("errors", 0) + outcomes.get("error", 0)
    if variant.name.startswith("alt_"):
        assert result.ret == 0 and failed == 0, f"alternative {variant.name} must pass:\n{result.stdout.str()[-3000:]}"
        assert outcomes.get("passed", 0) > 0
    else:
        assert failed > 0, f"broken {variant.name} passed every test: the tests do not catch its mistake"


@pytest.mark.parametrize("item", _items_with_tests(), ids=lambda i: i.slug)
def test_reference_passes_and_scores_five(pytester: pytest.Pytester, item: catalog.Item) -> None:
    result = pytester.runpytest(f"--canon-item={item.number}", "--impl=canon_refs", "--canon-min-score=5", "-q",
                                "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-4000:]
    result.stdout.fnmatch_lines([f"*#{item.number} {item.slug}*5/5*strong*"])
