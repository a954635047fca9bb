"""The seed's three practice chapters, and the daily loop around them.

* :mod:`.cheatsheet`: NumPy beside PyTorch, one executable row per operation (``mlcanon cheatsheet``).
* :mod:`.shapes`: thirty "given these shapes, produce that shape" problems (``mlcanon shapes``).
* :mod:`.drills`: twenty-two timed drills at three tiers and three 60-minute mock sessions
  (``mlcanon drills``, ``mlcanon mock``).

Their content is data, in ``data/*.toml`` beside this file; the modules read it into typed records
and check it. :func:`load` is the one reader.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from pytest_mlcanon.datafiles import read_toml

DATA_DIR = Path(__file__).resolve().parent / "data"


class DataError(ValueError):
    """A chapter's data file is malformed; the message names the file and the entry."""


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed ``data/<name>.toml``."""
    return read_toml(DATA_DIR / f"{name}.toml", DataError)


def table(name: str, key: str) -> list[dict[str, Any]]:
    """The array of tables ``[[key]]`` of ``data/<name>.toml``."""
    entries = load(name).get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise DataError(f"{DATA_DIR / name}.toml: [[{key}]] is not an array of tables")
    return entries


T = TypeVar("T")


def pick(key: str, entries: Sequence[T], names: Callable[[T], tuple[str, ...]], *, what: str, listing: str,
         error: type[ValueError]) -> T:
    """The entry ``key`` names: a number from 1, one of ``names(entry)`` exactly, or a unique part of
    the first name. Anything else raises ``error`` with one line (close names, or where to list them)."""
    text = key.strip().lstrip("#")
    if text.isdigit():
        if 1 <= int(text) <= len(entries):
            return entries[int(text) - 1]
        raise error(f"unknown {what} {key!r}: they are numbered 1 to {len(entries)}")
    exact = [e for e in entries if text in names(e)]
    found = exact or [e for e in entries if text and text in names(e)[0]]
    if len(found) == 1:
        return found[0]
    if found:
        raise error(f"{what} {key!r} is ambiguous: {', '.join(names(e)[0] for e in found)}")
    close = difflib.get_close_matches(text, [names(e)[0] for e in entries], n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f" (run `{listing}` to list them)"
    raise error(f"unknown {what} {key!r}{hint}")
