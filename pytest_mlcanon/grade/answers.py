"""Which reference files hold an item's answers, so a grading job can be kept from reading them.

An item's own reference modules hold its answers, and so does any other reference module that
defines one of its public names: the capstone's ``preference_stage`` defines ``dpo_loss``,
``run_dpo`` and the GRPO functions, and the posttrain references define what the capstone asks for,
so a DPO submission could forward to ``canon_refs.capstone.preference_stage.dpo_loss`` and earn its
points from a reference (the red-team round of stop 32). Those *twins* are hidden like the item's
own modules, unless the item needs them: the modules of the items it builds on (it reads their
references where the learner did not write them), the modules its tests import and the modules its
reference imports, followed through the references.

Only the grader's own files are read here (the references and the canon's tests), by ``ast``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.layout import reference_dir, tests_dir


def answer_modules(item: catalog.Item) -> tuple[str, ...]:
    """The item's own modules and the other reference modules that define one of its public names and
    that it does not need (``area/module``)."""
    return _answer_modules(item.slug)


@functools.cache
def _answer_modules(slug: str) -> tuple[str, ...]:
    item = catalog.get(slug)
    defined = _public_names()
    mine = set().union(*(defined.get(module, set()) for module in item.modules))
    needed = _needed(item)
    twins = sorted(module for module, names in defined.items()
                   if module not in item.modules and module not in needed and names & mine)
    return (*item.modules, *twins)


@functools.cache
def _public_names() -> dict[str, frozenset[str]]:
    """Each reference module's public top-level functions and classes."""
    base = reference_dir()
    found = {}
    for path in sorted(base.rglob("*.py")):
        if path.name.startswith("_") or "__pycache__" in path.parts:
            continue
        tree = _parse(path)
        if tree is not None:
            found[path.relative_to(base).with_suffix("").as_posix()] = frozenset(
                node.name for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"))
    return found


def _needed(item: catalog.Item) -> set[str]:
    """The modules of the items it builds on (``depends_on``), and the reference modules the item's tests
    and its own reference import, followed through the references they reach."""
    needed = {module for other in catalog.builds_on(item) for module in other.modules}
    todo = [tests_dir() / name for name in item.test_files] + [reference_dir() / f"{m}.py" for m in item.modules]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imported_references(path):
            if module not in needed:
                needed.add(module)
                todo.append(reference_dir() / f"{module}.py")
    return needed


def _imported_references(path: Path) -> list[str]:
    """``area/module`` for each canon module a file imports (``scan.canon_imports``, which scan reads
    this module for: imported here, where it is used)."""
    from pytest_mlcanon.grade.scan import canon_imports

    tree = _parse(path)
    module = path.relative_to(path.parents[1]).with_suffix("").as_posix()
    return canon_imports(tree, module) if tree is not None else []


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
