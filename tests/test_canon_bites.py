"""Every reference test must bite, and every reference must pass its own rubric.

* ``tests/impls/alt_<name>/``: an alternative correct implementation, laid out like the canon;
  all tests of its items pass.
* ``tests/impls/broken_<name>.diff``: one classic mistake, as a patch against the reference (its
  header names the mistake and the test that catches it); at least one test of its items fails.
  The patch is applied to a copy of the item's reference modules, so a broken variant never goes
  stale when the reference is reworded, and fails loudly when the code it patches has changed.
* every canon item that has a reference: the reference passes its tests and scores 5/5.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from patching import apply_patch, patched_files

from pytest_mlcanon import catalog, redirect
from pytest_mlcanon.layout import in_canon

pytestmark = pytest.mark.slow  # the fast lane, pytest -m "not slow", leaves it out (CONTRIBUTING.md)

IMPLS = Path(__file__).parent / "impls"


def _alternatives() -> list[Path]:
    return sorted(p for pattern in ("alt_*", "min_*") for p in IMPLS.glob(pattern) if p.is_dir())


def _mistakes() -> list[Path]:
    return sorted(IMPLS.glob("broken_*.diff"))


def _items_of_modules(modules: list[str]) -> list[catalog.Item]:
    found = {item.number: item for m in modules for item in catalog.items_for_module(m)}
    return [found[n] for n in sorted(found)]


def _run_variant(pytester: pytest.Pytester, impl: Path, items: list[catalog.Item]) -> tuple[pytest.RunResult, int]:
    assert items, f"{impl.name} holds no canon module"
    selector = ",".join(str(i.number) for i in items)
    result = pytester.runpytest(f"--canon-item={selector}", f"--impl={impl}", "-q", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    return result, outcomes.get("failed", 0) + outcomes.get("errors", 0) + outcomes.get("error", 0)


def apply_mistake(diff: Path, into: Path) -> list[catalog.Item]:
    """Copy the reference modules of the items the patch touches into ``into``, apply it, and
    return those items. Raises ``patching.PatchDoesNotApply`` when the patch no longer applies."""
    items = _with_references([path.removesuffix(".py") for path in patched_files(diff)], into)
    apply_patch(diff, into)
    return items


def _with_references(modules: list[str], into: Path) -> list[catalog.Item]:
    """Copy every reference module of the items ``modules`` belong to into ``into``: a variant
    then holds only the modules it replaces, even for items of several modules (#40, #45, #57)."""
    items = _items_of_modules(modules)
    for module in {m for item in items for m in item.modules}:
        target = into / f"{module}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(redirect.reference_dir() / f"{module}.py", target)
    return items


@pytest.mark.parametrize("variant", _alternatives(), ids=lambda p: p.name)
def test_alternative_passes(pytester: pytest.Pytester, variant: Path, tmp_path: Path) -> None:
    modules = ["/".join(p.relative_to(variant).with_suffix("").parts) for p in variant.rglob("*.py")]
    impl = tmp_path / variant.name
    items = _with_references(modules, impl)
    shutil.copytree(variant, impl, dirs_exist_ok=True)
    result, failed = _run_variant(pytester, impl, items)
    assert result.ret == 0 and failed == 0, f"alternative {variant.name} must pass:\n{result.stdout.str()[-3000:]}"
    assert result.parseoutcomes().get("passed", 0) > 0


@pytest.mark.parametrize("mistake", _mistakes(), ids=lambda p: p.stem)
def test_mistake_is_caught(pytester: pytest.Pytester, mistake: Path, tmp_path: Path) -> None:
    impl = tmp_path / mistake.stem
    items = apply_mistake(mistake, impl)
    result, failed = _run_variant(pytester, impl, items)
    assert failed > 0, f"{mistake.name} passed every test: the tests do not catch its mistake"


def test_every_mistake_names_what_catches_it() -> None:
    for diff in _mistakes():
        header = diff.read_text().split("\n--- a/", 1)[0]
        assert len(header.split()) >= 8, f"{diff.name}: say what the mistake is and which test catches it"


def _items_with_tests() -> list[catalog.Item]:
    return [i for i in catalog.all_items() if in_canon(i)]


@pytest.mark.parametrize("item", _items_with_tests(), ids=lambda i: i.slug)
def test_reference_passes_and_scores_five(pytester: pytest.Pytester, item: catalog.Item) -> None:
    result = pytester.runpytest(f"--canon-item={item.number}", "--impl=canon_refs", "--canon-min-score=5", "-q",
                                "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-4000:]
    result.stdout.fnmatch_lines([f"*#{item.number} {item.slug}*5/5*strong*"])
