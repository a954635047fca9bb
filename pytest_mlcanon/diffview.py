"""The seed's "read the reference module and diff it against what you wrote" step (``mlcanon diff``).

:func:`latest_attempt` finds what the learner wrote: the practice file while it holds work, else
the newest copy ``mlcanon drill`` or ``mlcanon reset`` kept in ``.mlcanon/attempts/<time>/``.
:func:`side_by_side` lays it beside the reference, line numbers on both sides, long runs of equal
lines folded, one marker per row: ``|`` changed, ``<`` only yours, ``>`` only the reference.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from pytest_mlcanon import stubs
from pytest_mlcanon.drill import ATTEMPTS_DIR
from pytest_mlcanon.state import state_dir

CHANGED, ONLY_YOURS, ONLY_REFERENCE, SAME = "|", "<", ">", " "
_NUMBER_WIDTH = 4


@dataclass(frozen=True)
class Attempt:
    """One file the learner wrote for ``module``: where it is and where it came from."""

    module: str
    path: Path
    archived: bool  # True: a copy in .mlcanon/attempts/; False: the practice file itself


def archived(root: Path, module: str) -> list[Path]:
    """The copies of ``module`` kept in ``.mlcanon/attempts/``, oldest first."""
    base = state_dir(root) / ATTEMPTS_DIR
    if not base.is_dir():
        return []
    return sorted(base.glob(f"*/{module}.py"), key=lambda p: p.relative_to(base).parts[0])


def holds_work(path: Path, module: str) -> bool:
    """True when ``path`` exists and is more than the clean stub of ``module``."""
    if not path.is_file() or stubs.unimplemented(path):
        return False
    try:
        return path.read_text(encoding="utf-8") != stubs.stub_source(module)
    except (OSError, UnicodeDecodeError, stubs.NoReferenceError):
        return True


def latest_attempt(root: Path, practice: Path, module: str, *, archived_only: bool = False) -> Attempt | None:
    """The practice file while it holds work (unless ``archived_only``), else the newest archived copy."""
    current = practice / f"{module}.py"
    if not archived_only and holds_work(current, module):
        return Attempt(module, current, archived=False)
    kept = archived(root, module)
    return Attempt(module, kept[-1], archived=True) if kept else None


@dataclass(frozen=True)
class Counts:
    changed: int = 0
    only_yours: int = 0
    only_reference: int = 0


def counts(mine: Sequence[str], reference: Sequence[str]) -> Counts:
    """How many lines changed, and how many exist on one side only."""
    changed = yours = theirs = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mine, reference, autojunk=False).get_opcodes():
        if tag == "replace":
            changed += min(i2 - i1, j2 - j1)
            yours += max(0, (i2 - i1) - (j2 - j1))
            theirs += max(0, (j2 - j1) - (i2 - i1))
        elif tag == "delete":
            yours += i2 - i1
        elif tag == "insert":
            theirs += j2 - j1
    return Counts(changed, yours, theirs)


def side_by_side(mine: Sequence[str], reference: Sequence[str], width: int, context: int = 3) -> list[str]:
    """Rows of ``width`` characters: your line, a marker, the reference's line; equal runs longer than
    ``2 * context`` are folded to their first and last ``context`` lines."""
    column = max(20, (width - 3) // 2)
    rows: list[str] = []

    def row(left: int | None, right: int | None, mark: str) -> None:
        rows.append(f"{_cell(mine, left, column)} {mark} {_cell(reference, right, column)}".rstrip())

    opcodes = difflib.SequenceMatcher(None, mine, reference, autojunk=False).get_opcodes()
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            first, last = index == 0, index == len(opcodes) - 1
            head = 0 if first else context
            tail = 0 if last else context
            if i2 - i1 > head + tail + 1:
                for k in range(head):
                    row(i1 + k, j1 + k, SAME)
                rows.append(f"{'':{_NUMBER_WIDTH}} ... {i2 - i1 - head - tail} equal line(s) ...")
                for k in range(i2 - i1 - tail, i2 - i1):
                    row(i1 + k, j1 + k, SAME)
            else:
                for k in range(i2 - i1):
                    row(i1 + k, j1 + k, SAME)
            continue
        mark = {"replace": CHANGED, "delete": ONLY_YOURS, "insert": ONLY_REFERENCE}[tag]
        for left, right in zip_longest(range(i1, i2), range(j1, j2)):
            row(left, right, mark if left is not None and right is not None else
                (ONLY_YOURS if right is None else ONLY_REFERENCE))
    return rows


def _cell(lines: Sequence[str], index: int | None, column: int) -> str:
    if index is None:
        return " " * column
    text = lines[index].rstrip("\n").expandtabs(4)
    room = column - _NUMBER_WIDTH - 1
    if len(text) > room:
        text = text[: room - 1] + "~"
    return f"{index + 1:>{_NUMBER_WIDTH}} {text:<{room}}"


def unified(mine: Sequence[str], reference: Sequence[str], yours: str, theirs: str, context: int = 3) -> list[str]:
    """The same comparison as a unified diff (for piping into other tools)."""
    return [line.rstrip("\n") for line in
            difflib.unified_diff(list(mine), list(reference), fromfile=yours, tofile=theirs, n=context)]
