"""The narration script (the two-minute set-up, the five-minute walkthrough, what to do when you
stall) and one interviewer's follow-up question per item, from ``data/explain.toml``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pytest_mlcanon import catalog
from pytest_mlcanon.chapters import DataError, load

SETUP_MINUTES = 2
WALKTHROUGH_MINUTES = 5


@dataclass(frozen=True)
class Script:
    setup: tuple[str, ...]
    walkthrough: tuple[str, ...]
    stall: tuple[str, ...]


@cache
def script() -> Script:
    data = load("explain")
    parts = {}
    for key in ("setup", "walkthrough", "stall"):
        lines = data.get(key)
        if not isinstance(lines, list) or not lines or not all(isinstance(s, str) for s in lines):
            raise DataError(f"explain.toml: {key} must be a non-empty list of prompts")
        parts[key] = tuple(lines)
    return Script(**parts)


@cache
def _follow_ups() -> dict[str, str]:
    table = load("explain").get("follow_up", {})
    missing = [item.slug for item in catalog.all_items() if not isinstance(table.get(item.slug), str)]
    if missing:
        raise DataError(f"explain.toml: no follow-up question for {', '.join(missing)}")
    return dict(table)


def follow_up(item: catalog.Item) -> str:
    """The question an interviewer asks once ``item`` works."""
    return _follow_ups()[item.slug]
