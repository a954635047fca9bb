"""The report model shared by every renderer, and the writer that dispatches on the format."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES, ItemScore


@dataclass
class Report:
    """What one run found: the learner directory and a score per selected item."""

    impl: str
    items: list[ItemScore] = field(default_factory=list)
    min_score: int = 0

    @property
    def failed_items(self) -> list[ItemScore]:
        """Items that fail the run: one whose status fails it (``Status.fails_run``), and under
        ``min_score`` one without a score (a partial run) or scored below it."""
        return [i for i in self.items
                if i.status.fails_run or (self.min_score and (not i.scored or i.score < self.min_score))]

    def to_dict(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "min_score": self.min_score,
            "axes": {axis: AXIS_TITLES[axis] for axis in AXES},
            "items": [item.to_dict() for item in self.items],
        }


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so a reader never sees half.

    The file gets the mode any new file gets (0644 under the usual umask 022, 0600 under 077), not
    ``mkstemp``'s 0600: these are outputs (reports, gradebooks, a learner's state) that another user,
    a CI upload step after ``sudo -E mlcanon grade``, may have to read. Folders it makes follow the
    umask too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``):
    ``os.umask`` can only be read by setting it, which would race with other threads' files."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def write(report: Report, fmt: str, path: Path) -> None:
    """Render ``report`` as ``json`` or ``markdown`` into ``path``."""
    from pytest_mlcanon.reports import markdown

    if fmt == "json":
        atomic_write(path, json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    elif fmt == "markdown":
        atomic_write(path, markdown.render(report))
    else:
        raise ValueError(f"unknown report format {fmt!r}: expected json or markdown")
