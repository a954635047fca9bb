"""Which submissions a folder holds: one per student folder, or the folder itself when it is one.

Each student folder is searched the way the plugin finds a learner directory (``impl.discover``):
``practice/``, ``src/mlbook/``, ``mlbook/``, the folder itself, or the one folder below it laid out
like the canon. A student folder with none, or with several, becomes a row saying so. Student ids
are the folder names, made safe for file names and kept unique.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pytest_mlcanon import impl

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Submission:
    student: str
    folder: Path
    impl: Path | None
    problem: str = ""


class SubmissionsError(ValueError):
    """The submissions folder cannot be used; the message says why."""


def find(root: Path) -> list[Submission]:
    """The submissions under ``root``, sorted by student id."""
    if not root.is_dir():
        raise SubmissionsError(f"{root}: no such folder")
    if impl.looks_like_canon(root):
        return [Submission(_safe(root.resolve().name), root, root.resolve())]
    found: list[Submission] = []
    taken: set[str] = set()
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        student = _unique(_safe(folder.name), taken)
        try:
            located = impl.discover(folder)
        except impl.ImplError as exc:
            found.append(Submission(student, folder, None, str(exc).replace(str(folder), student)))
            continue
        problem = "" if located else "no folder laid out like the canon (<area>/<module>.py)"
        found.append(Submission(student, folder, located, problem))
    if not found:
        raise SubmissionsError(f"{root}: no student folders (expected one sub-folder per student)")
    return found


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name).strip("._") or "student"


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate
