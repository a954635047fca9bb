"""Three escalating hints for each of the sixty items (``mlcanon hint ITEM --level 1|2|3``).

* Level 1, **the one equation and the shapes**: what to compute, on which shapes; enough to start
  from a blank file if the maths has slipped.
* Level 2, **the pitfall**: the numerics or indexing trap the item's tests (and interviewers)
  probe: the off-by-one, the mask value, the eps placement, the degenerate case.
* Level 3, **the skeleton**: signatures and the shape line of every intermediate, with the bodies
  left out, generated from the reference (``stubs.skeleton``), so it always matches the API.

Levels 1 and 2 are data, ``data/hints.toml`` beside this module (one ``[[hint]]`` per item).
Each level costs something: asking is recorded on the running attempt (``hints`` in
``progress.json``), so a pass with a level-3 hint reads differently from a clean one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon.catalog import Item

LEVELS = (1, 2, 3)
LEVEL_TITLES = {1: "the one equation and the shapes", 2: "the pitfall", 3: "the skeleton"}


@dataclass(frozen=True)
class ItemHints:
    """Levels 1 and 2 of one item (level 3 is a skeleton, see :func:`skeleton`)."""

    item: int
    equation: str
    pitfall: str


@cache
def all_hints() -> dict[int, ItemHints]:
    """Every item's levels 1 and 2 by item number, from ``data/hints.toml``."""
    from pytest_mlcanon.catalog import typed_entries

    entries = typed_entries("hints", "hint", {"item": "int", "equation": "str", "pitfall": "str"})
    return {entry["item"]: ItemHints(**entry) for entry in entries}


def hint(item: Item, level: int) -> str:
    """The item's hint at ``level`` (1, 2 or 3); raises ValueError for another level."""
    if level not in LEVELS:
        raise ValueError(f"hint level must be 1, 2 or 3, got {level!r}")
    if level == 1:
        return all_hints()[item.number].equation
    if level == 2:
        return all_hints()[item.number].pitfall
    return skeleton(item)


def skeleton(item: Item) -> str:
    """Level 3, generated from the item's references; raises LookupError when the installed canon
    lacks one of them."""
    from pytest_mlcanon import stubs

    if not stubs.has_reference(item):
        raise LookupError(f"{item.label} has no reference in this version of the canon, so no skeleton "
                          "(levels 1 and 2 still work)")
    return "\n".join(stubs.skeleton(module, item.names or None) for module in item.modules)
