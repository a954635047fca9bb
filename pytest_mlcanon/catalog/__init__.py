"""The catalog: the single source of truth for the sixty items of the canon.

The items are data, ``data/items.toml`` beside this file (one ``[[item]]`` table each, named keys,
described at the top of the file); :func:`all_items` reads it once into typed :class:`Item` records
and rejects a malformed table with one line naming the file, the item and the key.
Everything else (selection, collection, the redirect, the rubric, the CLI) reads items from here.
An item is addressed by its slug (``posttrain/dpo``), its number (``55``), a glob over slugs
(``transformer/*``), a block (``block:3``), or a comma list of any of these.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from pytest_mlcanon.datafiles import read_toml

DATA_DIR = Path(__file__).resolve().parent / "data"

__all__ = ["CatalogDataError", "Item", "UnknownItemError", "all_items", "builds_on", "get", "items_for_module", "items_for_test_file",
           "module_mates", "select"]


@dataclass(frozen=True)
class Item:
    """One canon item.

    ``modules`` are paths under ``canon_refs/`` without ``.py`` (``posttrain/dpo``); ``test_files`` are
    file names under ``canon_tests/``; ``forbidden`` are dotted names (a module prefix such as
    ``sklearn`` or a callable such as ``torch.nn.functional.scaled_dot_product_attention``) that the
    learner's file may not use for this item. ``depends_on`` are the items whose modules the
    reference imports; ``after`` the earlier items the seed's learning order puts first. ``names``
    are, for an item sharing its module with another, the public names that are this item's own.
    """

    number: int
    slug: str
    title: str
    level: str
    block: int
    modules: tuple[str, ...]
    test_files: tuple[str, ...]
    minutes: int
    taught_in: str
    depends_on: tuple[int, ...]
    forbidden: tuple[str, ...]
    framework: str
    after: tuple[int, ...]
    names: tuple[str, ...]

    @property
    def label(self) -> str:
        """``#55 posttrain/dpo``: how reports name the item."""
        return f"#{self.number} {self.slug}"

    @property
    def module_files(self) -> tuple[str, ...]:
        """Relative file paths of the item's modules (``posttrain/dpo.py``)."""
        return tuple(f"{m}.py" for m in self.modules)


class UnknownItemError(ValueError):
    """A selector that names no item; the message suggests the closest slugs."""


class CatalogDataError(ValueError):
    """A data file of the catalog is malformed; the message names the file, the entry and the key."""


_SCALARS: dict[str, type] = {"int": int, "str": str}


def typed_entries(name: str, key: str, annotations: dict[str, str]) -> list[dict[str, Any]]:
    """The ``[[key]]`` tables of ``data/<name>.toml``, each holding exactly the keys of ``annotations``
    with values of the annotated types (``int``, ``str``, or ``tuple[int, ...]`` / ``tuple[str, ...]``
    for an array, converted to a tuple). Raises CatalogDataError naming the entry and the key."""
    where = f"{DATA_DIR / name}.toml"
    entries = read_toml(DATA_DIR / f"{name}.toml", CatalogDataError).get(key)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CatalogDataError(f"{where}: [[{key}]] is not an array of tables")
    for index, entry in enumerate(entries, 1):
        label = f"{where}: [[{key}]] #{index}"
        if set(entry) != set(annotations):
            missing, unknown = sorted(set(annotations) - set(entry)), sorted(set(entry) - set(annotations))
            raise CatalogDataError(f"{label}: missing keys {missing}, unknown keys {unknown}")
        for field, annotation in annotations.items():
            array = annotation.startswith("tuple[")
            kind = _SCALARS[annotation.removeprefix("tuple[").split(",")[0].rstrip("]")]
            values = entry[field] if array and isinstance(entry[field], list) else [entry[field]]
            if (array and not isinstance(entry[field], list)) or not all(
                    isinstance(v, kind) and not isinstance(v, bool) for v in values):
                raise CatalogDataError(f"{label}: {field} must be {annotation}, got {entry[field]!r}")
            if array:
                entry[field] = tuple(values)
    return entries


@cache
def all_items() -> tuple[Item, ...]:
    """All sixty items in canon order, from ``data/items.toml``."""
    items = tuple(Item(**entry) for entry in typed_entries("items", "item", _annotations(Item)))
    if [item.number for item in items] != list(range(1, len(items) + 1)):
        raise CatalogDataError(f"{DATA_DIR / 'items.toml'}: items must be numbered 1, 2, ... in order")
    return items


def _annotations(record: type) -> dict[str, str]:
    return {f.name: str(f.type) for f in fields(record)}


@cache
def _by_slug() -> dict[str, Item]:
    return {item.slug: item for item in all_items()}


def get(key: str | int) -> Item:
    """The item named by a slug or a number; raises UnknownItemError with suggestions otherwise."""
    text = str(key).strip().lstrip("#")
    if text.isdigit():
        number = int(text)
        if 1 <= number <= len(all_items()):
            return all_items()[number - 1]
        raise UnknownItemError(f"unknown canon item {key!r}: numbers run from 1 to {len(all_items())}")
    item = _by_slug().get(text.removesuffix(".py"))
    if item is None:
        item = _by_module().get(text.removesuffix(".py"), (None,))[0]
    if item is None:
        raise UnknownItemError(_unknown_message(text))
    return item


def _unknown_message(text: str) -> str:
    candidates = list(dict.fromkeys([*_by_slug(), *_by_module()]))
    close = difflib.get_close_matches(text, candidates, n=3, cutoff=0.5)
    if not close:
        tail = text.rsplit("/", 1)[-1]
        close = [s for s in _by_slug() if tail and tail in s][:3]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown canon item {text!r}{hint} (run `mlcanon list` to see all sixty)"


@cache
def _by_module() -> dict[str, tuple[Item, ...]]:
    table: dict[str, list[Item]] = {}
    for item in all_items():
        for module in item.modules:
            table.setdefault(module, []).append(item)
    return {module: tuple(items) for module, items in table.items()}


def items_for_module(module: str) -> tuple[Item, ...]:
    """Items implemented (at least partly) in ``<area>/<module>`` (``transformer/multihead`` -> #26, #28)."""
    return _by_module().get(module.removesuffix(".py"), ())


def module_mates(item: Item) -> tuple[Item, ...]:
    """Other items implemented in one of this item's modules (#28 for #26: both in transformer/multihead)."""
    mates = {other.number: other for module in item.modules for other in items_for_module(module)
             if other.number != item.number}
    return tuple(mates[n] for n in sorted(mates))


def builds_on(item: Item) -> tuple[Item, ...]:
    """Every item this one builds on, directly or through another (its ``depends_on``, closed), in canon order."""
    seen: dict[int, Item] = {}
    stack = list(item.depends_on)
    while stack:
        number = stack.pop()
        if number in seen or number == item.number:
            continue
        seen[number] = get(number)
        stack.extend(seen[number].depends_on)
    return tuple(seen[n] for n in sorted(seen))


def modules_built_on(item: Item) -> dict[str, tuple[Item, ...]]:
    """Each module of the items ``item`` builds on (:func:`builds_on`), other than its own, once, with
    the items that live in it, in canon order: ``transformer/blocks`` holds both #29 and #30, and is
    one module to write, serve or list."""
    found: dict[str, tuple[Item, ...]] = {}
    for other in builds_on(item):
        for module in other.modules:
            if module not in item.modules:
                found[module] = (*found.get(module, ()), other)
    return found


@cache
def items_for_test_file(name: str) -> tuple[Item, ...]:
    """Items whose reference tests live in ``canon_tests/<name>``."""
    return tuple(item for item in all_items() if name in item.test_files)


def select(selector: str) -> tuple[Item, ...]:
    """Resolve a selector to items in canon order, without duplicates.

    Accepts slugs, numbers, module paths, globs over slugs (``transformer/*``), blocks (``block:3``),
    and comma lists of these. Raises UnknownItemError naming the first part that matched nothing.
    """
    chosen: dict[int, Item] = {}
    parts = [part.strip() for part in selector.split(",") if part.strip()]
    if not parts:
        raise UnknownItemError("empty canon item selector: give a slug, a number, a glob or block:N")
    for part in parts:
        for item in _select_one(part):
            chosen[item.number] = item
    return tuple(chosen[n] for n in sorted(chosen))


def _select_one(part: str) -> tuple[Item, ...]:
    if part.lower().startswith("block:"):
        block = part.split(":", 1)[1].strip()
        found = tuple(item for item in all_items() if str(item.block) == block)
        if not found:
            blocks = sorted({item.block for item in all_items()})
            raise UnknownItemError(f"unknown canon block {block!r}: blocks are {blocks[0]} to {blocks[-1]}")
        return found
    if any(ch in part for ch in "*?["):
        found = tuple(item for item in all_items() if fnmatch.fnmatchcase(item.slug, part))
        if not found:
            raise UnknownItemError(f"canon item glob {part!r} matches no slug (run `mlcanon list`)")
        return found
    if "-" in part and all(p.strip().isdigit() for p in part.split("-", 1)):
        lo, hi = (int(p) for p in part.split("-", 1))
        return tuple(get(n) for n in range(lo, hi + 1))
    text = part.removesuffix(".py")
    if text in _by_module() and text not in _by_slug():
        return _by_module()[text]
    return (get(part),)
