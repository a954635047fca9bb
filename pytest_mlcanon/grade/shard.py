"""Splitting a class across CI matrix jobs (``--shard i/n``) and merging the shards' gradebooks.

The split is deterministic and balanced: students sorted by id, the k-th (from 0) goes to shard
``k % n + 1``. Every shard job sees the same folder, so they agree on the split without talking.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pytest_mlcanon.grade.gradebook import Gradebook

T = TypeVar("T")


class ShardError(ValueError):
    """A bad ``--shard`` value or an inconsistent set of shards."""


def parse(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); raises ShardError with the expected form otherwise."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ShardError(f"--shard {text!r}: expected i/n, e.g. 1/2") from None
    if not sep or n < 1 or not 1 <= i <= n:
        raise ShardError(f"--shard {text!r}: expected i/n with 1 <= i <= n")
    return i, n


def select(students: list[T], index: int, count: int, key: str = "student") -> list[T]:
    """This shard's share of ``students`` (objects with a ``student`` id)."""
    ordered = sorted(students, key=lambda s: str(getattr(s, key)))
    return [s for k, s in enumerate(ordered) if k % count == index - 1]


def load(path: Path) -> Gradebook:
    """A shard's gradebook from ``gradebook.json`` or from a folder holding one (at any depth)."""
    if path.is_dir():
        found = sorted(path.rglob("gradebook.json"))
        if len(found) != 1:
            raise ShardError(f"{path}: expected one gradebook.json, found {len(found)}")
        path = found[0]
    try:
        return Gradebook.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ShardError(f"{path}: not a gradebook: {exc}") from exc


def merge(books: list[Gradebook]) -> Gradebook:
    """One gradebook of the whole class; the shards must grade the same items, each student once."""
    if not books:
        raise ShardError("nothing to merge")
    items = books[0].items
    for book in books[1:]:
        if book.items != items:
            raise ShardError(f"the shards grade different items: {items} and {book.items}")
    seen: dict[str, str] = {}
    students = []
    for book in books:
        for student in book.students:
            if student.student in seen:
                raise ShardError(f"student {student.student!r} is in two shards ({seen[student.student]} and "
                                 f"{', '.join(book.shards) or '?'})")
            seen[student.student] = ", ".join(book.shards) or "?"
            students.append(student)
    shards = [s for book in books for s in book.shards]
    counts = {s.split("/")[1] for s in shards if "/" in s}
    if len(counts) == 1:
        total = int(counts.pop())
        missing = sorted(set(range(1, total + 1)) - {int(s.split("/")[0]) for s in shards})
        if missing:
            raise ShardError(f"shard(s) {', '.join(f'{m}/{total}' for m in missing)} missing from the merge")
    return Gradebook(items, books[0].titles, sorted(students, key=lambda s: s.student),
                     [seed for b in books for seed in b.seeds], shards,
                     list(dict.fromkeys(n for b in books for n in b.sandbox)),
                     list(dict.fromkeys(n for b in books for n in b.notes)), books[0].config,
                     max(b.elapsed_s for b in books), sum(b.workers for b in books),
                     unsandboxed=list(dict.fromkeys(m for b in books for m in b.unsandboxed)),
                     graded_at=min((b.graded_at for b in books if b.graded_at), default=""))
