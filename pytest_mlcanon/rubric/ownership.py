"""Which code of a module shared by several items each item is judged on.

``nn/normalization.py`` holds #13 BatchNorm and #14 LayerNorm; each item's static axes (Shapes,
Numerics, API fluency, Explanation, and the run-time shape comments) judge only the code that is
its own. An item owns its public names (the catalog's ``names``: ``batchnorm_forward``, ...) and
the module's other top-level functions and classes that these reach through names, directly or
through other helpers (``_check_batchnorm_args``); reaching stops at another item's public name
(``CrossAttention(MultiHeadAttention)``: #28 is not judged on #26's class). A top-level function
or class that only other items reach is left out of this item's judging; everything else (helpers
both items use, helpers no item reaches, imports, constants, the module docstring) counts for every
item of the module. A module that holds one item, or an item without ``names``, is judged whole.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache

from pytest_mlcanon import catalog
from pytest_mlcanon.rubric.source import Source, walk

_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def for_item(source: Source, item: catalog.Item, module: str) -> Source:
    """``source`` (the learner's ``module``, ``nn/normalization``) as ``item`` is judged on it: without
    the top-level functions and classes that belong only to the other items living in the module.
    The same ``source`` when nothing is left out."""
    mates = [m for m in catalog.items_for_module(module) if m.number != item.number]
    if not item.names or not any(m.names for m in mates):
        return source
    tree = _pruned(source.tree, tuple(item.names), tuple(tuple(m.names) for m in mates))
    return source if tree is source.tree else replace(source, tree=tree)


def left_out_lines(source: Source, scoped: Source) -> frozenset[int]:
    """The lines of ``source`` (decorators included) that ``scoped`` leaves out."""
    kept = {id(node) for node in scoped.tree.body}
    lines: set[int] = set()
    for node in source.tree.body:
        if id(node) not in kept:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            lines.update(range(first, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)


@lru_cache(maxsize=256)
def _pruned(tree: ast.Module, own: tuple[str, ...], others: tuple[tuple[str, ...], ...]) -> ast.Module:
    """``tree`` less the units only ``others`` reach (the same tree when none is dropped). Remembered per
    tree (trees from ``source.load`` are shared through its parse cache and never mutated), so the
    rules' per-node caches keep working for an item scored again."""
    units = _units(tree)
    public = {name for names in (own, *others) for name in names}
    mine = _reach(units, own, public - set(own), _aliased(tree, own))
    theirs: set[str] = set()
    for names in others:
        theirs |= _reach(units, names, public - set(names), _aliased(tree, names))
    dropped = theirs - mine
    if not dropped:
        return tree
    body = [node for node in tree.body if not (isinstance(node, _UNITS) and node.name in dropped)]
    return ast.Module(body=body, type_ignores=tree.type_ignores)


def _units(tree: ast.Module) -> dict[str, set[str]]:
    """Each top-level function and class -> the names it reads (decorators, bases, defaults, body)."""
    return {node.name: _names_read(node) for node in tree.body if isinstance(node, _UNITS)}


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _aliased(tree: ast.Module, names: Iterable[str]) -> set[str]:
    """Names read by top-level assignments binding one of ``names`` (``layernorm_forward = _ln``)."""
    wanted = set(names)
    found: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        if any(isinstance(t, ast.Name) and t.id in wanted for t in targets):
            found |= _names_read(node)
    return found


def _reach(units: dict[str, set[str]], roots: Iterable[str], barriers: set[str], aliased: set[str]) -> set[str]:
    """The units reached from ``roots`` (and the names their aliases read) through names, not passing
    through ``barriers`` (other items' public names)."""
    seen: set[str] = set()
    stack = [name for name in (*roots, *aliased) if name in units]
    while stack:
        name = stack.pop()
        if name in seen or (name in barriers and name not in roots):
            continue
        seen.add(name)
        stack.extend(n for n in units[name] if n in units and n not in seen)
    return seen
